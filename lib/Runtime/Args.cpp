// Kernel and kernel-set arguments: set by name or all at once, validated before launch, grids evaluated from the manifest.
#include "Args.h"

#include "Error.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>

namespace {
/// Points `args.pointers` into its zeroed buffer.
void layOut(tessera_args &args) {
  args.buffer.assign((args.list.argBufferSize + 7) / 8, 0);
  args.isSet.assign(args.list.args.size(), false);
  auto *bytes = reinterpret_cast<unsigned char *>(args.buffer.data());
  for (const tessera::runtime::ArgInfo &arg : args.list.args)
    args.pointers.push_back(bytes + arg.offset);
}
} // namespace

tessera_args::tessera_args(const tessera_kernel &kernel) : kernel(&kernel), list(*kernel.info) { layOut(*this); }
tessera_args::tessera_args(const tessera_kernel_set &set) : set(&set), list(*set.info) { layOut(*this); }
std::string tessera_args::owner() const { return (set ? "kernel set " : "kernel ") + list.name; }

namespace tessera::runtime {

namespace {

const Device &deviceOf(const tessera_args &args) {
  return *(args.kernel ? args.kernel->bundle : args.set->bundle)->device;
}

std::string argLabel(const tessera_args &args, const std::string &name) {
  return "argument '" + name + "' of " + args.owner();
}
std::string argLabel(const KernelInfo &kernel, const std::string &name) {
  return "argument '" + name + "' of kernel " + kernel.name;
}

/// The value of an i32 or i64 argument stored at `at`.
int64_t integerAt(ArgType type, const void *at) {
  if (type == ArgType::I32) {
    int32_t v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  int64_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

/// The values grid expressions see: the kernel's integer arguments and the device's processor count.
class ArgValues final : public grid::Values {
public:
  explicit ArgValues(const tessera_args &args) : args_(args) {}
  int64_t arg(int index) const override { return integerAt(args_.list.args[index].type, args_.pointers[index]); }
  std::optional<int64_t> smCount() const override {
    uint32_t count = deviceOf(args_).processorCount;
    return count ? std::optional<int64_t>(count) : std::nullopt;
  }
  std::string smCountSource() const override {
    return std::string("the '") + deviceOf(args_).backend->name + "' backend";
  }

private:
  const tessera_args &args_;
};

/// Evaluates one expression over the arguments; a failure message starts with `where`.
tessera_status evaluate(const tessera_args &args, const GridExpr &e, const std::string &where, int64_t &out) {
  std::string error;
  std::optional<int64_t> value = grid::evaluate(e, ArgValues(args), error);
  if (!value)
    return fail(TESSERA_ERROR_ARGUMENT, where + ": " + error);
  out = *value;
  return TESSERA_SUCCESS;
}

/// Encodes the tensor map `map` for these (complete) arguments into `out` (128 bytes),
/// through the kernel's cache of the last encoding: the driver call is skipped when the tensor
/// and its shape did not change.
tessera_status encodeTensorMap(const tessera_args &args, const Device &device, const TensorMapInfo &map, void *out) {
  const KernelInfo &kernel = *args.kernel->info;
  const ArgInfo &tensor = kernel.args[map.tensor];
  std::string label = argLabel(kernel, tensor.name);
  if (!device.backend->encode_tensor_map)
    return fail(TESSERA_ERROR_ARGUMENT, "kernel " + kernel.name + " copies '" + tensor.name + "' with TMA, which the '" +
                                            device.backend->name + "' backend does not have");
  const std::string dtype = tensor.dtype.value_or("");
  size_t elementBytes = dtype == "f32" ? 4 : dtype == "f16" || dtype == "bf16" ? 2 : 0;
  if (!elementBytes)
    return fail(TESSERA_ERROR_ARGUMENT, label + ": TMA copies f16, bf16 or f32 tensors, not '" + dtype + "'");
  tessera_tensor_map_desc desc = {};
  desc.dtype = tensor.dtype->c_str();
  std::memcpy(&desc.base, args.pointers[map.tensor], sizeof(void *));
  desc.rank = static_cast<uint32_t>(map.dims.size());
  for (size_t d = 0; d < map.dims.size(); ++d) {
    std::string where = "kernel " + kernel.name + ": tensor map '" + kernel.args[map.arg].name + "' dims[" + std::to_string(d) + "]";
    int64_t extent = 0;
    if (tessera_status s = evaluate(args, map.dims[d], where, extent))
      return s;
    // An empty dimension is never read (the kernel skips empty key ranges; an empty query
    // range launches nothing), but the driver rejects a zero extent.
    desc.dims[d] = static_cast<uint64_t>(std::max<int64_t>(extent, 1));
    desc.box[d] = map.box[d];
  }
  for (size_t d = 1; d < map.dims.size(); ++d) {
    int64_t stride = 0;
    if (tessera_status s = evaluate(args, map.strides[d - 1], label, stride))
      return s;
    // The stride of an extent-1 dimension is never applied: any valid value will do.
    if (desc.dims[d] == 1)
      stride = static_cast<int64_t>(desc.dims[d - 1]) * (d > 1 ? static_cast<int64_t>(desc.stride_bytes[d - 2] / elementBytes) : 1);
    if (stride <= 0 || (stride * elementBytes) % 16 != 0)
      return fail(TESSERA_ERROR_ARGUMENT, label + ": TMA needs positive strides that are multiples of 16 bytes; '" +
                                              kernel.args[map.strides[d - 1].kind == GridExpr::Kind::Arg ? map.strides[d - 1].arg : map.tensor].name +
                                              "' = " + std::to_string(stride) + " elements of " + std::to_string(elementBytes) + " bytes");
    desc.stride_bytes[d - 1] = static_cast<uint64_t>(stride) * elementBytes;
  }
  if (reinterpret_cast<uintptr_t>(desc.base) % 16 != 0)
    return fail(TESSERA_ERROR_ARGUMENT, label + ": TMA needs a 16-byte aligned address");
  return args.kernel->tensorMapCache.encode(device, map.arg, desc, out);
}

} // namespace

tessera_status TensorMapCache::encode(const Device &device, int arg, const tessera_tensor_map_desc &desc, void *out) const {
  auto same = [&](const tessera_tensor_map_desc &a) {
    return std::strcmp(a.dtype, desc.dtype) == 0 && a.base == desc.base && a.rank == desc.rank &&
           std::memcmp(a.dims, desc.dims, sizeof a.dims) == 0 &&
           std::memcmp(a.stride_bytes, desc.stride_bytes, sizeof a.stride_bytes) == 0 &&
           std::memcmp(a.box, desc.box, sizeof a.box) == 0;
  };
  std::lock_guard<std::mutex> lock(mutex_);
  Entry *entry = nullptr;
  for (auto &e : entries_)
    if (e->arg == arg)
      entry = e.get();
  if (!entry) {
    entries_.push_back(std::make_unique<Entry>());
    entry = entries_.back().get();
    entry->arg = arg;
    entry->desc = {};
  }
  if (!entry->desc.dtype || !same(entry->desc)) {
    entry->desc = {};
    if (tessera_status s = device.backend->encode_tensor_map(device.handle, &desc, entry->bytes))
      return s;
    entry->desc = desc;
  }
  std::memcpy(out, entry->bytes, sizeof entry->bytes);
  return TESSERA_SUCCESS;
}

namespace {

/// What the runtime does with an argument callers do not set, for the message refusing it.
const char *runtimeFilledWhy(ArgRole role) {
  switch (role) {
  case ArgRole::TensorMap: return " is a TMA tensor map the runtime encodes at launch; it is not set";
  case ArgRole::TileCounter: return " is the tile counter the runtime passes at launch; it is not set";
  default: return " is a workspace the runtime allocates for the launch; it is not set";
  }
}

/// Stores `*value` (of `type`) as argument `index`, after the checks every setter applies.
tessera_status storeArg(tessera_args &args, size_t index, ArgType type, const void *value) {
  const ArgInfo &arg = args.list.args[index];
  auto label = [&] { return argLabel(args, arg.name); }; // built for a message only, not per argument set
  if (arg.runtimeFilled)
    return fail(TESSERA_ERROR_ARGUMENT, label() + runtimeFilledWhy(arg.role));
  if (arg.type != type)
    return fail(TESSERA_ERROR_ARGUMENT, label() + " is " + argTypeName(arg.type) + ", not " + argTypeName(type));
  if (args.isSet[index])
    return fail(TESSERA_ERROR_ARGUMENT, label() + " is already set");
  if (type == ArgType::Ptr && *static_cast<void *const *>(value) == nullptr)
    return fail(TESSERA_ERROR_ARGUMENT, label() + " is a null pointer");
  bool integer = type == ArgType::I32 || type == ArgType::I64;
  if (integer && arg.role == ArgRole::Size && integerAt(type, value) < 0)
    return fail(TESSERA_ERROR_ARGUMENT, label() + " is a size and must not be negative (got " +
                                            std::to_string(integerAt(type, value)) + ")");
  std::memcpy(args.pointers[index], value, argSize(type));
  args.isSet[index] = true;
  return TESSERA_SUCCESS;
}

} // namespace

tessera_status setArg(tessera_args &args, const char *name, ArgType type, const void *value) {
  const ArgList &list = args.list;
  int index = list.argIndex(name);
  if (index < 0) {
    std::string known;
    for (const ArgInfo &arg : list.args)
      appendToList(known, arg.name);
    return fail(TESSERA_ERROR_ARGUMENT, args.owner() + " has no argument '" + name + "' (arguments: " + known + ")");
  }
  return storeArg(args, static_cast<size_t>(index), type, value);
}

tessera_status setAllArgs(tessera_args &args, const uint64_t *values, size_t count) {
  const ArgList &list = args.list;
  if (count != list.args.size())
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_args_set_all: " + args.owner() + " has " +
                                                    std::to_string(list.args.size()) + " arguments, got " +
                                                    std::to_string(count) + " values");
  for (size_t i = 0; i < count; ++i) {
    ArgType type = list.args[i].type;
    if (list.args[i].runtimeFilled)
      continue;
    // 4-byte arguments are the low 32 bits of their value, whatever the host's byte order.
    uint32_t low = static_cast<uint32_t>(values[i]);
    const void *value = argSize(type) == sizeof low ? static_cast<const void *>(&low) : &values[i];
    if (tessera_status s = storeArg(args, i, type, value))
      return s;
  }
  return TESSERA_SUCCESS;
}

namespace {

/// "kernel gemm: arguments not set: K, ldc", or success when every argument callers set is.
tessera_status checkAllSet(const tessera_args &args) {
  std::string unset;
  for (size_t i = 0; i < args.list.args.size(); ++i)
    if (!args.isSet[i] && !args.list.args[i].runtimeFilled)
      appendToList(unset, args.list.args[i].name);
  if (!unset.empty())
    return fail(TESSERA_ERROR_ARGUMENT, args.owner() + ": arguments not set: " + unset);
  return TESSERA_SUCCESS;
}

/// Encodes the tensor maps, passes the tile counter and launches on the backend; `args` are a
/// kernel's, complete, and `grid` is not empty.
tessera_status launchKernel(const tessera_args &args, const uint32_t grid[3], void *stream) {
  const KernelInfo &kernel = *args.kernel->info;
  const Device &device = deviceOf(args);
  tessera_backend_launch l = {};
  std::copy(grid, grid + 3, l.grid);
  // Tensor maps are encoded into a copy of the arguments: `args` stays as the caller set it.
  std::vector<uint64_t> buffer = args.buffer;
  std::vector<void *> pointers;
  auto *bytes = reinterpret_cast<unsigned char *>(buffer.data());
  for (const ArgInfo &arg : kernel.args)
    pointers.push_back(bytes + arg.offset);
  for (const TensorMapInfo &map : kernel.tensorMaps)
    if (tessera_status s = encodeTensorMap(args, device, map, pointers[map.arg]))
      return s;
  if (kernel.tileCounterArg >= 0) {
    void *counter = nullptr;
    if (tessera_status s = device.tileCounter(stream, counter))
      return s;
    std::memcpy(pointers[kernel.tileCounterArg], &counter, sizeof counter);
  }
  std::copy(kernel.block, kernel.block + 3, l.block);
  l.dynamic_lds_bytes = kernel.dynamicLdsBytes;
  l.arg_buffer = buffer.data();
  l.arg_buffer_size = kernel.argBufferSize;
  l.arg_pointers = pointers.data();
  l.arg_count = pointers.size();
  l.stream = stream;
  return device.backend->launch(device.handle, args.kernel->handle, &l);
}

/// One launch of a set, checked and evaluated before any device work.
struct SetLaunch {
  std::vector<std::unique_ptr<tessera_args>> kernels; ///< each kernel's arguments, launch order
  std::vector<std::array<uint32_t, 3>> grids;
  std::vector<size_t> bytes;                          ///< per workspace of the set
  std::vector<std::string> names;
};

/// The arguments of kernel `pos` of a set: the set's, picked by name.
std::unique_ptr<tessera_args> kernelArgs(const tessera_args &setArgs, size_t pos) {
  const tessera_kernel_set &set = *setArgs.set;
  auto args = std::make_unique<tessera_args>(*set.kernels[pos]);
  const std::vector<int> &argOf = set.info->argOf[pos];
  for (size_t i = 0; i < argOf.size(); ++i) {
    std::memcpy(args->pointers[i], setArgs.pointers[argOf[i]], argSize(args->list.args[i].type));
    args->isSet[i] = setArgs.isSet[argOf[i]];
  }
  return args;
}

tessera_status prepareSet(const tessera_args &args, SetLaunch &out) {
  const tessera_kernel_set &set = *args.set;
  if (tessera_status s = checkAllSet(args))
    return s;
  for (size_t pos = 0; pos < set.kernels.size(); ++pos) {
    out.kernels.push_back(kernelArgs(args, pos));
    if (tessera_status s = evaluateGrid(*out.kernels.back(), out.grids.emplace_back().data()))
      return s;
  }
  for (const KernelSetInfo::Workspace &w : set.info->workspaces) {
    const tessera_args &declaring = *out.kernels[w.kernel];
    const WorkspaceInfo &info = declaring.kernel->info->workspaces[w.workspace];
    const std::string &name = set.info->args[w.arg].name;
    std::string where = args.owner() + ": workspace '" + name + "' bytes " + info.bytesText;
    int64_t bytes = 0;
    if (tessera_status s = evaluate(declaring, info.bytes, where, bytes))
      return s;
    if (bytes < 0)
      return fail(TESSERA_ERROR_ARGUMENT, where + " = " + std::to_string(bytes) + " is negative");
    out.bytes.push_back(static_cast<size_t>(bytes));
    out.names.push_back(name);
  }
  return TESSERA_SUCCESS;
}

} // namespace

tessera_status evaluateGrid(const tessera_args &args, uint32_t grid[3]) {
  const KernelInfo &kernel = *args.kernel->info;
  if (tessera_status s = checkAllSet(args))
    return s;
  for (const DivisibleInfo &rule : kernel.divisible) {
    const ArgInfo &arg = kernel.args[rule.arg];
    int64_t value = integerAt(arg.type, args.pointers[rule.arg]), by = 0;
    std::string where = "kernel " + kernel.name + ": '" + arg.name + "'";
    if (tessera_status s = evaluate(args, rule.by, where, by))
      return s;
    if (by == 0 ? value != 0 : value % by != 0)
      return fail(TESSERA_ERROR_ARGUMENT, where + " = " + std::to_string(value) + " must be a multiple of " +
                                              rule.byText + " = " + std::to_string(by));
  }
  for (int d = 0; d < 3; ++d) {
    std::string where = "kernel " + kernel.name + ": grid[" + std::to_string(d) + "]";
    int64_t value = 0;
    if (tessera_status s = evaluate(args, kernel.grid[d], where, value))
      return s;
    if (value < 0 || value > std::numeric_limits<uint32_t>::max())
      return fail(TESSERA_ERROR_ARGUMENT, where + " = " + std::to_string(value) + " is outside [0, 2^32)");
    grid[d] = static_cast<uint32_t>(value);
  }
  return TESSERA_SUCCESS;
}

tessera_status launch(const tessera_args &args, void *stream) {
  const KernelInfo &kernel = *args.kernel->info;
  if (!kernel.workspaces.empty())
    return fail(TESSERA_ERROR_ARGUMENT, "kernel " + kernel.name + " shares the workspace '" +
                                            kernel.args[kernel.workspaces[0].arg].name + "' with kernel set '" +
                                            args.kernel->bundle->manifest.kernelSets[kernel.kernelSet].name +
                                            "': launch the set (tessera_launch_set)");
  uint32_t grid[3];
  if (tessera_status s = evaluateGrid(args, grid))
    return s;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
    return TESSERA_SUCCESS; // nothing to do, as for an empty tensor; drivers reject empty grids
  return launchKernel(args, grid, stream);
}

tessera_status launchSet(const tessera_args &args, void *stream) {
  const tessera_kernel_set &set = *args.set;
  SetLaunch plan;
  if (tessera_status s = prepareSet(args, plan))
    return s;
  const Device &device = deviceOf(args);
  // Held until every kernel is on the stream: launches of the set on one stream from two
  // threads must not interleave over the workspaces they share.
  auto lock = set.workspaces.lock();
  std::vector<void *> buffers;
  if (tessera_status s = set.workspaces.acquire(device, stream, plan.bytes, plan.names, args.owner(), buffers))
    return s;
  const std::vector<KernelSetInfo::Workspace> &workspaces = set.info->workspaces;
  for (size_t w = 0; w < workspaces.size(); ++w) {
    const WorkspaceInfo &info = set.kernels[workspaces[w].kernel]->info->workspaces[workspaces[w].workspace];
    if (info.zero && plan.bytes[w])
      if (tessera_status s = device.backend->memset_async(device.handle, buffers[w], 0, plan.bytes[w], stream))
        return s;
  }
  for (size_t pos = 0; pos < set.kernels.size(); ++pos) {
    tessera_args &kernelArgs = *plan.kernels[pos];
    for (const WorkspaceInfo &info : set.kernels[pos]->info->workspaces) {
      int shared = set.info->argOf[pos][info.arg];
      auto w = std::find_if(workspaces.begin(), workspaces.end(),
                            [&](const KernelSetInfo::Workspace &x) { return x.arg == shared; });
      std::memcpy(kernelArgs.pointers[info.arg], &buffers[w - workspaces.begin()], sizeof(void *));
    }
    const std::array<uint32_t, 3> &grid = plan.grids[pos];
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
      continue;
    if (tessera_status s = launchKernel(kernelArgs, grid.data(), stream))
      return s;
  }
  return TESSERA_SUCCESS;
}

tessera_status reserveSet(const tessera_args &args, void *stream) {
  SetLaunch plan;
  if (tessera_status s = prepareSet(args, plan))
    return s;
  auto lock = args.set->workspaces.lock();
  return args.set->workspaces.reserve(deviceOf(args), stream, plan.bytes, plan.names, args.owner());
}

} // namespace tessera::runtime

// The runtime's "sim" backend (tessera_backend.h): host memory with tracked allocations, kernels run by the simulator.
//
// Device pointers are host pointers. Every allocation is recorded with its size so that a
// kernel argument pointing anywhere inside one is bounds-checked against that allocation.
// Launches are synchronous; TESSERA_SIM_THREADS spreads a grid's workgroups over host threads.
#include "tessera/Runtime/tessera_backend.h"
#include "tessera/Sim/Simulator.h"
#include "tessera/Target/TargetInfo.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

namespace {

using namespace tessera;

struct SimDevice {
  const tessera_backend_host *host;
  std::string arch;
  std::mutex lock;
  std::map<uintptr_t, size_t> allocations; ///< start -> bytes
};

struct SimKernel {
  std::unique_ptr<sim::Kernel> kernel;
};

SimDevice &dev(void *device) { return *static_cast<SimDevice *>(device); }

tessera_status fail(SimDevice &d, tessera_status status, const std::string &message) {
  return d.host->fail(status, message.c_str());
}

std::string hex(const void *p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

/// The allocation holding byte `p`: its start and size, or {0, 0}.
std::pair<uintptr_t, size_t> allocationOf(SimDevice &d, const void *p) {
  std::lock_guard<std::mutex> guard(d.lock);
  uintptr_t at = reinterpret_cast<uintptr_t>(p);
  auto it = d.allocations.upper_bound(at);
  if (it == d.allocations.begin())
    return {0, 0};
  --it;
  if (at >= it->first + it->second)
    return {0, 0};
  return *it;
}

/// Checks that [p, p + bytes) lies in one allocation.
tessera_status checkRange(SimDevice &d, const void *p, size_t bytes, const char *what) {
  auto [start, size] = allocationOf(d, p);
  uintptr_t at = reinterpret_cast<uintptr_t>(p);
  if (size && bytes <= start + size - at)
    return TESSERA_SUCCESS;
  return fail(d, TESSERA_ERROR_INVALID_ARGUMENT,
              std::string(what) + ": [" + hex(p) + ", +" + std::to_string(bytes) +
                  " bytes) is not inside one simulator allocation" +
                  (size ? " (the allocation at " + hex(reinterpret_cast<void *>(start)) + " has " +
                              std::to_string(size) + " bytes)"
                        : ""));
}

tessera_status simOpen(const tessera_backend_host *host, int ordinal, const char *options, void **out) {
  std::string arch = options && *options ? options : "gfx942";
  if (ordinal != 0)
    return host->fail(TESSERA_ERROR_INVALID_ARGUMENT,
                      ("the simulator has one device, ordinal 0 (got " + std::to_string(ordinal) + ")").c_str());
  if (!lookupTarget(arch))
    return host->fail(TESSERA_ERROR_INVALID_ARGUMENT,
                      ("unknown simulator target '" + arch + "' (known: " + knownTargetNames() + ")").c_str());
  auto *d = new SimDevice;
  d->host = host;
  d->arch = arch;
  *out = d;
  return TESSERA_SUCCESS;
}

void simClose(void *device) {
  SimDevice *d = static_cast<SimDevice *>(device);
  for (auto &[start, bytes] : d->allocations)
    std::free(reinterpret_cast<void *>(start));
  delete d;
}

const char *simArch(void *device) { return dev(device).arch.c_str(); }

tessera_status simAlloc(void *device, size_t bytes, void **ptr) {
  SimDevice &d = dev(device);
  size_t rounded = (bytes + 255) / 256 * 256; // GPU allocations are at least 256-byte aligned
  void *p = std::aligned_alloc(256, rounded);
  if (!p)
    return fail(d, TESSERA_ERROR_INTERNAL, "simulator allocation of " + std::to_string(bytes) + " bytes failed");
  std::memset(p, 0, rounded);
  std::lock_guard<std::mutex> guard(d.lock);
  d.allocations[reinterpret_cast<uintptr_t>(p)] = bytes; // the requested size bounds the kernel's accesses
  *ptr = p;
  return TESSERA_SUCCESS;
}

tessera_status simFree(void *device, void *ptr) {
  SimDevice &d = dev(device);
  std::lock_guard<std::mutex> guard(d.lock);
  auto it = d.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == d.allocations.end())
    return fail(d, TESSERA_ERROR_INVALID_ARGUMENT, "free of " + hex(ptr) + ", which is not a simulator allocation");
  d.allocations.erase(it);
  std::free(ptr);
  return TESSERA_SUCCESS;
}

tessera_status simCopyToDevice(void *device, void *dst, const void *src, size_t bytes) {
  if (tessera_status s = checkRange(dev(device), dst, bytes, "memcpy_htod destination"))
    return s;
  std::memcpy(dst, src, bytes);
  return TESSERA_SUCCESS;
}

tessera_status simCopyToHost(void *device, void *dst, const void *src, size_t bytes) {
  if (tessera_status s = checkRange(dev(device), src, bytes, "memcpy_dtoh source"))
    return s;
  std::memcpy(dst, src, bytes);
  return TESSERA_SUCCESS;
}

tessera_status simMemset(void *device, void *dst, int value, size_t bytes) {
  if (tessera_status s = checkRange(dev(device), dst, bytes, "memset destination"))
    return s;
  std::memset(dst, value, bytes);
  return TESSERA_SUCCESS;
}

/// Launches run synchronously, so the stream's earlier work is done: a plain memset is in order.
tessera_status simMemsetAsync(void *device, void *dst, int value, size_t bytes, void *) {
  return simMemset(device, dst, value, bytes);
}

tessera_status simSynchronize(void *) { return TESSERA_SUCCESS; } // launches are synchronous

/// The manifest's argument type of a parameter the kernel IR declares.
const char *manifestType(const sim::ParamInfo &p) {
  if (p.kind == sim::ParamInfo::Kind::Buffer)
    return "ptr";
  switch (p.elem) {
  case sim::ElemKind::I32: return "i32";
  case sim::ElemKind::I64: return "i64";
  case sim::ElemKind::F32: return "f32";
  default: return sim::kindName(p.elem);
  }
}

tessera_status simLoadKernel(void *device, const tessera_backend_kernel_desc *desc, void **out) {
  SimDevice &d = dev(device);
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(desc->kernel_json);
  if (!json)
    return fail(d, TESSERA_ERROR_MANIFEST, "kernel manifest entry is not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *entry = json->getAsObject();
  std::string name = entry && entry->getString("name") ? entry->getString("name")->str() : desc->entry;
  std::string file =
      entry && entry->getString("kernel_ir") ? entry->getString("kernel_ir")->str() : name + ".kernel.mlir";
  llvm::SmallString<256> path(desc->bundle_dir);
  llvm::sys::path::append(path, file);
  if (!llvm::sys::fs::exists(path))
    return fail(d, TESSERA_ERROR_CODE_OBJECT_MISSING,
                "kernel IR " + path.str().str() + " of kernel " + name +
                    " does not exist (the simulator runs the bundle's kernel IR)");
  auto kernel = sim::Kernel::fromFile(path, sim::LoadOptions{desc->entry, d.arch});
  if (!kernel)
    return fail(d, TESSERA_ERROR_CODE_OBJECT_CORRUPT,
                "cannot simulate kernel " + name + ": " + llvm::toString(kernel.takeError()));
  // The runtime packs arguments by the manifest; they must be the kernel's parameters.
  const std::vector<sim::ParamInfo> &params = (*kernel)->info().params;
  const llvm::json::Array *args = entry ? entry->getArray("args") : nullptr;
  if (!args || args->size() != params.size())
    return fail(d, TESSERA_ERROR_CODE_OBJECT_CORRUPT,
                "kernel " + name + ": the manifest lists " + std::to_string(args ? args->size() : 0) +
                    " arguments but the kernel IR has " + std::to_string(params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    const llvm::json::Object *arg = (*args)[i].getAsObject();
    auto type = arg ? arg->getString("type") : std::nullopt;
    if (!type || *type != manifestType(params[i]))
      return fail(d, TESSERA_ERROR_CODE_OBJECT_CORRUPT,
                  "kernel " + name + ": manifest argument " + std::to_string(i) + " is " +
                      (type ? type->str() : std::string("untyped")) + " but kernel IR parameter '" + params[i].name +
                      "' is " + manifestType(params[i]));
  }
  *out = new SimKernel{std::move(*kernel)};
  return TESSERA_SUCCESS;
}

void simUnloadKernel(void *, void *kernel) { delete static_cast<SimKernel *>(kernel); }

/// "$sm_count": sim::kDefaultSmCount, or TESSERA_SIM_SM_COUNT (docs/simulator.md).
uint32_t simProcessorCount(void *) {
  const char *count = std::getenv("TESSERA_SIM_SM_COUNT");
  return count && std::atoi(count) > 0 ? uint32_t(std::atoi(count)) : sim::kDefaultSmCount;
}

tessera_status simLaunch(void *device, void *kernelHandle, const tessera_backend_launch *launch) {
  SimDevice &d = dev(device);
  const sim::Kernel &kernel = *static_cast<SimKernel *>(kernelHandle)->kernel;
  const sim::KernelInfo &info = kernel.info();
  if (launch->arg_count != info.params.size())
    return fail(d, TESSERA_ERROR_ARGUMENT,
                "kernel " + info.name + " takes " + std::to_string(info.params.size()) +
                    " arguments, the launch packs " + std::to_string(launch->arg_count));
  std::vector<sim::ArgValue> args;
  for (size_t i = 0; i < info.params.size(); ++i) {
    const sim::ParamInfo &p = info.params[i];
    const void *at = launch->arg_pointers[i];
    if (p.kind == sim::ParamInfo::Kind::Buffer) {
      void *ptr;
      std::memcpy(&ptr, at, sizeof ptr);
      auto [start, bytes] = allocationOf(d, ptr);
      if (!bytes)
        return fail(d, TESSERA_ERROR_ARGUMENT,
                    "argument '" + p.name + "' of kernel " + info.name + " (" + hex(ptr) +
                        ") does not point into a simulator allocation");
      uintptr_t offset = reinterpret_cast<uintptr_t>(ptr) - start;
      args.push_back(sim::ArgValue::ofBuffer({ptr, bytes - offset, offset}));
    } else if (p.elem == sim::ElemKind::I32) {
      int32_t v;
      std::memcpy(&v, at, 4);
      args.push_back(sim::ArgValue::ofInteger(v));
    } else if (p.elem == sim::ElemKind::F32) {
      float v;
      std::memcpy(&v, at, 4);
      args.push_back(sim::ArgValue::ofFloat(v));
    } else {
      int64_t v;
      std::memcpy(&v, at, 8);
      args.push_back(sim::ArgValue::ofInteger(v));
    }
  }
  sim::LaunchConfig config;
  std::copy_n(launch->grid, 3, config.grid.begin());
  std::copy_n(launch->block, 3, config.block.begin());
  config.dynamicLdsBytes = launch->dynamic_lds_bytes;
  if (const char *threads = std::getenv("TESSERA_SIM_THREADS"))
    config.threads = unsigned(std::max(1, std::atoi(threads)));
  llvm::Expected<sim::RunStats> stats = kernel.launch(config, args);
  if (!stats)
    return fail(d, TESSERA_ERROR_DRIVER,
                "simulated launch of " + info.name + " failed: " + llvm::toString(stats.takeError()));
  return TESSERA_SUCCESS;
}

const tessera_backend kBackend = {TESSERA_BACKEND_ABI_VERSION,
                                  "sim",
                                  /*code_object_format=*/nullptr,
                                  simOpen,
                                  simClose,
                                  simArch,
                                  simAlloc,
                                  simFree,
                                  simCopyToDevice,
                                  simCopyToHost,
                                  simMemset,
                                  simSynchronize,
                                  simLoadKernel,
                                  simUnloadKernel,
                                  simLaunch,
                                  /*encode_tensor_map=*/nullptr,
                                  simProcessorCount,
                                  simMemsetAsync,
                                  /*stream_capturing=*/nullptr};

} // namespace

extern "C" __attribute__((visibility("default"))) const tessera_backend *tessera_backend_plugin(uint32_t abi_version) {
  return abi_version == TESSERA_BACKEND_ABI_VERSION ? &kBackend : nullptr;
}

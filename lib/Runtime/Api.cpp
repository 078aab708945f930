// The C ABI: argument checks on handles and out pointers, then the C++ implementation, inside guard().
#include "Args.h"
#include "Error.h"

#include "tessera/Runtime/tessera_runtime.h"

using namespace tessera::runtime;

namespace {

/// API misuse (null handles, out pointers, strings) is reported, never dereferenced.
tessera_status missing(const char *function, const char *parameter) {
  return guard([&]() -> tessera_status {
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + parameter + " is NULL");
  });
}

#define TESSERA_REQUIRE(param)                                                                         \
  if (!(param))                                                                                        \
  return missing(__func__, #param)

/// "tessera_kernel_arg_name: argument index 7 is outside [0, 7) of kernel gemm"
tessera_status checkIndex(int index, size_t size, const char *function, const char *what, const std::string &of = "") {
  int count = static_cast<int>(size);
  if (index < 0 || index >= count)
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + what + " " + std::to_string(index) +
                                                    " is outside [0, " + std::to_string(count) + ")" + of);
  return TESSERA_SUCCESS;
}

/// Shared body of the tessera_kernel_arg_* getters.
template <typename Field>
tessera_status argField(const tessera_kernel *kernel, int index, const char **out, const char *function, Field field) {
  if (!kernel || !out)
    return missing(function, kernel ? "out" : "kernel");
  return guard([&]() -> tessera_status {
    const KernelInfo &info = *kernel->info;
    if (tessera_status s = checkIndex(index, info.args.size(), function, "argument index", " of kernel " + info.name))
      return s;
    *out = field(kernel->info->args[index]);
    return TESSERA_SUCCESS;
  });
}

/// Shared body of the tessera_bundle_kernel_* getters: manifest facts, which need no driver load.
template <typename Field>
tessera_status kernelInfoField(const tessera_bundle *bundle, int index, const char **out, const char *function,
                               Field field) {
  if (!bundle || !out)
    return missing(function, bundle ? "out" : "bundle");
  return guard([&]() -> tessera_status {
    const std::vector<KernelInfo> &kernels = bundle->manifest.kernels;
    if (tessera_status s = checkIndex(index, kernels.size(), function, "index"))
      return s;
    *out = field(kernels[index]);
    return TESSERA_SUCCESS;
  });
}

/// Shared body of the tessera_bundle_kernel_set_* getters.
template <typename Field>
tessera_status kernelSetField(const tessera_bundle *bundle, int index, const char **out, const char *function,
                              Field field) {
  if (!bundle || !out)
    return missing(function, bundle ? "out" : "bundle");
  return guard([&]() -> tessera_status {
    const std::vector<KernelSetInfo> &sets = bundle->manifest.kernelSets;
    if (tessera_status s = checkIndex(index, sets.size(), function, "index"))
      return s;
    *out = field(sets[index]);
    return TESSERA_SUCCESS;
  });
}

template <typename T> tessera_status setArgOf(tessera_args *args, const char *name, ArgType type, T value, const char *function) {
  if (!args || !name)
    return missing(function, args ? "name" : "args");
  return guard([&]() -> tessera_status { return setArg(*args, name, type, &value); });
}

} // namespace

extern "C" {

TESSERA_API const char *tessera_last_error(void) { return lastError(); }
TESSERA_API const char *tessera_status_name(tessera_status status) { return statusName(status); }

TESSERA_API tessera_status tessera_device_open(const char *backend, int ordinal, tessera_device **out) {
  TESSERA_REQUIRE(backend);
  TESSERA_REQUIRE(out);
  return guard([&]() -> tessera_status {
    std::shared_ptr<Device> device;
    if (tessera_status s = openDevice(backend, ordinal, device))
      return s;
    *out = new tessera_device{std::move(device)};
    return TESSERA_SUCCESS;
  });
}

TESSERA_API tessera_status tessera_device_close(tessera_device *device) {
  TESSERA_REQUIRE(device);
  delete device;
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_device_arch(const tessera_device *device, const char **out) {
  TESSERA_REQUIRE(device);
  TESSERA_REQUIRE(out);
  *out = device->device->arch.c_str();
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_device_backend(const tessera_device *device, const char **out) {
  TESSERA_REQUIRE(device);
  TESSERA_REQUIRE(out);
  *out = device->device->backend->name;
  return TESSERA_SUCCESS;
}

// Memory: zero-byte requests succeed without a driver call (drivers disagree about them).
TESSERA_API tessera_status tessera_malloc(tessera_device *device, size_t bytes, void **out) {
  TESSERA_REQUIRE(device);
  TESSERA_REQUIRE(out);
  *out = nullptr;
  const Device &d = *device->device;
  return bytes == 0 ? TESSERA_SUCCESS : guard([&]() -> tessera_status { return d.backend->alloc(d.handle, bytes, out); });
}

TESSERA_API tessera_status tessera_free(tessera_device *device, void *ptr) {
  TESSERA_REQUIRE(device);
  const Device &d = *device->device;
  return ptr ? guard([&]() -> tessera_status { return d.backend->free(d.handle, ptr); }) : TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_memcpy_htod(tessera_device *device, void *dst, const void *src, size_t bytes) {
  TESSERA_REQUIRE(device);
  if (bytes == 0)
    return TESSERA_SUCCESS;
  TESSERA_REQUIRE(dst);
  TESSERA_REQUIRE(src);
  const Device &d = *device->device;
  return guard([&]() -> tessera_status { return d.backend->memcpy_htod(d.handle, dst, src, bytes); });
}

TESSERA_API tessera_status tessera_memcpy_dtoh(tessera_device *device, void *dst, const void *src, size_t bytes) {
  TESSERA_REQUIRE(device);
  if (bytes == 0)
    return TESSERA_SUCCESS;
  TESSERA_REQUIRE(dst);
  TESSERA_REQUIRE(src);
  const Device &d = *device->device;
  return guard([&]() -> tessera_status { return d.backend->memcpy_dtoh(d.handle, dst, src, bytes); });
}

TESSERA_API tessera_status tessera_memset(tessera_device *device, void *dst, int value, size_t bytes) {
  TESSERA_REQUIRE(device);
  if (bytes == 0)
    return TESSERA_SUCCESS;
  TESSERA_REQUIRE(dst);
  const Device &d = *device->device;
  return guard([&]() -> tessera_status { return d.backend->memset(d.handle, dst, value, bytes); });
}

TESSERA_API tessera_status tessera_synchronize(tessera_device *device) {
  TESSERA_REQUIRE(device);
  const Device &d = *device->device;
  return guard([&]() -> tessera_status { return d.backend->synchronize(d.handle); });
}

TESSERA_API tessera_status tessera_bundle_load(tessera_device *device, const char *dir, tessera_bundle **out) {
  TESSERA_REQUIRE(device);
  TESSERA_REQUIRE(dir);
  TESSERA_REQUIRE(out);
  return guard([&]() -> tessera_status {
    std::unique_ptr<tessera_bundle> bundle;
    if (tessera_status s = loadBundle(device->device, dir, bundle))
      return s;
    *out = bundle.release();
    return TESSERA_SUCCESS;
  });
}

TESSERA_API tessera_status tessera_bundle_unload(tessera_bundle *bundle) {
  TESSERA_REQUIRE(bundle);
  delete bundle;
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_bundle_target(const tessera_bundle *bundle, const char **out) {
  TESSERA_REQUIRE(bundle);
  TESSERA_REQUIRE(out);
  *out = bundle->manifest.target.c_str();
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_bundle_kernel_count(const tessera_bundle *bundle, int *out) {
  TESSERA_REQUIRE(bundle);
  TESSERA_REQUIRE(out);
  *out = static_cast<int>(bundle->kernels.size());
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_bundle_kernel_name(const tessera_bundle *bundle, int index, const char **out) {
  return kernelInfoField(bundle, index, out, __func__, [](const KernelInfo &k) { return k.name.c_str(); });
}

TESSERA_API tessera_status tessera_bundle_kernel_json(const tessera_bundle *bundle, int index, const char **out) {
  return kernelInfoField(bundle, index, out, __func__, [](const KernelInfo &k) { return k.json.c_str(); });
}

TESSERA_API tessera_status tessera_bundle_kernel_set_count(const tessera_bundle *bundle, int *out) {
  TESSERA_REQUIRE(bundle);
  TESSERA_REQUIRE(out);
  *out = static_cast<int>(bundle->sets.size());
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_bundle_kernel_set_name(const tessera_bundle *bundle, int index, const char **out) {
  return kernelSetField(bundle, index, out, __func__, [](const KernelSetInfo &s) { return s.name.c_str(); });
}

TESSERA_API tessera_status tessera_bundle_kernel_set_json(const tessera_bundle *bundle, int index, const char **out) {
  return kernelSetField(bundle, index, out, __func__, [](const KernelSetInfo &s) { return s.json.c_str(); });
}

TESSERA_API tessera_status tessera_kernel_set_get(const tessera_bundle *bundle, const char *name,
                                                  tessera_kernel_set **out) {
  TESSERA_REQUIRE(bundle);
  TESSERA_REQUIRE(name);
  TESSERA_REQUIRE(out);
  return guard([&]() -> tessera_status { return getKernelSet(*bundle, name, *out); });
}

TESSERA_API tessera_status tessera_kernel_set_json(const tessera_kernel_set *set, const char **out) {
  TESSERA_REQUIRE(set);
  TESSERA_REQUIRE(out);
  *out = set->info->json.c_str();
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_set_args_create(const tessera_kernel_set *set, tessera_args **out) {
  TESSERA_REQUIRE(set);
  TESSERA_REQUIRE(out);
  return guard([&]() -> tessera_status {
    *out = new tessera_args(*set);
    return TESSERA_SUCCESS;
  });
}

TESSERA_API tessera_status tessera_kernel_get(const tessera_bundle *bundle, const char *name, tessera_kernel **out) {
  TESSERA_REQUIRE(bundle);
  TESSERA_REQUIRE(name);
  TESSERA_REQUIRE(out);
  return guard([&]() -> tessera_status { return getKernel(*bundle, name, *out); });
}

TESSERA_API tessera_status tessera_kernel_name(const tessera_kernel *kernel, const char **out) {
  TESSERA_REQUIRE(kernel);
  TESSERA_REQUIRE(out);
  *out = kernel->info->name.c_str();
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_kernel_arg_count(const tessera_kernel *kernel, int *out) {
  TESSERA_REQUIRE(kernel);
  TESSERA_REQUIRE(out);
  *out = static_cast<int>(kernel->info->args.size());
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_kernel_arg_name(const tessera_kernel *kernel, int index, const char **out) {
  return argField(kernel, index, out, __func__, [](const ArgInfo &a) { return a.name.c_str(); });
}

TESSERA_API tessera_status tessera_kernel_arg_type(const tessera_kernel *kernel, int index, const char **out) {
  return argField(kernel, index, out, __func__, [](const ArgInfo &a) { return argTypeName(a.type); });
}

TESSERA_API tessera_status tessera_kernel_arg_dtype(const tessera_kernel *kernel, int index, const char **out) {
  return argField(kernel, index, out, __func__, [](const ArgInfo &a) { return a.dtype ? a.dtype->c_str() : nullptr; });
}

TESSERA_API tessera_status tessera_kernel_arg_role(const tessera_kernel *kernel, int index, const char **out) {
  return argField(kernel, index, out, __func__, [](const ArgInfo &a) { return argRoleName(a.role); });
}

TESSERA_API tessera_status tessera_kernel_json(const tessera_kernel *kernel, const char **out) {
  TESSERA_REQUIRE(kernel);
  TESSERA_REQUIRE(out);
  *out = kernel->info->json.c_str();
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_args_create(const tessera_kernel *kernel, tessera_args **out) {
  TESSERA_REQUIRE(kernel);
  TESSERA_REQUIRE(out);
  return guard([&]() -> tessera_status {
    *out = new tessera_args(*kernel);
    return TESSERA_SUCCESS;
  });
}

TESSERA_API tessera_status tessera_args_destroy(tessera_args *args) {
  TESSERA_REQUIRE(args);
  delete args;
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_args_reset(tessera_args *args) {
  TESSERA_REQUIRE(args);
  std::fill(args->buffer.begin(), args->buffer.end(), 0);
  std::fill(args->isSet.begin(), args->isSet.end(), false);
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_args_set_ptr(tessera_args *args, const char *name, const void *value) {
  return setArgOf(args, name, ArgType::Ptr, value, __func__);
}
TESSERA_API tessera_status tessera_args_set_i64(tessera_args *args, const char *name, int64_t value) {
  return setArgOf(args, name, ArgType::I64, value, __func__);
}
TESSERA_API tessera_status tessera_args_set_i32(tessera_args *args, const char *name, int32_t value) {
  return setArgOf(args, name, ArgType::I32, value, __func__);
}
TESSERA_API tessera_status tessera_args_set_f32(tessera_args *args, const char *name, float value) {
  return setArgOf(args, name, ArgType::F32, value, __func__);
}
TESSERA_API tessera_status tessera_args_set_all(tessera_args *args, const uint64_t *values, size_t count) {
  TESSERA_REQUIRE(args);
  if (!values && count)
    return missing(__func__, "values");
  return guard([&]() -> tessera_status { return setAllArgs(*args, values, count); });
}

/// Arguments belong to the kernel they were created for; launching them with another is misuse.
static tessera_status checkArgsKernel(const tessera_kernel *kernel, const tessera_args *args, const char *function) {
  if (!kernel || !args)
    return missing(function, kernel ? "args" : "kernel");
  if (args->kernel != kernel)
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, std::string(function) + ": args were created for " + args->owner() +
                                                    ", not " + kernel->info->name);
  return TESSERA_SUCCESS;
}

/// The same for the arguments of a kernel set.
static tessera_status checkArgsSet(const tessera_kernel_set *set, const tessera_args *args, const char *function) {
  if (!set || !args)
    return missing(function, set ? "args" : "set");
  if (args->set != set)
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, std::string(function) + ": args were created for " + args->owner() +
                                                    ", not " + set->info->name);
  return TESSERA_SUCCESS;
}

TESSERA_API tessera_status tessera_launch(const tessera_kernel *kernel, const tessera_args *args, void *stream) {
  return guard([&]() -> tessera_status {
    tessera_status s = checkArgsKernel(kernel, args, "tessera_launch");
    return s ? s : launch(*args, stream);
  });
}

TESSERA_API tessera_status tessera_launch_set(const tessera_kernel_set *set, const tessera_args *args, void *stream) {
  return guard([&]() -> tessera_status {
    tessera_status s = checkArgsSet(set, args, "tessera_launch_set");
    return s ? s : launchSet(*args, stream);
  });
}

TESSERA_API tessera_status tessera_kernel_set_reserve(const tessera_kernel_set *set, const tessera_args *args,
                                                      void *stream) {
  return guard([&]() -> tessera_status {
    tessera_status s = checkArgsSet(set, args, "tessera_kernel_set_reserve");
    return s ? s : reserveSet(*args, stream);
  });
}

TESSERA_API tessera_status tessera_launch_grid(const tessera_kernel *kernel, const tessera_args *args, uint32_t grid[3]) {
  TESSERA_REQUIRE(grid);
  return guard([&]() -> tessera_status {
    tessera_status s = checkArgsKernel(kernel, args, "tessera_launch_grid");
    return s ? s : evaluateGrid(*args, grid);
  });
}

} // extern "C"

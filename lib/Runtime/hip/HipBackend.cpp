// The "hip" backend: the HIP runtime through dlopen("libamdhip64.so"), hsaco code objects.
#include "Device.h"
#include "Error.h"

#include <cstring>

namespace tessera::runtime {
namespace {

// The few HIP types and constants used, declared here so no ROCm SDK is needed to build.
using hipError_t = int;
using hipModule_t = struct ihipModule_t *;
using hipFunction_t = struct ihipModuleSymbol_t *;
using hipStream_t = struct ihipStream_t *;
constexpr int kHipMemcpyHostToDevice = 1, kHipMemcpyDeviceToHost = 2;
void *const kLaunchParamBufferPointer = reinterpret_cast<void *>(1);
void *const kLaunchParamBufferSize = reinterpret_cast<void *>(2);
void *const kLaunchParamEnd = reinterpret_cast<void *>(3);

/// hipDeviceProp_tR0600 (ROCm 6+), of which only gcnArchName is read. Its offset (1160) is
/// fixed by that versioned ABI; the struct is 1472 bytes, and the tail is padded generously
/// so a later runtime writing more cannot overrun it.
struct HipDeviceProps {
  char before[1160];
  char gcnArchName[256];
  char after[4096];
};

#define TESSERA_HIP_FUNCTIONS(X)                                                                       \
  X(hipInit, hipError_t(unsigned))                                                               \
  X(hipSetDevice, hipError_t(int))                                                               \
  X(hipGetDevicePropertiesR0600, hipError_t(HipDeviceProps *, int))                              \
  X(hipMalloc, hipError_t(void **, size_t))                                                      \
  X(hipFree, hipError_t(void *))                                                                 \
  X(hipMemcpy, hipError_t(void *, const void *, size_t, int))                                    \
  X(hipMemset, hipError_t(void *, int, size_t))                                                  \
  X(hipMemsetAsync, hipError_t(void *, int, size_t, hipStream_t))                                \
  X(hipStreamIsCapturing, hipError_t(hipStream_t, int *))                                        \
  X(hipModuleLoadData, hipError_t(hipModule_t *, const void *))                                  \
  X(hipModuleUnload, hipError_t(hipModule_t))                                                    \
  X(hipModuleGetFunction, hipError_t(hipFunction_t *, hipModule_t, const char *))                \
  X(hipModuleLaunchKernel, hipError_t(hipFunction_t, unsigned, unsigned, unsigned, unsigned,     \
                                          unsigned, unsigned, unsigned, hipStream_t, void **, void **)) \
  X(hipDeviceSynchronize, hipError_t())                                                          \
  X(hipGetErrorName, const char *(hipError_t))                                                    \
  X(hipGetErrorString, const char *(hipError_t))

struct HipDevice {
  std::unique_ptr<SharedLibrary> library;
  TESSERA_HIP_FUNCTIONS(TESSERA_DECLARE_FUNCTION)
  int ordinal = 0;
  std::string arch;

  tessera_status check(hipError_t result, const char *call) const {
    return result == 0 ? TESSERA_SUCCESS
                       : driverFailure(call, result, hipGetErrorName(result), hipGetErrorString(result));
  }
  /// The HIP current device is per thread; select ours before every call.
  tessera_status bind() const { return check(hipSetDevice(ordinal), "hipSetDevice"); }
};

// Every HIP call goes through HIP_CHECK so a failure names the call; HIP_BOUND first selects
// the device (bind only fails with a driver error, already recorded).
#define HIP_CHECK(dev, call, ...) (dev)->check((dev)->call(__VA_ARGS__), #call)
#define HIP_BOUND(dev, call, ...) ((dev)->bind() ? TESSERA_ERROR_DRIVER : HIP_CHECK(dev, call, ##__VA_ARGS__))

struct HipKernel {
  hipModule_t module = nullptr;
  hipFunction_t function = nullptr;
};

HipDevice *hip(void *device) { return static_cast<HipDevice *>(device); }

tessera_status loadRuntime(HipDevice &table) {
  SharedLibrary::Search search{"HIP runtime",
                               "TESSERA_HIP_LIBRARY",
                               {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so"}};
  if (tessera_status s = SharedLibrary::open(search, table.library))
    return s;
  const SharedLibrary &library = *table.library;
  TESSERA_HIP_FUNCTIONS(TESSERA_RESOLVE_FUNCTION)
  return TESSERA_SUCCESS;
}

/// "gfx942:sramecc+:xnack-" names the chip and its feature settings; bundles name the chip.
std::string chipOf(const char *gcnArchName) {
  std::string name(gcnArchName, strnlen(gcnArchName, 256));
  return name.substr(0, name.find(':'));
}

tessera_status open(const tessera_backend_host *, int ordinal, const char *, void **out) {
  auto d = std::make_unique<HipDevice>();
  d->ordinal = ordinal;
  auto props = std::make_unique<HipDeviceProps>();
  if (tessera_status s = loadRuntime(*d))
    return s;
  if (tessera_status s = HIP_CHECK(d, hipInit, 0))
    return s;
  if (tessera_status s = HIP_BOUND(d, hipGetDevicePropertiesR0600, props.get(), ordinal))
    return s;
  d->arch = chipOf(props->gcnArchName);
  *out = d.release();
  return TESSERA_SUCCESS;
}

void close(void *device) { delete hip(device); }

const char *archName(void *device) { return hip(device)->arch.c_str(); }

tessera_status alloc(void *device, size_t bytes, void **ptr) { return HIP_BOUND(hip(device), hipMalloc, ptr, bytes); }

tessera_status free(void *device, void *ptr) { return HIP_BOUND(hip(device), hipFree, ptr); }

tessera_status memcpyHtoD(void *device, void *dst, const void *src, size_t bytes) {
  return HIP_BOUND(hip(device), hipMemcpy, dst, src, bytes, kHipMemcpyHostToDevice);
}

tessera_status memcpyDtoH(void *device, void *dst, const void *src, size_t bytes) {
  return HIP_BOUND(hip(device), hipMemcpy, dst, src, bytes, kHipMemcpyDeviceToHost);
}

tessera_status memset(void *device, void *dst, int value, size_t bytes) {
  return HIP_BOUND(hip(device), hipMemset, dst, value, bytes);
}

tessera_status memsetAsync(void *device, void *dst, int value, size_t bytes, void *stream) {
  return HIP_BOUND(hip(device), hipMemsetAsync, dst, value, bytes, static_cast<hipStream_t>(stream));
}

tessera_status streamCapturing(void *device, void *stream, int *capturing) {
  int status = 0; // hipStreamCaptureStatus: None 0, Active 1, Invalidated 2
  tessera_status s = HIP_BOUND(hip(device), hipStreamIsCapturing, static_cast<hipStream_t>(stream), &status);
  *capturing = status != 0;
  return s;
}

tessera_status synchronize(void *device) { return HIP_BOUND(hip(device), hipDeviceSynchronize); }

void unloadKernel(void *device, void *kernel) {
  auto *k = static_cast<HipKernel *>(kernel);
  if (k->module && hip(device)->bind() == TESSERA_SUCCESS)
    hip(device)->hipModuleUnload(k->module);
  delete k;
}

tessera_status loadKernel(void *device, const tessera_backend_kernel_desc *desc, void **out) {
  HipDevice *d = hip(device);
  auto k = std::make_unique<HipKernel>();
  tessera_status s = HIP_BOUND(d, hipModuleLoadData, &k->module, desc->code_object);
  if (!s)
    s = HIP_CHECK(d, hipModuleGetFunction, &k->function, k->module, desc->entry);
  if (s) {
    unloadKernel(device, k.release());
    return s;
  }
  *out = k.release();
  return TESSERA_SUCCESS;
}

tessera_status launch(void *device, void *kernel, const tessera_backend_launch *l) {
  // The packed buffer is the kernarg segment; the runtime appends the hidden arguments itself.
  size_t size = l->arg_buffer_size;
  void *config[] = {kLaunchParamBufferPointer, const_cast<void *>(l->arg_buffer), kLaunchParamBufferSize, &size,
                    kLaunchParamEnd};
  return HIP_BOUND(hip(device), hipModuleLaunchKernel, static_cast<HipKernel *>(kernel)->function, l->grid[0],
                   l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->dynamic_lds_bytes,
                   static_cast<hipStream_t>(l->stream), nullptr, size ? config : nullptr);
}

} // namespace

const tessera_backend *hipBackend() {
  static const tessera_backend backend = {
      TESSERA_BACKEND_ABI_VERSION, "hip", "hsaco", open, close, archName, alloc, free, memcpyHtoD, memcpyDtoH,
      memset, synchronize, loadKernel, unloadKernel, launch, /*encode_tensor_map=*/nullptr,
      /*processor_count=*/nullptr, memsetAsync, streamCapturing};
  return &backend;
}

} // namespace tessera::runtime

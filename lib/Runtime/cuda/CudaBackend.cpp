// The "cuda" backend: the CUDA driver API through dlopen("libcuda.so.1"), PTX JIT-compiled by load_kernel.
#include "Device.h"
#include "Error.h"

#include <cstdio>
#include <new>

namespace tessera::runtime {
namespace {

// The few driver types and constants used, declared here so no CUDA SDK is needed to build.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
constexpr int kComputeCapabilityMajor = 75, kComputeCapabilityMinor = 76; // CUdevice_attribute
constexpr int kMultiprocessorCount = 16;
constexpr int kMaxDynamicSharedSizeBytes = 8;                              // CUfunction_attribute
constexpr int kJitErrorLogBuffer = 5, kJitErrorLogBufferSize = 6;          // CUjit_option
constexpr uint32_t kDefaultSharedLimit = 48 * 1024; // more needs an explicit opt-in per function

#define TESSERA_CUDA_FUNCTIONS(X)                                                                      \
  X(cuInit, CUresult(unsigned))                                                                  \
  X(cuDeviceGet, CUresult(CUdevice *, int))                                                      \
  X(cuDeviceGetAttribute, CUresult(int *, int, CUdevice))                                        \
  X(cuDevicePrimaryCtxRetain, CUresult(CUcontext *, CUdevice))                                   \
  X(cuDevicePrimaryCtxRelease_v2, CUresult(CUdevice))                                            \
  X(cuCtxSetCurrent, CUresult(CUcontext))                                                        \
  X(cuCtxSynchronize, CUresult())                                                                \
  X(cuMemAlloc_v2, CUresult(CUdeviceptr *, size_t))                                              \
  X(cuMemFree_v2, CUresult(CUdeviceptr))                                                         \
  X(cuMemcpyHtoD_v2, CUresult(CUdeviceptr, const void *, size_t))                                \
  X(cuMemcpyDtoH_v2, CUresult(void *, CUdeviceptr, size_t))                                      \
  X(cuMemsetD8_v2, CUresult(CUdeviceptr, unsigned char, size_t))                                 \
  X(cuMemsetD8Async, CUresult(CUdeviceptr, unsigned char, size_t, CUstream))                     \
  X(cuStreamIsCapturing, CUresult(CUstream, int *))                                              \
  X(cuModuleLoadDataEx, CUresult(CUmodule *, const void *, unsigned, int *, void **))            \
  X(cuModuleUnload, CUresult(CUmodule))                                                          \
  X(cuModuleGetFunction, CUresult(CUfunction *, CUmodule, const char *))                         \
  X(cuFuncSetAttribute, CUresult(CUfunction, int, int))                                          \
  X(cuLaunchKernel, CUresult(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,       \
                                 unsigned, unsigned, CUstream, void **, void **))                    \
  X(cuGetErrorName, CUresult(CUresult, const char **))                                           \
  X(cuGetErrorString, CUresult(CUresult, const char **))

// CUDA 12+: TMA tensor maps (optional; kernels with tensor_map arguments need it).
using CUtensorMapEncodeTiled = CUresult(void *tensorMap, int dataType, uint32_t rank, void *globalAddress,
                                        const uint64_t *globalDim, const uint64_t *globalStrides,
                                        const uint32_t *boxDim, const uint32_t *elementStrides, int interleave,
                                        int swizzle, int l2Promotion, int oobFill);
constexpr int kTensorMapFloat16 = 6, kTensorMapFloat32 = 7, kTensorMapBFloat16 = 9; // CUtensorMapDataType
constexpr int kTensorMapSwizzle128B = 3, kTensorMapL2Promotion128B = 2;

struct CudaDevice {
  std::unique_ptr<SharedLibrary> library;
  TESSERA_CUDA_FUNCTIONS(TESSERA_DECLARE_FUNCTION)
  CUtensorMapEncodeTiled *cuTensorMapEncodeTiled = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string arch;
  int multiprocessors = 0;

  tessera_status check(CUresult result, const char *call, const std::string &detail = {}) const {
    if (result == 0)
      return TESSERA_SUCCESS;
    const char *name = nullptr, *description = nullptr;
    cuGetErrorName(result, &name);
    cuGetErrorString(result, &description);
    return driverFailure(call, result, name, description, detail);
  }
  /// Makes the primary context current on the calling thread: the driver API is per thread,
  /// and torch works in the same primary context, so its pointers are valid in ours.
  tessera_status bind() const { return check(cuCtxSetCurrent(context), "cuCtxSetCurrent"); }
};

struct CudaKernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
};

// Every driver call goes through CU_CHECK so a failure names the call; CU_BOUND first makes
// the device's context current (bind only fails with a driver error, already recorded).
#define CU_CHECK(dev, call, ...) (dev)->check((dev)->call(__VA_ARGS__), #call)
#define CU_BOUND(dev, call, ...) ((dev)->bind() ? TESSERA_ERROR_DRIVER : CU_CHECK(dev, call, ##__VA_ARGS__))

CudaDevice *cuda(void *device) { return static_cast<CudaDevice *>(device); }
CUdeviceptr devicePtr(const void *ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

tessera_status loadDriver(CudaDevice &table) {
  SharedLibrary::Search search{"CUDA driver", "TESSERA_CUDA_LIBRARY", {"libcuda.so.1", "libcuda.so"}};
  if (tessera_status s = SharedLibrary::open(search, table.library))
    return s;
  const SharedLibrary &library = *table.library;
  TESSERA_CUDA_FUNCTIONS(TESSERA_RESOLVE_FUNCTION)
  library.resolveOptional("cuTensorMapEncodeTiled", table.cuTensorMapEncodeTiled);
  return TESSERA_SUCCESS;
}

tessera_status open(const tessera_backend_host *, int ordinal, const char *, void **out) {
  auto d = std::make_unique<CudaDevice>();
  int major = 0, minor = 0;
  if (tessera_status s = loadDriver(*d))
    return s;
  if (tessera_status s = CU_CHECK(d, cuInit, 0))
    return s;
  if (tessera_status s = CU_CHECK(d, cuDeviceGet, &d->device, ordinal))
    return s;
  if (tessera_status s = CU_CHECK(d, cuDeviceGetAttribute, &major, kComputeCapabilityMajor, d->device))
    return s;
  if (tessera_status s = CU_CHECK(d, cuDeviceGetAttribute, &minor, kComputeCapabilityMinor, d->device))
    return s;
  if (tessera_status s = CU_CHECK(d, cuDeviceGetAttribute, &d->multiprocessors, kMultiprocessorCount, d->device))
    return s;
  if (tessera_status s = CU_CHECK(d, cuDevicePrimaryCtxRetain, &d->context, d->device))
    return s;
  if (tessera_status s = d->bind()) {
    d->cuDevicePrimaryCtxRelease_v2(d->device);
    return s;
  }
  d->arch = "sm_" + std::to_string(major) + std::to_string(minor);
  *out = d.release();
  return TESSERA_SUCCESS;
}

void close(void *device) {
  CudaDevice *d = cuda(device);
  d->cuDevicePrimaryCtxRelease_v2(d->device);
  delete d;
}

const char *archName(void *device) { return cuda(device)->arch.c_str(); }
uint32_t processorCount(void *device) { return static_cast<uint32_t>(cuda(device)->multiprocessors); }

tessera_status alloc(void *device, size_t bytes, void **ptr) {
  CudaDevice *d = cuda(device);
  CUdeviceptr p = 0;
  tessera_status s = CU_BOUND(d, cuMemAlloc_v2, &p, bytes);
  *ptr = reinterpret_cast<void *>(p);
  return s;
}

tessera_status free(void *device, void *ptr) { return CU_BOUND(cuda(device), cuMemFree_v2, devicePtr(ptr)); }

tessera_status memcpyHtoD(void *device, void *dst, const void *src, size_t bytes) {
  return CU_BOUND(cuda(device), cuMemcpyHtoD_v2, devicePtr(dst), src, bytes);
}

tessera_status memcpyDtoH(void *device, void *dst, const void *src, size_t bytes) {
  return CU_BOUND(cuda(device), cuMemcpyDtoH_v2, dst, devicePtr(src), bytes);
}

tessera_status memset(void *device, void *dst, int value, size_t bytes) {
  return CU_BOUND(cuda(device), cuMemsetD8_v2, devicePtr(dst), static_cast<unsigned char>(value), bytes);
}

tessera_status memsetAsync(void *device, void *dst, int value, size_t bytes, void *stream) {
  return CU_BOUND(cuda(device), cuMemsetD8Async, devicePtr(dst), static_cast<unsigned char>(value), bytes,
                  static_cast<CUstream>(stream));
}

tessera_status streamCapturing(void *device, void *stream, int *capturing) {
  int status = 0; // CUstreamCaptureStatus: NONE 0, ACTIVE 1, INVALIDATED 2 (a failed capture still captures)
  tessera_status s = CU_BOUND(cuda(device), cuStreamIsCapturing, static_cast<CUstream>(stream), &status);
  *capturing = status != 0;
  return s;
}

tessera_status synchronize(void *device) { return CU_BOUND(cuda(device), cuCtxSynchronize); }

void unloadKernel(void *device, void *kernel) {
  auto *k = static_cast<CudaKernel *>(kernel);
  if (k->module && cuda(device)->bind() == TESSERA_SUCCESS)
    cuda(device)->cuModuleUnload(k->module);
  delete k;
}

/// JIT-compiles the PTX; a failure carries the JIT's error log, which says what ptxas rejected.
tessera_status loadModule(CudaDevice *d, const tessera_backend_kernel_desc *desc, CUmodule &module) {
  char log[8192] = {};
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSize};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  CUresult result = d->cuModuleLoadDataEx(&module, desc->code_object, 2, options, values);
  return d->check(result, "cuModuleLoadDataEx", log[0] ? std::string("JIT log: ") + log : std::string());
}

tessera_status loadKernel(void *device, const tessera_backend_kernel_desc *desc, void **out) {
  CudaDevice *d = cuda(device);
  auto k = std::make_unique<CudaKernel>();
  tessera_status s = d->bind() ? TESSERA_ERROR_DRIVER : loadModule(d, desc, k->module);
  if (!s)
    s = CU_CHECK(d, cuModuleGetFunction, &k->function, k->module, desc->entry);
  if (!s && desc->lds_bytes + desc->dynamic_lds_bytes > kDefaultSharedLimit)
    s = CU_CHECK(d, cuFuncSetAttribute, k->function, kMaxDynamicSharedSizeBytes,
                 static_cast<int>(desc->dynamic_lds_bytes));
  if (s) {
    unloadKernel(device, k.release());
    return s;
  }
  *out = k.release();
  return TESSERA_SUCCESS;
}

tessera_status launch(void *device, void *kernel, const tessera_backend_launch *l) {
  // kernelParams: the driver reads each argument through its pointer, its size from the PTX.
  return CU_BOUND(cuda(device), cuLaunchKernel, static_cast<CudaKernel *>(kernel)->function, l->grid[0],
                  l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->dynamic_lds_bytes,
                  static_cast<CUstream>(l->stream), const_cast<void **>(l->arg_pointers), nullptr);
}

tessera_status encodeTensorMap(void *device, const tessera_tensor_map_desc *desc, void *out) {
  CudaDevice *d = cuda(device);
  if (!d->cuTensorMapEncodeTiled)
    return fail(TESSERA_ERROR_BACKEND_UNAVAILABLE,
                d->library->path() + " has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 or newer driver)");
  std::string dtype = desc->dtype;
  int type = dtype == "f16" ? kTensorMapFloat16 : dtype == "bf16" ? kTensorMapBFloat16 : kTensorMapFloat32;
  uint32_t elementStrides[5] = {1, 1, 1, 1, 1};
  // The driver API is per thread; no context call is needed to encode.
  CUresult r = d->cuTensorMapEncodeTiled(out, type, desc->rank, const_cast<void *>(desc->base), desc->dims,
                                         desc->stride_bytes, desc->box, elementStrides, /*interleave=*/0,
                                         kTensorMapSwizzle128B, kTensorMapL2Promotion128B, /*oobFill=*/0);
  return d->check(r, "cuTensorMapEncodeTiled");
}

} // namespace

const tessera_backend *cudaBackend() {
  static const tessera_backend backend = {
      TESSERA_BACKEND_ABI_VERSION, "cuda", "ptx", open, close, archName, alloc, free, memcpyHtoD, memcpyDtoH,
      memset, synchronize, loadKernel, unloadKernel, launch, encodeTensorMap, processorCount, memsetAsync,
      streamCapturing};
  return &backend;
}

} // namespace tessera::runtime

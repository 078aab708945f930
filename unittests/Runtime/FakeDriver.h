/* Fake GPU drivers for the runtime tests: libcuda and libamdhip64 functions plus a sim plugin, recording what the runtime asks. */
#ifndef TESSERA_UNITTESTS_RUNTIME_FAKEDRIVER_H
#define TESSERA_UNITTESTS_RUNTIME_FAKEDRIVER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One kernel launch as the kernel would see it. */
typedef struct fake_launch {
  char api[8];                 /* "cuda", "hip" or "sim" */
  char entry[64];
  unsigned grid[3], block[3], shared_bytes;
  void *stream;
  unsigned char args[256];     /* the arguments in the kernel's C layout */
  size_t args_size;
} fake_launch;

/* Forgets every call, failure, module and launch; device 0 becomes sm_90 / gfx942. */
void fake_reset(void);
void fake_set_cuda_arch(int major, int minor);
void fake_set_hip_arch(const char *gcn_arch_name);
/* cuModuleLoadDataEx takes this long, as a real PTX JIT does: concurrent first gets overlap. */
void fake_set_jit_ms(int ms);
/* The multiprocessor count CUDA devices report (132 after a reset). */
void fake_set_processor_count(int count);
/* After `after` successful calls of the function `call`, every further call returns `code`
   (the sim plugin's functions are "sim_<name>"). */
void fake_fail(const char *call, int code, int after);
/* How often the function `call` was called since the last reset. */
int fake_calls(const char *call);
int fake_live_allocations(void);
int fake_launch_count(void);
/* Launch `index` (from 0 since the last reset) while among the last 32, else NULL. */
const fake_launch *fake_launch_at(int index);
/* One asynchronous memset (cuMemsetD8Async, hipMemsetAsync, the sim plugin's memset_async). */
typedef struct fake_memset {
  void *dst;
  int value;
  size_t bytes;
  void *stream;
  int launches_before;         /* fake_launch_count() when it was issued */
} fake_memset;
int fake_memset_count(void);
const fake_memset *fake_memset_at(int index); /* among the last 32, else NULL */
/* Makes `stream` capture a graph (NULL: none) as the real drivers' global capture mode does:
   cuStreamIsCapturing / hipStreamIsCapturing say so for it, and allocation, freeing, synchronous
   copies and memsets and synchronisation fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) /
   hipErrorStreamCaptureUnsupported (900) while it lasts. */
void fake_set_capturing(void *stream);
/* The last value set by cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), or -1. */
int fake_max_dynamic_shared(void);
/* The last cuTensorMapEncodeTiled call (the fake writes the address, then dims[0..rank) as 8-byte words). */
typedef struct fake_tensor_map {
  int data_type, rank, swizzle, interleave, oob_fill;
  const void *address;
  unsigned long long dims[5], strides[4];
  unsigned box[5], element_strides[5];
} fake_tensor_map;
const fake_tensor_map *fake_last_tensor_map(void);
/* What the sim plugin's load_kernel was last given. */
const char *fake_sim_bundle_dir(void);
const char *fake_sim_kernel_json(void);
int fake_sim_code_object_given(void);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_UNITTESTS_RUNTIME_FAKEDRIVER_H */

/* Tessera backend interface: what a device backend (in-tree cuda/hip, or a plugin such as the simulator) implements. */
#ifndef TESSERA_RUNTIME_TESSERA_BACKEND_H
#define TESSERA_RUNTIME_TESSERA_BACKEND_H

#include "tessera/Runtime/tessera_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below changes layout; the runtime refuses plugins of another version. */
#define TESSERA_BACKEND_ABI_VERSION 3

/* Services the runtime gives a backend. */
typedef struct tessera_backend_host {
  /* Records `message` as this thread's tessera_last_error() and returns `status`, so a backend
     writes `return host->fail(TESSERA_ERROR_DRIVER, "cuX failed: ...");`. */
  tessera_status (*fail)(tessera_status status, const char *message);
} tessera_backend_host;

/* One kernel of a bundle, as the runtime hands it to load_kernel. The strings are valid only
   during the call; the code object stays valid until unload_kernel. */
typedef struct tessera_backend_kernel_desc {
  const char *bundle_dir;        /* the bundle directory */
  const char *kernel_json;       /* the kernel's manifest entry, JSON text */
  const char *entry;             /* symbol in the code object */
  /* The code object, read and validated by the runtime and followed by a NUL byte (PTX needs
     it); NULL when the backend's code_object_format is NULL. */
  const void *code_object;
  size_t code_object_size;
  uint32_t lds_bytes;            /* static shared memory (manifest "lds_bytes") */
  uint32_t dynamic_lds_bytes;    /* dynamic shared memory every launch passes (manifest "dynamic_lds_bytes") */
} tessera_backend_kernel_desc;

/* One launch, arguments already validated and packed by the runtime. */
typedef struct tessera_backend_launch {
  uint32_t grid[3];              /* workgroups; never zero */
  uint32_t block[3];             /* threads per workgroup */
  uint32_t dynamic_lds_bytes;
  /* The arguments in manifest order with C alignment (pointers 8 bytes), as one buffer (AMD
     kernarg segment) and as an array of pointers into it (CUDA kernelParams). */
  const void *arg_buffer;
  size_t arg_buffer_size;
  void *const *arg_pointers;
  size_t arg_count;
  void *stream;                  /* CUstream / hipStream_t / backend stream, or NULL */
} tessera_backend_launch;

/* A TMA tensor map to encode (CUtensorMap on CUDA): a tiled view of a strided tensor, 128-byte
   swizzled boxes, out-of-bounds elements read as zero and never written. */
typedef struct tessera_tensor_map_desc {
  const char *dtype;             /* element type: "f16", "bf16" or "f32" */
  const void *base;              /* device address of element 0, 16-byte aligned */
  uint32_t rank;                 /* 1..5 */
  uint64_t dims[5];              /* elements, innermost first */
  uint64_t stride_bytes[4];      /* of dims 1..rank-1, multiples of 16 */
  uint32_t box[5];               /* elements per copy, innermost first */
} tessera_tensor_map_desc;

/* A backend: a table of functions over opaque device and kernel handles. Every function that
   returns a status reports failures through host->fail. */
typedef struct tessera_backend {
  uint32_t abi_version;          /* TESSERA_BACKEND_ABI_VERSION */
  const char *name;              /* "cuda", "hip", "sim" */
  /* The code object format the backend loads ("ptx", "hsaco"), or NULL when it reads what it
     needs from the bundle directory itself (the simulator runs <kernel>.kernel.mlir). */
  const char *code_object_format;

  /* options: the text after ':' in the backend name ("sim:gfx942" gives "gfx942"), or NULL. */
  tessera_status (*open)(const tessera_backend_host *host, int ordinal, const char *options, void **device);
  void (*close)(void *device);
  const char *(*arch_name)(void *device);  /* "sm_90", "gfx942", ...; owned by the device */

  tessera_status (*alloc)(void *device, size_t bytes, void **ptr);
  tessera_status (*free)(void *device, void *ptr);
  tessera_status (*memcpy_htod)(void *device, void *dst, const void *src, size_t bytes);
  tessera_status (*memcpy_dtoh)(void *device, void *dst, const void *src, size_t bytes);
  tessera_status (*memset)(void *device, void *dst, int value, size_t bytes);
  tessera_status (*synchronize)(void *device);

  tessera_status (*load_kernel)(void *device, const tessera_backend_kernel_desc *desc, void **kernel);
  void (*unload_kernel)(void *device, void *kernel);
  tessera_status (*launch)(void *device, void *kernel, const tessera_backend_launch *launch);
  /* Writes the 128-byte tensor map for `desc` to `out` (64-byte aligned); NULL when the backend
     has no TMA (kernels with tensor_map arguments then fail to launch with a message). */
  tessera_status (*encode_tensor_map)(void *device, const tessera_tensor_map_desc *desc, void *out);
  /* Multiprocessors (SMs / CUs) of the device, for persistent kernels' grids ("$sm_count" in the
     manifest); NULL or 0 when unknown. */
  uint32_t (*processor_count)(void *device);
  /* ABI 3. Sets `bytes` bytes at `dst` to `value` in order on `stream` (cuMemsetD8Async,
     hipMemsetAsync; capturable in a CUDA graph): how kernel sets zero their workspaces. */
  tessera_status (*memset_async)(void *device, void *dst, int value, size_t bytes, void *stream);
  /* ABI 3, optional (NULL: never). Whether `stream` is capturing a graph (cuStreamIsCapturing):
     asked before a workspace would be allocated, which a capture forbids. */
  tessera_status (*stream_capturing)(void *device, void *stream, int *capturing);
} tessera_backend;

/* A plugin library (libtessera_sim_plugin.so) exports this function under this name. It
   returns its backend table, or NULL if it cannot serve `abi_version`. */
#define TESSERA_BACKEND_PLUGIN_SYMBOL "tessera_backend_plugin"
typedef const tessera_backend *(*tessera_backend_plugin_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_RUNTIME_TESSERA_BACKEND_H */

/* Tessera runtime C ABI: open a GPU (or simulator) device, load a bundle, launch its kernels by argument name. */
#ifndef TESSERA_RUNTIME_TESSERA_RUNTIME_H
#define TESSERA_RUNTIME_TESSERA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TESSERA_API __declspec(dllexport)
#else
#define TESSERA_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Every function except tessera_last_error and tessera_status_name returns one of these.
   The values are stable: Python mirrors them. */
typedef int tessera_status;
enum {
  TESSERA_SUCCESS = 0,
  TESSERA_ERROR_INVALID_ARGUMENT = 1,    /* API misuse: null handle or out pointer, unknown backend, index out of range */
  TESSERA_ERROR_BACKEND_UNAVAILABLE = 2, /* driver library or plugin not found, or lacks a function */
  TESSERA_ERROR_DRIVER = 3,              /* a driver call failed; the message names the call */
  TESSERA_ERROR_TARGET_MISMATCH = 4,     /* bundle made for another chip than the device's */
  TESSERA_ERROR_MANIFEST = 5,            /* manifest.json missing, not JSON, or not the bundle format */
  TESSERA_ERROR_CODE_OBJECT_MISSING = 6, /* a kernel's code object file does not exist or cannot be read */
  TESSERA_ERROR_CODE_OBJECT_CORRUPT = 7, /* a code object is truncated or not what the manifest says */
  TESSERA_ERROR_KERNEL_NOT_FOUND = 8,    /* no kernel of that name in the bundle */
  TESSERA_ERROR_ARGUMENT = 9,            /* kernel argument rejected before launch */
  TESSERA_ERROR_INTERNAL = 10            /* out of host memory or a runtime bug */
};

typedef struct tessera_device tessera_device;
typedef struct tessera_bundle tessera_bundle;
typedef struct tessera_kernel tessera_kernel;
typedef struct tessera_args tessera_args;
typedef struct tessera_kernel_set tessera_kernel_set;

/* The message of the most recent failing call on this thread ("" if none). Successful calls
   leave it unchanged. Valid until the next failing call on this thread. */
TESSERA_API const char *tessera_last_error(void);
/* "TESSERA_ERROR_MANIFEST" etc.; "TESSERA_UNKNOWN_STATUS" for other values. */
TESSERA_API const char *tessera_status_name(tessera_status status);

/* ---- Devices ---------------------------------------------------------------------------- */
/* backend: "cuda", "hip", "sim" or "sim:<target>" (the simulator plugin, e.g. "sim:gfx942").
   The device handle is closed with tessera_device_close; bundles keep the device alive. */
TESSERA_API tessera_status tessera_device_open(const char *backend, int ordinal, tessera_device **out);
TESSERA_API tessera_status tessera_device_close(tessera_device *device);
/* The chip: "sm_90", "gfx942", ... Owned by the device. */
TESSERA_API tessera_status tessera_device_arch(const tessera_device *device, const char **out);
/* "cuda", "hip" or "sim". Owned by the device. */
TESSERA_API tessera_status tessera_device_backend(const tessera_device *device, const char **out);

/* ---- Memory (device pointers are plain void*; torch pointers work on cuda/hip) ---------- */
TESSERA_API tessera_status tessera_malloc(tessera_device *device, size_t bytes, void **out);
TESSERA_API tessera_status tessera_free(tessera_device *device, void *ptr);
TESSERA_API tessera_status tessera_memcpy_htod(tessera_device *device, void *dst, const void *src, size_t bytes);
TESSERA_API tessera_status tessera_memcpy_dtoh(tessera_device *device, void *dst, const void *src, size_t bytes);
TESSERA_API tessera_status tessera_memset(tessera_device *device, void *dst, int value, size_t bytes);
TESSERA_API tessera_status tessera_synchronize(tessera_device *device);

/* ---- Bundles and kernels ----------------------------------------------------------------- */
/* Reads dir/manifest.json, refuses a bundle made for another chip before touching any code
   object, then reads and validates every code object. Kernels are not loaded through the driver
   yet: each is, on its first tessera_kernel_get. */
TESSERA_API tessera_status tessera_bundle_load(tessera_device *device, const char *dir, tessera_bundle **out);
/* Frees the bundle and its kernels; their handles and strings become invalid. */
TESSERA_API tessera_status tessera_bundle_unload(tessera_bundle *bundle);
TESSERA_API tessera_status tessera_bundle_target(const tessera_bundle *bundle, const char **out);
TESSERA_API tessera_status tessera_bundle_kernel_count(const tessera_bundle *bundle, int *out);
TESSERA_API tessera_status tessera_bundle_kernel_name(const tessera_bundle *bundle, int index, const char **out);
/* Kernel `index`'s manifest entry, as tessera_kernel_json gives it, without loading the kernel. */
TESSERA_API tessera_status tessera_bundle_kernel_json(const tessera_bundle *bundle, int index, const char **out);
/* The kernel is owned by the bundle. TESSERA_ERROR_KERNEL_NOT_FOUND if there is no such name.
   The first get of a kernel loads it through the driver (CUDA: a PTX JIT), once even when
   threads race; a driver failure is returned here, and a later get tries again. */
TESSERA_API tessera_status tessera_kernel_get(const tessera_bundle *bundle, const char *name, tessera_kernel **out);

/* Introspection; strings are owned by the bundle. */
TESSERA_API tessera_status tessera_kernel_name(const tessera_kernel *kernel, const char **out);
TESSERA_API tessera_status tessera_kernel_arg_count(const tessera_kernel *kernel, int *out);
TESSERA_API tessera_status tessera_kernel_arg_name(const tessera_kernel *kernel, int index, const char **out);
/* "ptr", "i32", "i64" or "f32". */
TESSERA_API tessera_status tessera_kernel_arg_type(const tessera_kernel *kernel, int index, const char **out);
/* The element type of a ptr argument ("f16", ...); NULL for scalars. */
TESSERA_API tessera_status tessera_kernel_arg_dtype(const tessera_kernel *kernel, int index, const char **out);
/* "input", "output", "inout", "size", "stride", "scale", "param", or one the runtime fills:
   "tensor_map", "tile_counter", "workspace". */
TESSERA_API tessera_status tessera_kernel_arg_role(const tessera_kernel *kernel, int index, const char **out);
/* The kernel's manifest entry as JSON text (directive, attributes, block, grid, args, ...). */
TESSERA_API tessera_status tessera_kernel_json(const tessera_kernel *kernel, const char **out);

/* ---- Launch -------------------------------------------------------------------------------- */
/* An argument set for one kernel, filled by name; the kernel's bundle must outlive it. Not
   thread-safe; reusable after tessera_args_reset. */
TESSERA_API tessera_status tessera_args_create(const tessera_kernel *kernel, tessera_args **out);
TESSERA_API tessera_status tessera_args_destroy(tessera_args *args);
TESSERA_API tessera_status tessera_args_reset(tessera_args *args);
/* Each fails with TESSERA_ERROR_ARGUMENT, naming the argument, when the name is unknown, the
   type differs from the manifest's, the argument was already set, a ptr is NULL, or a "size"
   argument is negative. */
TESSERA_API tessera_status tessera_args_set_ptr(tessera_args *args, const char *name, const void *value);
TESSERA_API tessera_status tessera_args_set_i64(tessera_args *args, const char *name, int64_t value);
TESSERA_API tessera_status tessera_args_set_i32(tessera_args *args, const char *name, int32_t value);
TESSERA_API tessera_status tessera_args_set_f32(tessera_args *args, const char *name, float value);
/* Sets every argument in one call (for callers where one call per argument costs, such as Python):
   values[i] holds the bits of argument i in manifest order, count is the kernel's argument count
   (tessera_kernel_arg_count). ptr and i64 use all 64 bits; i32 and f32 (its IEEE-754 bits) the
   low 32. Entries of tensor_map and tile_counter arguments are ignored (the runtime fills those
   at launch).
   Each argument gets the checks of the setters above, in order; the first rejected one fails the
   call with the same TESSERA_ERROR_ARGUMENT message, and the arguments before it stay set. A count
   other than the kernel's is TESSERA_ERROR_INVALID_ARGUMENT and sets nothing. */
TESSERA_API tessera_status tessera_args_set_all(tessera_args *args, const uint64_t *values, size_t count);
/* Checks that every argument is set, evaluates the manifest's grid, and launches on `stream`
   (a CUstream / hipStream_t, or NULL for the default stream). Asynchronous. A grid with a zero
   dimension launches nothing and succeeds. */
TESSERA_API tessera_status tessera_launch(const tessera_kernel *kernel, const tessera_args *args, void *stream);
/* The grid tessera_launch would use for these arguments (all arguments must be set). */
TESSERA_API tessera_status tessera_launch_grid(const tessera_kernel *kernel, const tessera_args *args,
                                               uint32_t grid[3]);

/* ---- Kernel sets (manifest "kernel_sets") -------------------------------------------------- */
/* Kernels launched together, in order, with one argument set: each kernel takes the arguments it
   declares, by name, and "workspace" arguments (device memory the runtime allocates per stream,
   zeroed before the first kernel where the manifest says so) are shared by the set's kernels. */
TESSERA_API tessera_status tessera_bundle_kernel_set_count(const tessera_bundle *bundle, int *out);
TESSERA_API tessera_status tessera_bundle_kernel_set_name(const tessera_bundle *bundle, int index, const char **out);
/* Set `index`'s manifest entry plus "args": the set's arguments (name, type, role, dtype) in the
   order tessera_args_set_all takes them. Owned by the bundle. */
TESSERA_API tessera_status tessera_bundle_kernel_set_json(const tessera_bundle *bundle, int index, const char **out);
/* The set is owned by the bundle; TESSERA_ERROR_KERNEL_NOT_FOUND if there is no such name. Loads every
   kernel of the set as tessera_kernel_get does. */
TESSERA_API tessera_status tessera_kernel_set_get(const tessera_bundle *bundle, const char *name,
                                                  tessera_kernel_set **out);
/* What tessera_bundle_kernel_set_json gives for the set. */
TESSERA_API tessera_status tessera_kernel_set_json(const tessera_kernel_set *set, const char **out);
/* An argument set for the kernel set, filled with the tessera_args_* setters above (names and the
   order of tessera_args_set_all are the set's arguments); destroyed with tessera_args_destroy. */
TESSERA_API tessera_status tessera_set_args_create(const tessera_kernel_set *set, tessera_args **out);
/* Checks every argument, grid, precondition and workspace size of every kernel, then on `stream`:
   zeroes the workspaces that ask for it (an asynchronous memset) and launches the kernels in order
   (one with an empty grid is skipped). Workspaces are the stream's, reused by later launches and grown
   when a launch needs more; no allocation or synchronisation happens once they are large enough, so
   launches can be captured in a CUDA graph after one launch outside the capture. A capture that
   needs more than was reserved fails with TESSERA_ERROR_ARGUMENT. Asynchronous. */
TESSERA_API tessera_status tessera_launch_set(const tessera_kernel_set *set, const tessera_args *args, void *stream);
/* Makes the workspaces of `stream`, of every other stream the set has run on, and the spare a stream
   new to the set takes (a graph capture's), as large as a launch with these arguments needs, without
   launching: before capturing calls larger than any made so far. */
TESSERA_API tessera_status tessera_kernel_set_reserve(const tessera_kernel_set *set, const tessera_args *args,
                                                      void *stream);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_RUNTIME_TESSERA_RUNTIME_H */

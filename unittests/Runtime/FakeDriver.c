/* Fake GPU drivers for the runtime tests: the libcuda and libamdhip64 functions the runtime uses, and a sim plugin. */
#include "FakeDriver.h"

#include "tessera/Runtime/tessera_backend.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- Call log and failure injection ------------------------------------------------------ */
typedef struct {
  char name[48];
  int calls, fail_code, fail_after;
} call_entry;
static call_entry call_log[64];
static int call_log_size;

static call_entry *entry_for(const char *name) {
  for (int i = 0; i < call_log_size; ++i)
    if (!strcmp(call_log[i].name, name))
      return &call_log[i];
  call_entry *e = &call_log[call_log_size++];
  memset(e, 0, sizeof *e); /* the slot may hold a call from before the last reset */
  snprintf(e->name, sizeof e->name, "%s", name);
  return e;
}

/* Counts a call of `name`; returns the injected error code for it, or 0. */
static int enter(const char *name) {
  call_entry *e = entry_for(name);
  int n = e->calls++;
  return e->fail_code && n >= e->fail_after ? e->fail_code : 0;
}

/* ---- Recorded state --------------------------------------------------------------------- */
static int cuda_major = 9, cuda_minor = 0;
static char hip_arch[256] = "gfx942:sramecc+:xnack-";
static int live_allocations;
static fake_launch launches[32];
static int launch_count;
static int max_dynamic_shared = -1;
static fake_tensor_map last_tensor_map;
static char sim_bundle_dir[512], sim_kernel_json[4096];
static int sim_code_object_given;
static int jit_ms;
static int processor_count = 132;
static fake_memset memsets[32];
static int memset_count;
static void *capturing_stream;

EXPORT void fake_reset(void) {
  call_log_size = 0;
  cuda_major = 9, cuda_minor = 0;
  snprintf(hip_arch, sizeof hip_arch, "%s", "gfx942:sramecc+:xnack-");
  live_allocations = launch_count = 0;
  max_dynamic_shared = -1;
  memset(&last_tensor_map, 0, sizeof last_tensor_map);
  sim_bundle_dir[0] = sim_kernel_json[0] = 0;
  sim_code_object_given = 0;
  jit_ms = 0;
  processor_count = 132;
  memset_count = 0;
  capturing_stream = NULL;
}
EXPORT int fake_memset_count(void) { return memset_count; }
EXPORT const fake_memset *fake_memset_at(int i) {
  return i >= 0 && i < memset_count && i >= memset_count - 32 ? &memsets[i % 32] : NULL;
}
EXPORT void fake_set_capturing(void *stream) { capturing_stream = stream; }

static void record_memset(void *dst, int value, size_t bytes, void *stream) {
  fake_memset *m = &memsets[memset_count++ % 32];
  m->dst = dst, m->value = value, m->bytes = bytes, m->stream = stream, m->launches_before = launch_count;
  memset(dst, value, bytes);
}

/* During a capture the calls that would break it fail, as in the drivers' global capture mode. */
#define CAPTURE_UNSUPPORTED 900
#define FORBIDDEN_IN_CAPTURE()                                                                     \
  do {                                                                                             \
    if (capturing_stream) return CAPTURE_UNSUPPORTED;                                              \
  } while (0)
EXPORT void fake_set_cuda_arch(int major, int minor) { cuda_major = major, cuda_minor = minor; }
EXPORT void fake_set_hip_arch(const char *name) { snprintf(hip_arch, sizeof hip_arch, "%s", name); }
EXPORT void fake_set_jit_ms(int ms) { jit_ms = ms; }
EXPORT void fake_set_processor_count(int count) { processor_count = count; }
EXPORT void fake_fail(const char *call, int code, int after) {
  call_entry *e = entry_for(call);
  e->fail_code = code, e->fail_after = after;
}
EXPORT int fake_calls(const char *call) { return entry_for(call)->calls; }
EXPORT int fake_live_allocations(void) { return live_allocations; }
EXPORT int fake_launch_count(void) { return launch_count; }
/* The last 32 launches are kept (a ring): older ones are gone. */
EXPORT const fake_launch *fake_launch_at(int i) {
  return i >= 0 && i < launch_count && i >= launch_count - 32 ? &launches[i % 32] : NULL;
}
EXPORT int fake_max_dynamic_shared(void) { return max_dynamic_shared; }
EXPORT const fake_tensor_map *fake_last_tensor_map(void) { return &last_tensor_map; }
EXPORT const char *fake_sim_bundle_dir(void) { return sim_bundle_dir; }
EXPORT const char *fake_sim_kernel_json(void) { return sim_kernel_json; }
EXPORT int fake_sim_code_object_given(void) { return sim_code_object_given; }

static fake_launch *record_launch(const char *api, const char *entry, const unsigned grid[3], const unsigned block[3],
                                  unsigned shared, void *stream) {
  fake_launch *l = &launches[launch_count++ % 32];
  memset(l, 0, sizeof *l);
  snprintf(l->api, sizeof l->api, "%s", api);
  snprintf(l->entry, sizeof l->entry, "%s", entry);
  memcpy(l->grid, grid, sizeof l->grid);
  memcpy(l->block, block, sizeof l->block);
  l->shared_bytes = shared, l->stream = stream;
  return l;
}

static void record_args(fake_launch *l, const void *buffer, size_t size) {
  l->args_size = size < sizeof l->args ? size : sizeof l->args;
  if (buffer)
    memcpy(l->args, buffer, l->args_size);
}

static void *device_alloc(size_t bytes) {
  ++live_allocations;
  return malloc(bytes);
}
static void device_free(void *p) {
  --live_allocations;
  free(p);
}

/* ---- Fake libcuda ------------------------------------------------------------------------ */
typedef int CUresult;
enum { CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
       CUDA_ERROR_INVALID_CONTEXT = 201, CUDA_ERROR_INVALID_PTX = 218, CUDA_ERROR_NOT_FOUND = 500,
       CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701 };

typedef struct { char *image; } cu_module;
typedef struct {
  char entry[64];
  int param_count;
  int param_sizes[32];
} cu_function;

static int the_context;
static _Thread_local void *current_context;

/* Like the real driver, everything but initialisation needs a current context on this thread. */
#define CU_ENTER(name)                                                                             \
  do {                                                                                             \
    int e_ = enter(name);                                                                          \
    if (e_) return e_;                                                                             \
    if (current_context != &the_context) return CUDA_ERROR_INVALID_CONTEXT;                        \
  } while (0)

EXPORT CUresult cuInit(unsigned flags) {
  int e = enter("cuInit");
  return e ? e : flags ? CUDA_ERROR_INVALID_VALUE : 0;
}
EXPORT CUresult cuDeviceGet(int *device, int ordinal) {
  int e = enter("cuDeviceGet");
  if (e) return e;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return 0;
}
EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
  int e = enter("cuDeviceGetAttribute");
  if (e) return e;
  *value = attribute == 75 ? cuda_major : attribute == 76 ? cuda_minor : attribute == 16 ? processor_count : 0;
  return device == 0 ? 0 : CUDA_ERROR_INVALID_DEVICE;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
  int e = enter("cuDevicePrimaryCtxRetain");
  if (e) return e;
  *context = &the_context;
  return device == 0 ? 0 : CUDA_ERROR_INVALID_DEVICE;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  int e = enter("cuDevicePrimaryCtxRelease_v2");
  return e ? e : device ? CUDA_ERROR_INVALID_DEVICE : 0;
}
EXPORT CUresult cuCtxSetCurrent(void *context) {
  int e = enter("cuCtxSetCurrent");
  if (e) return e;
  current_context = context;
  return 0;
}
EXPORT CUresult cuCtxSynchronize(void) { CU_ENTER("cuCtxSynchronize"); FORBIDDEN_IN_CAPTURE(); return 0; }
EXPORT CUresult cuMemAlloc_v2(unsigned long long *ptr, size_t bytes) {
  CU_ENTER("cuMemAlloc_v2");
  FORBIDDEN_IN_CAPTURE();
  *ptr = (unsigned long long)(uintptr_t)device_alloc(bytes);
  return 0;
}
EXPORT CUresult cuMemFree_v2(unsigned long long ptr) { CU_ENTER("cuMemFree_v2"); FORBIDDEN_IN_CAPTURE(); device_free((void *)(uintptr_t)ptr); return 0; }
EXPORT CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
  CU_ENTER("cuMemcpyHtoD_v2");
  memcpy((void *)(uintptr_t)dst, src, bytes);
  return 0;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
  CU_ENTER("cuMemcpyDtoH_v2");
  memcpy(dst, (const void *)(uintptr_t)src, bytes);
  return 0;
}
EXPORT CUresult cuMemsetD8_v2(unsigned long long dst, unsigned char value, size_t bytes) {
  CU_ENTER("cuMemsetD8_v2");
  FORBIDDEN_IN_CAPTURE();
  memset((void *)(uintptr_t)dst, value, bytes);
  return 0;
}
EXPORT CUresult cuMemsetD8Async(unsigned long long dst, unsigned char value, size_t bytes, void *stream) {
  CU_ENTER("cuMemsetD8Async");
  record_memset((void *)(uintptr_t)dst, value, bytes, stream);
  return 0;
}
EXPORT CUresult cuStreamIsCapturing(void *stream, int *status) {
  CU_ENTER("cuStreamIsCapturing");
  *status = capturing_stream && stream == capturing_stream ? 1 : 0;
  return 0;
}

/* A failing JIT writes its log where CU_JIT_ERROR_LOG_BUFFER (5) says, up to option 6 bytes. */
static void write_jit_log(unsigned count, const int *options, void **values, const char *text) {
  char *buffer = NULL;
  size_t size = 0;
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == 5) buffer = values[i];
    if (options[i] == 6) size = (size_t)(uintptr_t)values[i];
  }
  if (buffer && size)
    snprintf(buffer, size, "%s", text);
}

EXPORT CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned count, int *options, void **values) {
  int e = enter("cuModuleLoadDataEx");
  if (e) {
    write_jit_log(count, options, values, "ptxas application ptx input, line 7; error   : fake JIT failure");
    return e;
  }
  if (current_context != &the_context) return CUDA_ERROR_INVALID_CONTEXT;
  struct timespec jit = {jit_ms / 1000, (jit_ms % 1000) * 1000000L};
  nanosleep(&jit, NULL);
  cu_module *m = calloc(1, sizeof *m);
  size_t size = strlen(image) + 1; /* PTX is NUL-terminated text */
  m->image = memcpy(malloc(size), image, size);
  *module = m;
  return 0;
}
EXPORT CUresult cuModuleUnload(void *module) {
  CU_ENTER("cuModuleUnload");
  free(((cu_module *)module)->image);
  free(module);
  return 0;
}

/* The parameter sizes of `.entry name(.param .u64 a, .param .u32 n, ...)`, as the driver knows them. */
static int parse_entry(const char *ptx, const char *name, cu_function *f) {
  size_t length = strlen(name);
  for (const char *at = strstr(ptx, ".entry "); at; at = strstr(at + 1, ".entry ")) {
    const char *symbol = at + 7;
    if (strncmp(symbol, name, length) || isalnum((unsigned char)symbol[length]) || symbol[length] == '_')
      continue;
    snprintf(f->entry, sizeof f->entry, "%s", name);
    const char *end = strchr(symbol, ')');
    for (const char *p = strstr(symbol, ".param"); p && (!end || p < end) && f->param_count < 32;
         p = strstr(p + 1, ".param")) {
      const char *type = p + 6;
      while (*type == ' ') ++type;
      const char *array = strchr(type, '[');
      const char *next = strstr(type, ".param");
      if (!strncmp(type, ".align", 6) && array && (!next || array < next))
        f->param_sizes[f->param_count++] = atoi(array + 1); /* ".align 64 .b8 name[128]" -> 128 */
      else
        f->param_sizes[f->param_count++] = atoi(type + 2) / 8; /* ".u64" -> 8 */
    }
    return 1;
  }
  return 0;
}

EXPORT CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  CU_ENTER("cuModuleGetFunction");
  cu_function *f = calloc(1, sizeof *f);
  if (!parse_entry(((cu_module *)module)->image, name, f)) {
    free(f);
    return CUDA_ERROR_NOT_FOUND;
  }
  *function = f; /* leaked: a fake */
  return 0;
}
EXPORT CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
  CU_ENTER("cuFuncSetAttribute");
  if (attribute == 8) max_dynamic_shared = value;
  return function ? 0 : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  CU_ENTER("cuLaunchKernel");
  const cu_function *f = function;
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  fake_launch *l = record_launch("cuda", f->entry, grid, block, shared, stream);
  /* Rebuild the C layout from kernelParams, each parameter at its natural alignment. */
  size_t offset = 0;
  for (int i = 0; i < f->param_count; ++i) {
    size_t size = (size_t)f->param_sizes[i], align = size > 64 ? 64 : size;
    offset = (offset + align - 1) / align * align;
    if (offset + size <= sizeof l->args) memcpy(l->args + offset, params[i], size);
    offset += size;
  }
  l->args_size = offset;
  return extra ? CUDA_ERROR_INVALID_VALUE : 0;
}

EXPORT CUresult cuTensorMapEncodeTiled(void *map, int data_type, unsigned rank, void *address,
                                       const unsigned long long *dims, const unsigned long long *strides,
                                       const unsigned *box, const unsigned *element_strides, int interleave,
                                       int swizzle, int l2_promotion, int oob_fill) {
  int e_ = enter("cuTensorMapEncodeTiled"); /* a host-side call: no context needed */
  if (e_) return e_;
  (void)l2_promotion;
  if (rank < 1 || rank > 5 || ((unsigned long long)(size_t)map) % 64) return CUDA_ERROR_INVALID_VALUE;
  fake_tensor_map *t = &last_tensor_map;
  t->data_type = data_type, t->rank = (int)rank, t->swizzle = swizzle, t->interleave = interleave;
  t->oob_fill = oob_fill, t->address = address;
  for (unsigned i = 0; i < rank; ++i) {
    t->dims[i] = dims[i], t->box[i] = box[i], t->element_strides[i] = element_strides[i];
    if (i) t->strides[i - 1] = strides[i - 1];
  }
  unsigned long long words[16] = {(unsigned long long)(size_t)address};
  for (unsigned i = 0; i < rank; ++i) words[1 + i] = dims[i];
  memcpy(map, words, sizeof words);
  return 0;
}

static const char *cuda_error_name(int code, int describe) {
  switch (code) {
  case CUDA_ERROR_INVALID_VALUE: return describe ? "invalid argument" : "CUDA_ERROR_INVALID_VALUE";
  case CUDA_ERROR_NO_DEVICE: return describe ? "no CUDA-capable device is detected" : "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_INVALID_DEVICE: return describe ? "invalid device ordinal" : "CUDA_ERROR_INVALID_DEVICE";
  case CUDA_ERROR_INVALID_CONTEXT: return describe ? "invalid device context" : "CUDA_ERROR_INVALID_CONTEXT";
  case CUDA_ERROR_INVALID_PTX: return describe ? "a PTX JIT compilation failed" : "CUDA_ERROR_INVALID_PTX";
  case CUDA_ERROR_NOT_FOUND: return describe ? "named symbol not found" : "CUDA_ERROR_NOT_FOUND";
  case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return describe ? "too many resources requested for launch" : "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  default: return NULL;
  }
}
EXPORT CUresult cuGetErrorName(CUresult code, const char **name) {
  *name = cuda_error_name(code, 0);
  return *name ? 0 : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuGetErrorString(CUresult code, const char **text) {
  *text = cuda_error_name(code, 1);
  return *text ? 0 : CUDA_ERROR_INVALID_VALUE;
}

/* ---- Fake libamdhip64 -------------------------------------------------------------------- */
typedef int hipError_t;
enum { hipErrorInvalidValue = 1, hipErrorInvalidDevice = 101, hipErrorInvalidImage = 200, hipErrorNotFound = 500 };
typedef struct { char entry[64]; } hip_function;

static _Thread_local int current_device = -1;

#define HIP_ENTER(name)                                                                            \
  do {                                                                                             \
    int e_ = enter(name);                                                                          \
    if (e_) return e_;                                                                             \
    if (current_device != 0) return hipErrorInvalidDevice;                                         \
  } while (0)

EXPORT hipError_t hipInit(unsigned flags) {
  int e = enter("hipInit");
  return e ? e : flags ? hipErrorInvalidValue : 0;
}
EXPORT hipError_t hipSetDevice(int ordinal) {
  int e = enter("hipSetDevice");
  if (e) return e;
  if (ordinal != 0) return hipErrorInvalidDevice;
  current_device = ordinal;
  return 0;
}
/* hipDeviceProp_tR0600: the name at offset 0, gcnArchName at offset 1160. */
EXPORT hipError_t hipGetDevicePropertiesR0600(void *props, int ordinal) {
  HIP_ENTER("hipGetDevicePropertiesR0600");
  memset(props, 0, 1472);
  snprintf(props, 256, "%s", "Fake AMD Instinct");
  snprintf((char *)props + 1160, 256, "%s", hip_arch);
  return ordinal == 0 ? 0 : hipErrorInvalidDevice;
}
EXPORT hipError_t hipMalloc(void **ptr, size_t bytes) { HIP_ENTER("hipMalloc"); FORBIDDEN_IN_CAPTURE(); *ptr = device_alloc(bytes); return 0; }
EXPORT hipError_t hipFree(void *ptr) { HIP_ENTER("hipFree"); device_free(ptr); return 0; }
EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t bytes, int kind) {
  HIP_ENTER("hipMemcpy");
  memcpy(dst, src, bytes);
  return kind == 1 || kind == 2 ? 0 : hipErrorInvalidValue;
}
EXPORT hipError_t hipMemset(void *dst, int value, size_t bytes) { HIP_ENTER("hipMemset"); memset(dst, value, bytes); return 0; }
EXPORT hipError_t hipMemsetAsync(void *dst, int value, size_t bytes, void *stream) {
  HIP_ENTER("hipMemsetAsync");
  record_memset(dst, value, bytes, stream);
  return 0;
}
EXPORT hipError_t hipStreamIsCapturing(void *stream, int *status) {
  HIP_ENTER("hipStreamIsCapturing");
  *status = capturing_stream && stream == capturing_stream ? 1 : 0;
  return 0;
}
EXPORT hipError_t hipModuleLoadData(void **module, const void *image) {
  HIP_ENTER("hipModuleLoadData");
  *module = (void *)(uintptr_t)image; /* the fake keeps no copy */
  return memcmp(image, "\x7f" "ELF", 4) ? hipErrorInvalidImage : 0;
}
EXPORT hipError_t hipModuleUnload(void *module) { HIP_ENTER("hipModuleUnload"); return module ? 0 : hipErrorInvalidValue; }
EXPORT hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
  HIP_ENTER("hipModuleGetFunction");
  hip_function *f = calloc(1, sizeof *f);
  snprintf(f->entry, sizeof f->entry, "%s", name);
  *function = f; /* leaked: a fake */
  return module ? 0 : hipErrorNotFound;
}
EXPORT hipError_t hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                                        void **extra) {
  HIP_ENTER("hipModuleLaunchKernel");
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  fake_launch *l = record_launch("hip", ((hip_function *)function)->entry, grid, block, shared, stream);
  /* extra = {BUFFER_POINTER (1), buffer, BUFFER_SIZE (2), &size, END (3)} */
  const void *buffer = NULL;
  size_t size = 0;
  for (int i = 0; extra && extra[i] != (void *)3; i += 2) {
    if (extra[i] == (void *)1) buffer = extra[i + 1];
    else if (extra[i] == (void *)2) size = *(size_t *)extra[i + 1];
    else return hipErrorInvalidValue;
  }
  record_args(l, buffer, size);
  return params ? hipErrorInvalidValue : 0;
}
EXPORT hipError_t hipDeviceSynchronize(void) { HIP_ENTER("hipDeviceSynchronize"); return 0; }
EXPORT const char *hipGetErrorName(hipError_t code) {
  switch (code) {
  case hipErrorInvalidValue: return "hipErrorInvalidValue";
  case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
  case hipErrorInvalidImage: return "hipErrorInvalidImage";
  case hipErrorNotFound: return "hipErrorNotFound";
  default: return "hipErrorUnknown";
  }
}
EXPORT const char *hipGetErrorString(hipError_t code) { return code == hipErrorInvalidImage ? "invalid kernel file" : "fake HIP error"; }

/* ---- Fake sim plugin: the backend interface over host memory ------------------------------- */
typedef struct {
  const tessera_backend_host *host;
  char arch[32];
} sim_device;
typedef struct { char entry[64]; } sim_kernel;

/* Plugins report failures through the host, which sets tessera_last_error(). */
#define SIM_ENTER(host, name)                                                                      \
  do {                                                                                             \
    if (enter(name)) return (host)->fail(TESSERA_ERROR_DRIVER, name " failed: injected by the fake plugin"); \
  } while (0)

static tessera_status sim_open(const tessera_backend_host *host, int ordinal, const char *options, void **out) {
  SIM_ENTER(host, "sim_open");
  if (ordinal != 0) return host->fail(TESSERA_ERROR_INVALID_ARGUMENT, "fake sim has one device");
  sim_device *d = calloc(1, sizeof *d);
  d->host = host;
  snprintf(d->arch, sizeof d->arch, "%s", options ? options : "gfx942");
  *out = d;
  return TESSERA_SUCCESS;
}
static void sim_close(void *device) { free(device); }
static const char *sim_arch(void *device) { return ((sim_device *)device)->arch; }
static tessera_status sim_alloc(void *device, size_t bytes, void **ptr) {
  SIM_ENTER(((sim_device *)device)->host, "sim_alloc");
  *ptr = device_alloc(bytes);
  return TESSERA_SUCCESS;
}
static tessera_status sim_free(void *device, void *ptr) { (void)device; device_free(ptr); return TESSERA_SUCCESS; }
static tessera_status sim_copy(void *device, void *dst, const void *src, size_t bytes) {
  (void)device;
  memcpy(dst, src, bytes);
  return TESSERA_SUCCESS;
}
static tessera_status sim_memset(void *device, void *dst, int value, size_t bytes) {
  (void)device;
  memset(dst, value, bytes);
  return TESSERA_SUCCESS;
}
static tessera_status sim_synchronize(void *device) { (void)device; return TESSERA_SUCCESS; }
static tessera_status sim_memset_async(void *device, void *dst, int value, size_t bytes, void *stream) {
  SIM_ENTER(((sim_device *)device)->host, "sim_memset_async");
  record_memset(dst, value, bytes, stream);
  return TESSERA_SUCCESS;
}
static tessera_status sim_load_kernel(void *device, const tessera_backend_kernel_desc *desc, void **out) {
  SIM_ENTER(((sim_device *)device)->host, "sim_load_kernel");
  snprintf(sim_bundle_dir, sizeof sim_bundle_dir, "%s", desc->bundle_dir);
  snprintf(sim_kernel_json, sizeof sim_kernel_json, "%s", desc->kernel_json);
  sim_code_object_given = desc->code_object != NULL;
  sim_kernel *k = calloc(1, sizeof *k);
  snprintf(k->entry, sizeof k->entry, "%s", desc->entry);
  *out = k;
  return TESSERA_SUCCESS;
}
static void sim_unload_kernel(void *device, void *kernel) { (void)device; free(kernel); }
static tessera_status sim_launch(void *device, void *kernel, const tessera_backend_launch *launch) {
  SIM_ENTER(((sim_device *)device)->host, "sim_launch");
  fake_launch *l = record_launch("sim", ((sim_kernel *)kernel)->entry, launch->grid, launch->block,
                                 launch->dynamic_lds_bytes, launch->stream);
  record_args(l, launch->arg_buffer, launch->arg_buffer_size);
  return TESSERA_SUCCESS;
}

static const tessera_backend sim_backend = {
    TESSERA_BACKEND_ABI_VERSION, "sim", NULL, sim_open, sim_close, sim_arch, sim_alloc, sim_free, sim_copy, sim_copy,
    sim_memset, sim_synchronize, sim_load_kernel, sim_unload_kernel, sim_launch, NULL, NULL, sim_memset_async, NULL};

EXPORT const tessera_backend *tessera_backend_plugin(uint32_t abi_version) {
  return abi_version == TESSERA_BACKEND_ABI_VERSION ? &sim_backend : NULL;
}

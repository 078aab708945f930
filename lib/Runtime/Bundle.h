// A loaded bundle: its manifest and one kernel per manifest kernel, driver-loaded on its first get.
#ifndef TESSERA_RUNTIME_BUNDLE_H
#define TESSERA_RUNTIME_BUNDLE_H

#include "Device.h"
#include "Manifest.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::runtime {

/// The last TMA tensor map encoded for each tensor_map argument of a kernel: repeated calls on
/// the same tensors (the usual case) skip the driver's encoding.
class TensorMapCache {
public:
  tessera_status encode(const Device &device, int arg, const tessera_tensor_map_desc &desc, void *out) const;

private:
  struct Entry {
    int arg;
    tessera_tensor_map_desc desc;
    alignas(64) unsigned char bytes[128];
  };
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Entry>> entries_;
};

/// The workspaces of one kernel set: one buffer per (stream, workspace), reused by every launch
/// on that stream (launches on one stream run in order), grown when a launch needs more, never
/// shrunk. CUDA graph capture allows no allocation: a spare buffer per workspace, as large as
/// the largest a stream has, is kept for a stream new to the pool (torch captures on a stream of
/// its own) and taken without a driver call; a capture that needs more than exists fails with
/// an ARGUMENT error. Outgrown buffers are kept until the set goes (a captured graph may still
/// use them); growth at least doubles, so they add up to less than the current ones. Thread-safe.
class WorkspacePool {
public:
  ~WorkspacePool();
  /// The buffers (one per workspace, at least `bytes[w]` each) for a launch on `stream`;
  /// `label` names the set in messages. Called with `lock()` held for the whole launch, so
  /// two launches of the set on one stream do not interleave their kernels.
  tessera_status acquire(const Device &device, void *stream, const std::vector<size_t> &bytes,
                         const std::vector<std::string> &names, const std::string &label, std::vector<void *> &out) const;
  /// acquire for `stream`, and every other stream's buffers (and the spare) grown to `bytes`
  /// too: a stream that captures later (torch captures on a stream of its own, often one an earlier
  /// capture used) finds them large enough. Called with `lock()` held, outside captures.
  tessera_status reserve(const Device &device, void *stream, const std::vector<size_t> &bytes,
                         const std::vector<std::string> &names, const std::string &label) const;
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mutex_); }

private:
  struct Buffer {
    void *ptr = nullptr;
    size_t bytes = 0;
  };
  tessera_status grow(const Device &device, Buffer &buffer, size_t bytes) const;
  mutable std::mutex mutex_;
  mutable const Device *device_ = nullptr;     ///< set by the first acquire, for the destructor
  mutable std::map<void *, std::vector<Buffer>> streams_;
  mutable std::vector<Buffer> spare_;
  mutable std::vector<void *> retired_;
};

} // namespace tessera::runtime

struct tessera_kernel {
  const tessera_bundle *bundle = nullptr;
  const tessera::runtime::KernelInfo *info = nullptr;
  /// The validated code object (empty for backends that read the bundle themselves), kept from
  /// the bundle's load: the driver loads it on the first get, and HIP may read it afterwards.
  std::string codeObject;
  /// The backend's kernel, null until the first successful getKernel. Written under loadMutex;
  /// callers hold a tessera_kernel only after such a get, so they read it without the lock.
  void *handle = nullptr;
  std::mutex loadMutex;
  tessera::runtime::TensorMapCache tensorMapCache;
};

/// A kernel set of a bundle: its kernels (each loaded by the set's first get) in launch order,
/// and the workspaces its launches share.
struct tessera_kernel_set {
  const tessera_bundle *bundle = nullptr;
  const tessera::runtime::KernelSetInfo *info = nullptr;
  std::vector<tessera_kernel *> kernels; ///< launch order
  tessera::runtime::WorkspacePool workspaces;
};

struct tessera_bundle {
  ~tessera_bundle();
  std::shared_ptr<tessera::runtime::Device> device;
  std::string dir;
  tessera::runtime::Manifest manifest;
  std::vector<std::unique_ptr<tessera_kernel>> kernels;   ///< same order as manifest.kernels
  std::vector<std::unique_ptr<tessera_kernel_set>> sets;  ///< same order as manifest.kernelSets
};

namespace tessera::runtime {

/// Reads the manifest in `dir`, refuses a bundle for another chip, and reads and validates every
/// code object, so a bad bundle fails here. No kernel is loaded through the driver yet: a PTX JIT
/// costs up to half a second per kernel, and a process uses few of a bundle's kernels.
tessera_status loadBundle(const std::shared_ptr<Device> &device, const std::string &dir,
                          std::unique_ptr<tessera_bundle> &out);

/// The kernel called `name`, loaded through the driver by the first get (once, however many
/// threads ask). A failed load is not cached: the kernel stays unloaded, and the next get tries
/// again and reports that attempt's error.
tessera_status getKernel(const tessera_bundle &bundle, const std::string &name, tessera_kernel *&out);

/// The kernel set called `name`, every kernel of it loaded as by getKernel.
tessera_status getKernelSet(const tessera_bundle &bundle, const std::string &name, tessera_kernel_set *&out);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_BUNDLE_H

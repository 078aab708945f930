// A loaded bundle: its manifest and one kernel per manifest kernel, driver-loaded on its first get.
#ifndef TESSERA_RUNTIME_BUNDLE_H
#define TESSERA_RUNTIME_BUNDLE_H

#include "Device.h"
#include "Manifest.h"

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

struct tessera_bundle {
  ~tessera_bundle();
  std::shared_ptr<tessera::runtime::Device> device;
  std::string dir;
  tessera::runtime::Manifest manifest;
  std::vector<std::unique_ptr<tessera_kernel>> kernels; ///< same order as manifest.kernels
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

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_BUNDLE_H

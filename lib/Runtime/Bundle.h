// A loaded bundle: its manifest and one backend kernel per manifest kernel.
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
  void *handle = nullptr; ///< the backend's kernel
  tessera::runtime::TensorMapCache tensorMapCache;
};

struct tessera_bundle {
  ~tessera_bundle();
  std::shared_ptr<tessera::runtime::Device> device;
  std::string dir;
  tessera::runtime::Manifest manifest;
  std::vector<std::unique_ptr<tessera_kernel>> kernels; ///< same order as manifest.kernels
  /// The code object images, kept while the kernels live: HIP may read an image after
  /// hipModuleLoadData returns.
  std::vector<std::string> codeObjects;
};

namespace tessera::runtime {

/// Reads the manifest in `dir`, refuses a bundle for another chip, validates every code object
/// and only then loads them, so a bad bundle leaves nothing loaded.
tessera_status loadBundle(const std::shared_ptr<Device> &device, const std::string &dir,
                          std::unique_ptr<tessera_bundle> &out);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_BUNDLE_H

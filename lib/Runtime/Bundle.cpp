// Loading a bundle: manifest, target check, code object checks, then the backend loads each kernel.
#include "Bundle.h"

#include "CodeObject.h"
#include "Error.h"
#include "Target.h"

namespace tessera::runtime {

/// The target check happens before any code object is read: a bundle for another chip must
/// fail with both names, never inside the driver.
static tessera_status checkTarget(const Manifest &manifest, const Device &device, const std::string &dir) {
  if (!targetRunsOn(manifest.target, manifest.codeObjectFormat, device.arch))
    return fail(TESSERA_ERROR_TARGET_MISMATCH,
                "bundle target " + manifest.target + " does not match device " + device.arch + " (" + dir + ")");
  const char *format = device.backend->code_object_format;
  if (format && manifest.codeObjectFormat != format)
    return fail(TESSERA_ERROR_TARGET_MISMATCH, "bundle code objects are " + manifest.codeObjectFormat + " but the " +
                                                   device.backend->name + " backend loads " + format + " (" + dir + ")");
  return TESSERA_SUCCESS;
}

tessera_status loadBundle(const std::shared_ptr<Device> &device, const std::string &dir,
                          std::unique_ptr<tessera_bundle> &out) {
  auto bundle = std::make_unique<tessera_bundle>();
  bundle->device = device;
  bundle->dir = dir;
  if (tessera_status s = readManifest(dir, bundle->manifest))
    return s;
  const Manifest &manifest = bundle->manifest;
  if (tessera_status s = checkTarget(manifest, *device, dir))
    return s;

  // Every code object is read and checked before the first is loaded.
  std::vector<std::string> &codeObjects = bundle->codeObjects;
  codeObjects.resize(manifest.kernels.size());
  if (device->backend->code_object_format) {
    for (size_t i = 0; i < manifest.kernels.size(); ++i) {
      const KernelInfo &k = manifest.kernels[i];
      std::string path = dir + "/" + k.codeObject;
      if (tessera_status s = readCodeObject(path, codeObjects[i]))
        return s;
      if (tessera_status s = validateCodeObject(manifest.codeObjectFormat, codeObjects[i], k.entry, path))
        return s;
    }
  }

  for (size_t i = 0; i < manifest.kernels.size(); ++i) {
    const KernelInfo &k = manifest.kernels[i];
    bool hasCode = device->backend->code_object_format != nullptr;
    tessera_backend_kernel_desc desc = {dir.c_str(), k.json.c_str(), k.entry.c_str(),
                                        hasCode ? codeObjects[i].c_str() : nullptr, codeObjects[i].size(),
                                        k.ldsBytes, k.dynamicLdsBytes};
    auto kernel = std::make_unique<tessera_kernel>();
    kernel->bundle = bundle.get();
    kernel->info = &k;
    // On failure, ~tessera_bundle unloads the kernels loaded so far.
    if (tessera_status s = device->backend->load_kernel(device->handle, &desc, &kernel->handle))
      return s;
    bundle->kernels.push_back(std::move(kernel));
  }
  out = std::move(bundle);
  return TESSERA_SUCCESS;
}

} // namespace tessera::runtime

tessera_bundle::~tessera_bundle() {
  for (const auto &kernel : kernels)
    device->backend->unload_kernel(device->handle, kernel->handle);
}

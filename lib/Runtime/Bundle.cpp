// Loading a bundle (manifest, target check, code object checks) and its kernels, each on its first get.
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

  // Every code object is read and checked here, so a missing or corrupt one fails the load;
  // the driver sees each only on its kernel's first get.
  for (const KernelInfo &k : manifest.kernels) {
    auto kernel = std::make_unique<tessera_kernel>();
    kernel->bundle = bundle.get();
    kernel->info = &k;
    if (device->backend->code_object_format) {
      std::string path = dir + "/" + k.codeObject;
      if (tessera_status s = readCodeObject(path, kernel->codeObject))
        return s;
      if (tessera_status s = validateCodeObject(manifest.codeObjectFormat, kernel->codeObject, k.entry, path))
        return s;
    }
    bundle->kernels.push_back(std::move(kernel));
  }
  for (const KernelSetInfo &s : manifest.kernelSets) {
    auto set = std::make_unique<tessera_kernel_set>();
    set->bundle = bundle.get();
    set->info = &s;
    for (int k : s.kernels)
      set->kernels.push_back(bundle->kernels[k].get());
    bundle->sets.push_back(std::move(set));
  }
  out = std::move(bundle);
  return TESSERA_SUCCESS;
}

/// Loads `kernel` through the backend unless an earlier get did.
static tessera_status loadKernel(tessera_kernel &kernel) {
  std::lock_guard<std::mutex> lock(kernel.loadMutex);
  if (kernel.handle)
    return TESSERA_SUCCESS;
  const tessera_bundle &bundle = *kernel.bundle;
  const Device &device = *bundle.device;
  const KernelInfo &k = *kernel.info;
  bool hasCode = device.backend->code_object_format != nullptr;
  tessera_backend_kernel_desc desc = {bundle.dir.c_str(), k.json.c_str(), k.entry.c_str(),
                                      hasCode ? kernel.codeObject.c_str() : nullptr, kernel.codeObject.size(),
                                      k.ldsBytes, k.dynamicLdsBytes};
  // A counter is free before the first launch, which may be a CUDA graph capture's.
  if (k.tileCounterArg >= 0)
    if (tessera_status s = device.reserveTileCounters())
      return s;
  // Set only on success: the backend may write its out pointer before failing.
  void *handle = nullptr;
  if (tessera_status s = device.backend->load_kernel(device.handle, &desc, &handle))
    return s;
  kernel.handle = handle;
  return TESSERA_SUCCESS;
}

tessera_status getKernel(const tessera_bundle &bundle, const std::string &name, tessera_kernel *&out) {
  std::string known;
  for (const auto &kernel : bundle.kernels) {
    if (kernel->info->name == name) {
      if (tessera_status s = loadKernel(*kernel))
        return s;
      out = kernel.get();
      return TESSERA_SUCCESS;
    }
    appendToList(known, kernel->info->name);
  }
  return fail(TESSERA_ERROR_KERNEL_NOT_FOUND,
              "bundle " + bundle.dir + " has no kernel '" + name + "' (kernels: " + (known.empty() ? "none" : known) + ")");
}

tessera_status getKernelSet(const tessera_bundle &bundle, const std::string &name, tessera_kernel_set *&out) {
  std::string known;
  for (const auto &set : bundle.sets) {
    if (set->info->name == name) {
      for (tessera_kernel *kernel : set->kernels)
        if (tessera_status s = loadKernel(*kernel))
          return s;
      out = set.get();
      return TESSERA_SUCCESS;
    }
    appendToList(known, set->info->name);
  }
  return fail(TESSERA_ERROR_KERNEL_NOT_FOUND, "bundle " + bundle.dir + " has no kernel set '" + name +
                                                  "' (kernel sets: " + (known.empty() ? "none" : known) + ")");
}

} // namespace tessera::runtime

tessera_bundle::~tessera_bundle() {
  for (const auto &kernel : kernels)
    if (kernel->handle)
      device->backend->unload_kernel(device->handle, kernel->handle);
}

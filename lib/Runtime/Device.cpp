// Opening a device: picking the backend by name and checking what a plugin hands back.
#include "Device.h"

#include "Error.h"

namespace tessera::runtime {

// Called from plugin C code: nothing may throw out of it.
static tessera_status hostFail(tessera_status status, const char *message) {
  guard([&]() -> tessera_status { return fail(status, message ? message : "unknown backend error"); });
  return status;
}

const tessera_backend_host &backendHost() {
  static const tessera_backend_host host = {hostFail};
  return host;
}

Device::~Device() {
  if (!handle)
    return;
  for (void *slab : counterSlabs)
    backend->free(handle, slab);
  backend->close(handle);
}

tessera_status Device::reserveTileCounters() const {
  std::lock_guard<std::mutex> lock(countersMutex);
  return reserveLocked();
}

tessera_status Device::reserveLocked() const {
  if (countersUsed < counterSlabs.size() * kCountersPerSlab)
    return TESSERA_SUCCESS;
  constexpr size_t bytes = kCounterBytes * kCountersPerSlab;
  void *slab = nullptr;
  if (tessera_status s = backend->alloc(handle, bytes, &slab))
    return s;
  // Synchronised: the memset may run on another stream than the first launch using it.
  tessera_status s = backend->memset(handle, slab, 0, bytes);
  if (!s)
    s = backend->synchronize(handle);
  if (s) {
    backend->free(handle, slab);
    return s;
  }
  counterSlabs.push_back(slab);
  return TESSERA_SUCCESS;
}

tessera_status Device::tileCounter(void *stream, void *&out) const {
  std::lock_guard<std::mutex> lock(countersMutex);
  auto found = counters.find(stream);
  if (found != counters.end()) {
    out = found->second;
    return TESSERA_SUCCESS;
  }
  if (tessera_status s = reserveLocked())
    return s;
  size_t slot = countersUsed % kCountersPerSlab;
  out = static_cast<char *>(counterSlabs[countersUsed / kCountersPerSlab]) + slot * kCounterBytes;
  ++countersUsed;
  counters.emplace(stream, out);
  return TESSERA_SUCCESS;
}

tessera_status openDevice(const std::string &backend, int ordinal, std::shared_ptr<Device> &out) {
  size_t colon = backend.find(':');
  std::string kind = backend.substr(0, colon);
  std::string options = colon == std::string::npos ? "" : backend.substr(colon + 1);
  if (ordinal < 0)
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, "device ordinal " + std::to_string(ordinal) + " is negative");

  auto device = std::make_shared<Device>();
  if (kind == "cuda")
    device->backend = cudaBackend();
  else if (kind == "hip")
    device->backend = hipBackend();
  else if (kind == "sim") {
    if (tessera_status s = loadSimBackend(device->plugin, device->backend))
      return s;
  } else
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, "unknown backend '" + backend + "' (expected cuda, hip or sim[:<target>])");
  if (kind != "sim" && colon != std::string::npos)
    return fail(TESSERA_ERROR_INVALID_ARGUMENT, "backend " + kind + " takes no options ('" + backend + "')");

  if (tessera_status s = device->backend->open(&backendHost(), ordinal, options.empty() ? nullptr : options.c_str(),
                                               &device->handle))
    return s;
  const char *arch = device->backend->arch_name(device->handle);
  device->arch = arch ? arch : "";
  if (device->backend->processor_count)
    device->processorCount = device->backend->processor_count(device->handle);
  out = std::move(device);
  return TESSERA_SUCCESS;
}

} // namespace tessera::runtime

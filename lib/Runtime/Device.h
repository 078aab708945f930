// A device: one backend's function table with its opened device, shared by the bundles loaded on it.
#ifndef TESSERA_RUNTIME_DEVICE_H
#define TESSERA_RUNTIME_DEVICE_H

#include "Library.h"

#include "tessera/Runtime/tessera_backend.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::runtime {

struct Device {
  ~Device();
  const tessera_backend *backend = nullptr;
  void *handle = nullptr;                 ///< the backend's device
  std::unique_ptr<SharedLibrary> plugin;  ///< keeps a plugin's code loaded while the device lives
  std::string arch;
  uint32_t processorCount = 0;            ///< SMs / CUs; 0 when the backend does not say

  /// The tile counter of `stream`: two i32 of device memory, zero when first handed out, that a
  /// dynamically scheduled kernel claims tiles from and leaves zero when it ends. Launches on
  /// one stream run in order and share it; each stream has its own, so launches that may
  /// overlap do not. Counters come from slabs reserved ahead (reserveTileCounters), so a
  /// stream's first launch makes no driver call while a free one is left: a CUDA graph capture,
  /// whose stream is new, forbids allocation and synchronisation. Thread-safe.
  tessera_status tileCounter(void *stream, void *&out) const;
  /// Makes sure a counter is free, allocating and zeroing a slab if not: called when a kernel
  /// with a tile_counter argument is loaded.
  tessera_status reserveTileCounters() const;

private:
  static constexpr size_t kCounterBytes = 128;   ///< a cache line of its own
  static constexpr size_t kCountersPerSlab = 64; ///< 8 KiB
  tessera_status reserveLocked() const;
  mutable std::mutex countersMutex;
  mutable std::vector<void *> counterSlabs;
  mutable size_t countersUsed = 0;           ///< of all slabs, in order
  mutable std::map<void *, void *> counters; ///< stream -> its counter
};

/// Opens `backend` ("cuda", "hip", "sim" or "sim:<options>") device `ordinal`.
tessera_status openDevice(const std::string &backend, int ordinal, std::shared_ptr<Device> &out);

/// The services every backend gets.
const tessera_backend_host &backendHost();

// The backends. The in-tree ones are tables of functions in this library; the simulator is a
// plugin so the core runtime stays small and free of the simulator's dependencies.
const tessera_backend *cudaBackend();
const tessera_backend *hipBackend();
tessera_status loadSimBackend(std::unique_ptr<SharedLibrary> &plugin, const tessera_backend *&backend);

} // namespace tessera::runtime

/// The C handle: bundles share ownership, so closing the handle first is safe.
struct tessera_device {
  std::shared_ptr<tessera::runtime::Device> device;
};

#endif // TESSERA_RUNTIME_DEVICE_H

// Workspaces of kernel sets: per-stream buffers, grown never shrunk, with a spare so a graph capture allocates nothing.
#include "Bundle.h"

#include "Error.h"

#include <algorithm>
#include <optional>

namespace tessera::runtime {

namespace {
/// Allocations are whole 256-byte blocks, at least one: an empty workspace is still a valid
/// pointer into an allocation (the simulator checks every pointer argument).
size_t allocationSize(size_t bytes) { return std::max<size_t>(256, (bytes + 255) / 256 * 256); }
} // namespace

WorkspacePool::~WorkspacePool() {
  if (!device_)
    return;
  auto release = [&](void *ptr) {
    if (ptr)
      device_->backend->free(device_->handle, ptr);
  };
  for (auto &[stream, buffers] : streams_)
    for (Buffer &b : buffers)
      release(b.ptr);
  for (Buffer &b : spare_)
    release(b.ptr);
  for (void *ptr : retired_)
    release(ptr);
}

tessera_status WorkspacePool::grow(const Device &device, Buffer &buffer, size_t bytes) const {
  void *ptr = nullptr;
  size_t size = allocationSize(bytes);
  if (tessera_status s = device.backend->alloc(device.handle, size, &ptr))
    return s;
  if (buffer.ptr)
    retired_.push_back(buffer.ptr);
  buffer = {ptr, size};
  return TESSERA_SUCCESS;
}

tessera_status WorkspacePool::acquire(const Device &device, void *stream, const std::vector<size_t> &bytes,
                                      const std::vector<std::string> &names, const std::string &label,
                                      std::vector<void *> &out) const {
  device_ = &device;
  const size_t count = bytes.size();
  spare_.resize(count);
  auto found = streams_.find(stream);
  const bool fresh = found == streams_.end();
  // The first workspace `have` is too small for, or count.
  auto shortOf = [&](const std::vector<Buffer> &have, const std::vector<size_t> &need) {
    for (size_t w = 0; w < count; ++w)
      if (have[w].bytes < need[w])
        return w;
    return count;
  };
  // Asked only when a driver call would be needed; NULL (the simulator) never captures.
  std::optional<bool> capturing;
  auto isCapturing = [&](bool &out) -> tessera_status {
    if (!capturing) {
      int active = 0;
      if (device.backend->stream_capturing)
        if (tessera_status s = device.backend->stream_capturing(device.handle, stream, &active))
          return s;
      capturing = active != 0;
    }
    out = *capturing;
    return TESSERA_SUCCESS;
  };

  const std::vector<Buffer> &available = fresh ? spare_ : found->second;
  if (size_t w = shortOf(available, bytes); w < count) {
    bool inCapture = false;
    if (tessera_status s = isCapturing(inCapture))
      return s;
    if (inCapture)
      return fail(TESSERA_ERROR_ARGUMENT,
                  label + ": workspace '" + names[w] + "' needs " + std::to_string(bytes[w]) + " bytes, but " +
                      std::to_string(available[w].bytes) + " are ready for this stream, which is capturing a CUDA graph "
                      "(nothing can be allocated during a capture): run the call once before capturing, or reserve "
                      "the workspaces first (tessera_kernel_set_reserve)");
  }
  std::vector<Buffer> &mine = fresh ? streams_[stream] : found->second;
  if (fresh) {
    // A new stream takes the spare whole when it is large enough, with no driver call; a spare
    // too small stays and grows below.
    if (shortOf(spare_, bytes) == count) {
      std::swap(mine, spare_);
      spare_.assign(count, Buffer());
    }
    mine.resize(count);
  }
  for (size_t w = 0; w < count; ++w)
    if (mine[w].bytes < bytes[w])
      if (tessera_status s = grow(device, mine[w], std::max(bytes[w], 2 * mine[w].bytes)))
        return s;
  // The spare keeps up with the largest stream's buffers, outside captures.
  std::vector<size_t> held(count);
  for (size_t w = 0; w < count; ++w)
    held[w] = mine[w].bytes;
  if (shortOf(spare_, held) < count) {
    bool inCapture = false;
    if (tessera_status s = isCapturing(inCapture))
      return s;
    for (size_t w = 0; w < count && !inCapture; ++w)
      if (spare_[w].bytes < held[w])
        if (tessera_status s = grow(device, spare_[w], held[w]))
          return s;
  }
  out.resize(count);
  for (size_t w = 0; w < count; ++w)
    out[w] = mine[w].ptr;
  return TESSERA_SUCCESS;
}

tessera_status WorkspacePool::reserve(const Device &device, void *stream, const std::vector<size_t> &bytes,
                                      const std::vector<std::string> &names, const std::string &label) const {
  std::vector<void *> buffers;
  if (tessera_status s = acquire(device, stream, bytes, names, label, buffers))
    return s;
  // Old buffers are retired, not freed: launches in flight and captured graphs keep theirs.
  for (auto &[other, held] : streams_)
    for (size_t w = 0; w < bytes.size(); ++w)
      if (held[w].bytes < bytes[w])
        if (tessera_status s = grow(device, held[w], bytes[w]))
          return s;
  return TESSERA_SUCCESS;
}

} // namespace tessera::runtime

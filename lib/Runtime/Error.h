// Runtime errors: the thread-local last-error message and the guard that keeps C++ exceptions inside the C ABI.
#ifndef TESSERA_RUNTIME_ERROR_H
#define TESSERA_RUNTIME_ERROR_H

#include "tessera/Runtime/tessera_runtime.h"

#include <new>
#include <stdexcept>
#include <string>

namespace tessera::runtime {

/// Records `message` as this thread's last error and returns `status`. Never throws: it runs
/// inside the catch handlers of guard() too.
tessera_status fail(tessera_status status, const char *message) noexcept;
inline tessera_status fail(tessera_status status, const std::string &message) noexcept {
  return fail(status, message.c_str());
}
/// TESSERA_ERROR_INTERNAL with "internal error: <what>".
tessera_status failInternal(const char *what) noexcept;
const char *lastError();
const char *statusName(tessera_status status);

/// "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the one shape every
/// backend uses for a failed driver call.
tessera_status driverFailure(const char *call, int code, const char *name, const char *description,
                             const std::string &detail = {});

/// Appends `item` to the comma-separated `list` ("a, b, c") that messages show.
inline void appendToList(std::string &list, const std::string &item) { list += (list.empty() ? "" : ", ") + item; }

/// Runs `body` at the C boundary. nlohmann/json and the standard library throw; no exception
/// may cross into C callers, so they become TESSERA_ERROR_INTERNAL here.
template <typename Body> tessera_status guard(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(TESSERA_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception &e) {
    return failInternal(e.what());
  } catch (...) {
    return failInternal("unknown exception");
  }
}

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_ERROR_H

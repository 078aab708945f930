// Runtime errors: the thread-local last-error message and the guard that keeps C++ exceptions inside the C ABI.
#ifndef TESSERA_RUNTIME_ERROR_H
#define TESSERA_RUNTIME_ERROR_H

#include "tessera/Runtime/tessera_runtime.h"

#include <new>
#include <stdexcept>
#include <string>

namespace tessera::runtime {

/// Records `message` as this thread's last error and returns `status`.
tessera_status fail(tessera_status status, const std::string &message);
const char *lastError();
const char *statusName(tessera_status status);

/// "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the one shape every
/// backend uses for a failed driver call.
tessera_status driverFailure(const char *call, int code, const char *name, const char *description,
                             const std::string &detail = {});

/// Runs `body` at the C boundary. nlohmann/json and the standard library throw; no exception
/// may cross into C callers, so they become TESSERA_ERROR_INTERNAL here.
template <typename Body> tessera_status guard(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(TESSERA_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception &e) {
    return fail(TESSERA_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(TESSERA_ERROR_INTERNAL, "internal error: unknown exception");
  }
}

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_ERROR_H

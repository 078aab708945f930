// Runtime errors: the thread-local last-error message and the status names.
#include "Error.h"

namespace tessera::runtime {

// Thread-local because Python and torch call from several threads; each reads its own message.
static thread_local std::string lastMessage;

tessera_status fail(tessera_status status, const char *message) noexcept {
  try {
    lastMessage = message;
  } catch (...) {
    lastMessage.clear(); // out of memory: the status still says what happened
  }
  return status;
}

tessera_status failInternal(const char *what) noexcept {
  try {
    return fail(TESSERA_ERROR_INTERNAL, std::string("internal error: ") + what);
  } catch (...) {
    return fail(TESSERA_ERROR_INTERNAL, what);
  }
}

const char *lastError() { return lastMessage.c_str(); }

const char *statusName(tessera_status status) {
  switch (status) {
  case TESSERA_SUCCESS: return "TESSERA_SUCCESS";
  case TESSERA_ERROR_INVALID_ARGUMENT: return "TESSERA_ERROR_INVALID_ARGUMENT";
  case TESSERA_ERROR_BACKEND_UNAVAILABLE: return "TESSERA_ERROR_BACKEND_UNAVAILABLE";
  case TESSERA_ERROR_DRIVER: return "TESSERA_ERROR_DRIVER";
  case TESSERA_ERROR_TARGET_MISMATCH: return "TESSERA_ERROR_TARGET_MISMATCH";
  case TESSERA_ERROR_MANIFEST: return "TESSERA_ERROR_MANIFEST";
  case TESSERA_ERROR_CODE_OBJECT_MISSING: return "TESSERA_ERROR_CODE_OBJECT_MISSING";
  case TESSERA_ERROR_CODE_OBJECT_CORRUPT: return "TESSERA_ERROR_CODE_OBJECT_CORRUPT";
  case TESSERA_ERROR_KERNEL_NOT_FOUND: return "TESSERA_ERROR_KERNEL_NOT_FOUND";
  case TESSERA_ERROR_ARGUMENT: return "TESSERA_ERROR_ARGUMENT";
  case TESSERA_ERROR_INTERNAL: return "TESSERA_ERROR_INTERNAL";
  default: return "TESSERA_UNKNOWN_STATUS";
  }
}

tessera_status driverFailure(const char *call, int code, const char *name, const char *description,
                             const std::string &detail) {
  std::string message = std::string(call) + " failed: " + (name ? name : "error " + std::to_string(code));
  if (description)
    message += std::string(" (") + description + ")";
  if (!detail.empty())
    message += "\n" + detail;
  return fail(TESSERA_ERROR_DRIVER, message);
}

} // namespace tessera::runtime

// Code objects: read from the bundle and checked before any driver sees them.
#ifndef TESSERA_RUNTIME_CODEOBJECT_H
#define TESSERA_RUNTIME_CODEOBJECT_H

#include "tessera/Runtime/tessera_runtime.h"

#include <string>

namespace tessera::runtime {

/// Reads the file at `path`; TESSERA_ERROR_CODE_OBJECT_MISSING if it cannot.
tessera_status readCodeObject(const std::string &path, std::string &bytes);

/// Checks that `bytes` is a plausible code object of `format` ("ptx" or "hsaco") defining
/// `entry`; TESSERA_ERROR_CODE_OBJECT_CORRUPT naming `path` and the defect. Drivers crash or
/// give vague errors on truncated images, so the runtime checks first.
tessera_status validateCodeObject(const std::string &format, const std::string &bytes, const std::string &entry,
                                  const std::string &path);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_CODEOBJECT_H

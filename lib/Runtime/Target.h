// Which bundle targets a device can run: the one place the runtime compares chip names.
#ifndef TESSERA_RUNTIME_TARGET_H
#define TESSERA_RUNTIME_TARGET_H

#include <string>

namespace tessera::runtime {

/// Whether code made for `bundleTarget` in `codeObjectFormat` runs on a device reporting
/// `deviceArch`.
bool targetRunsOn(const std::string &bundleTarget, const std::string &codeObjectFormat, const std::string &deviceArch);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_TARGET_H

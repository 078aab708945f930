// Which bundle targets a device can run: exact chips for AMD, PTX forward compatibility for NVIDIA.
#include "Target.h"

#include <cctype>

namespace tessera::runtime {

namespace {

/// "sm_90a" is {90, "a"}; number is -1 for names that are not sm_<digits><suffix>.
struct SmVersion {
  int number = -1;     ///< major * 10 + minor: ordering by it is ordering by capability
  std::string suffix;  ///< "", "a" (this exact chip only) or "f" (this family)
};

SmVersion parseSm(const std::string &name) {
  SmVersion v;
  if (name.rfind("sm_", 0) != 0)
    return v;
  size_t end = 3;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])))
    ++end;
  if (end == 3 || end - 3 > 4)
    return v;
  v.number = std::stoi(name.substr(3, end - 3));
  v.suffix = name.substr(end);
  return v;
}

} // namespace

bool targetRunsOn(const std::string &bundleTarget, const std::string &codeObjectFormat, const std::string &deviceArch) {
  if (bundleTarget == deviceArch)
    return true;
  // AMD code objects are chip-exact: gfx1151 does not run gfx1100 code, nor gfx950 gfx942's.
  SmVersion bundle = parseSm(bundleTarget), device = parseSm(deviceArch);
  if (bundle.number < 0 || device.number < 0 || !device.suffix.empty())
    return false;
  // Arch-specific PTX (sm_90a: wgmma, setmaxnreg) runs only on that chip.
  if (bundle.suffix == "a")
    return bundle.number == device.number;
  // Family-specific PTX (sm_100f) runs on later chips of the same major version.
  if (bundle.suffix == "f")
    return bundle.number / 10 == device.number / 10 && bundle.number <= device.number;
  // Plain PTX is JIT-compiled by the driver for any chip at least as new.
  return bundle.suffix.empty() && codeObjectFormat == "ptx" && bundle.number <= device.number;
}

} // namespace tessera::runtime

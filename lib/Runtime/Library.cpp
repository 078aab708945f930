// Shared libraries opened at run time: dlopen with an environment override and clear failures.
#include "Library.h"

#include "Error.h"

#include <cstdlib>
#include <dlfcn.h>

namespace tessera::runtime {

tessera_status SharedLibrary::open(const Search &search, std::unique_ptr<SharedLibrary> &out) {
  const char *override = std::getenv(search.envVar);
  std::vector<std::string> paths =
      override && *override ? std::vector<std::string>{override} : search.candidates;
  std::string reason;
  for (const std::string &path : paths) {
    // RTLD_LOCAL: a driver's symbols must not leak into the process (torch loads its own).
    if (void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      out.reset(new SharedLibrary(handle, path));
      return TESSERA_SUCCESS;
    }
    reason = dlerror();
  }
  std::string tried;
  for (const std::string &path : paths)
    appendToList(tried, path);
  std::string hint = override && *override ? std::string(" (from ") + search.envVar + ")"
                                           : std::string(" (set ") + search.envVar + " to its path)";
  return fail(TESSERA_ERROR_BACKEND_UNAVAILABLE,
              std::string(search.what) + " unavailable: cannot load " + tried + hint + ": " + reason);
}

SharedLibrary::~SharedLibrary() { dlclose(handle_); }

void *SharedLibrary::findAddress(const char *symbol) const {
  dlerror();
  return dlsym(handle_, symbol);
}

tessera_status SharedLibrary::resolveAddress(const char *symbol, void **address) const {
  *address = findAddress(symbol);
  if (!*address)
    return fail(TESSERA_ERROR_BACKEND_UNAVAILABLE, path_ + " has no function " + symbol);
  return TESSERA_SUCCESS;
}

std::string runtimeLibraryDir() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&runtimeLibraryDir), &info) || !info.dli_fname)
    return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

} // namespace tessera::runtime

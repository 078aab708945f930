// Shared libraries opened at run time: driver libraries (libcuda, libamdhip64) and backend plugins.
#ifndef TESSERA_RUNTIME_LIBRARY_H
#define TESSERA_RUNTIME_LIBRARY_H

#include "tessera/Runtime/tessera_runtime.h"

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessera::runtime {

/// A dlopen'd library, closed on destruction.
class SharedLibrary {
public:
  /// Where to look: the path in `envVar` if that is set (tests point it at a fake driver),
  /// otherwise the first of `candidates` that loads. Failure is BACKEND_UNAVAILABLE naming
  /// `what`, every path tried, the variable, and the loader's reason.
  struct Search {
    const char *what;                    ///< "CUDA driver", for messages
    const char *envVar;                  ///< "TESSERA_CUDA_LIBRARY"
    std::vector<std::string> candidates; ///< "libcuda.so.1", ...
  };
  static tessera_status open(const Search &search, std::unique_ptr<SharedLibrary> &out);
  ~SharedLibrary();

  /// Resolves `symbol` into the function pointer `fn`; BACKEND_UNAVAILABLE if it is missing.
  template <typename Fn> tessera_status resolve(const char *symbol, Fn &fn) const {
    void *address = nullptr;
    tessera_status status = resolveAddress(symbol, &address);
    fn = reinterpret_cast<Fn>(address);
    return status;
  }
  /// Resolves an optional `symbol` (a function newer drivers have): null when missing.
  template <typename Fn> void resolveOptional(const char *symbol, Fn &fn) const {
    fn = reinterpret_cast<Fn>(findAddress(symbol));
  }
  const std::string &path() const { return path_; }

private:
  SharedLibrary(void *handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  tessera_status resolveAddress(const char *symbol, void **address) const;
  void *findAddress(const char *symbol) const;
  void *handle_;
  std::string path_;
};

// A driver's functions are listed once as an X-macro, LIST(X) calling X(name, function type) for each;
// these expand it into members of a table and into resolving them. TESSERA_RESOLVE_FUNCTION is
// used in a function returning tessera_status with `library` and `table` in scope.
#define TESSERA_DECLARE_FUNCTION(name, type) std::add_pointer_t<type> name = nullptr;
#define TESSERA_RESOLVE_FUNCTION(name, type)                                                           \
  if (tessera_status s = library.resolve(#name, table.name))                                           \
    return s;

/// The directory holding libtessera_runtime.so (plugins are installed next to it).
std::string runtimeLibraryDir();

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_LIBRARY_H

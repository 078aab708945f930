// Kernel arguments set by name, checked against the manifest, packed in the kernel's C ABI.
#ifndef TESSERA_RUNTIME_ARGS_H
#define TESSERA_RUNTIME_ARGS_H

#include "Bundle.h"

#include <cstdint>
#include <vector>

struct tessera_args {
  explicit tessera_args(const tessera_kernel &kernel);
  const tessera_kernel &kernel;
  std::vector<uint64_t> buffer; ///< the packed arguments; uint64_t keeps 8-byte alignment
  std::vector<void *> pointers; ///< where each argument sits in `buffer` (CUDA kernelParams)
  std::vector<bool> isSet;
};

namespace tessera::runtime {

/// Stores `*value` (of `type`) as argument `name`, rejecting unknown names, type
/// mismatches, a second set, null pointers and negative sizes with TESSERA_ERROR_ARGUMENT.
tessera_status setArg(tessera_args &args, const char *name, ArgType type, const void *value);

/// The grid the manifest's expressions give for these (complete) arguments.
tessera_status evaluateGrid(const tessera_args &args, uint32_t grid[3]);

/// Checks the arguments, evaluates the grid and launches; an empty grid launches nothing.
tessera_status launch(const tessera_args &args, void *stream);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_ARGS_H

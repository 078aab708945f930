// Kernel arguments set by name (or all at once), checked against the manifest, packed in the kernel's C ABI.
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

/// Sets every argument in manifest order from `values` (one 64-bit word per argument, 4-byte
/// ones in the low 32 bits, those the runtime fills skipped) with setArg's checks, stopping at the first
/// rejected one; `count` must be the kernel's argument count.
tessera_status setAllArgs(tessera_args &args, const uint64_t *values, size_t count);

/// The grid the manifest's expressions give for these (complete) arguments.
tessera_status evaluateGrid(const tessera_args &args, uint32_t grid[3]);

/// Checks the arguments, evaluates the grid and launches; an empty grid launches nothing.
tessera_status launch(const tessera_args &args, void *stream);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_ARGS_H

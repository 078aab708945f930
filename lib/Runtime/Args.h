// Kernel and kernel-set arguments set by name (or all at once), checked against the manifest, packed in the kernel's C ABI.
#ifndef TESSERA_RUNTIME_ARGS_H
#define TESSERA_RUNTIME_ARGS_H

#include "Bundle.h"

#include <cstdint>
#include <string>
#include <vector>

/// The arguments of one kernel, or of one kernel set (the union of its kernels' by name).
struct tessera_args {
  explicit tessera_args(const tessera_kernel &kernel);
  explicit tessera_args(const tessera_kernel_set &set);
  const tessera_kernel *kernel = nullptr;  ///< exactly one of kernel and set
  const tessera_kernel_set *set = nullptr;
  const tessera::runtime::ArgList &list;   ///< the kernel's or the set's arguments
  std::vector<uint64_t> buffer; ///< the packed arguments; uint64_t keeps 8-byte alignment
  std::vector<void *> pointers; ///< where each argument sits in `buffer` (CUDA kernelParams)
  std::vector<bool> isSet;
  /// "kernel gemm" or "kernel set colsum", for messages.
  std::string owner() const;
};

namespace tessera::runtime {

/// Stores `*value` (of `type`) as argument `name`, rejecting unknown names, type
/// mismatches, a second set, null pointers and negative sizes with TESSERA_ERROR_ARGUMENT.
tessera_status setArg(tessera_args &args, const char *name, ArgType type, const void *value);

/// Sets every argument in manifest order from `values` (one 64-bit word per argument, 4-byte
/// ones in the low 32 bits, those the runtime fills skipped) with setArg's checks, stopping at the first
/// rejected one; `count` must be the argument count.
tessera_status setAllArgs(tessera_args &args, const uint64_t *values, size_t count);

/// The grid the manifest's expressions give for these (complete) kernel arguments.
tessera_status evaluateGrid(const tessera_args &args, uint32_t grid[3]);

/// Checks the kernel arguments, evaluates the grid and launches; an empty grid launches nothing.
/// A kernel with workspaces is launched only with its set (launchSet).
tessera_status launch(const tessera_args &args, void *stream);

/// Launches the kernels of a set in order on `stream`, every one with the arguments it declares:
/// all arguments, grids, preconditions and workspace sizes are checked first, then the stream's
/// workspaces are acquired (WorkspacePool), those asked for zeroed on the stream, and the kernels
/// launched (a kernel with an empty grid is skipped).
tessera_status launchSet(const tessera_args &args, void *stream);

/// Makes every stream's workspaces, and the spare a new stream takes, at least as large as a
/// launch with these arguments needs; launches nothing.
tessera_status reserveSet(const tessera_args &args, void *stream);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_ARGS_H

// The bundle manifest (docs/bundle.md) as the runtime reads it: validated once, then plain data.
#ifndef TESSERA_RUNTIME_MANIFEST_H
#define TESSERA_RUNTIME_MANIFEST_H

#include "tessera/Runtime/tessera_runtime.h"
#include "tessera/Support/ArgRole.h"
#include "tessera/Support/GridExpr.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::runtime {

/// TensorMap: a 128-byte TMA descriptor passed by value, encoded by the runtime at launch.
enum class ArgType { Ptr, I32, I64, F32, TensorMap };
const char *argTypeName(ArgType type);
/// Bytes of an argument: pointers and i64 8, i32 and f32 4, tensor maps 128.
size_t argSize(ArgType type);
/// C alignment of an argument: its size, 64 for tensor maps.
size_t argAlignment(ArgType type);

struct ArgInfo {
  std::string name;
  ArgType type;
  std::optional<std::string> dtype; ///< element type of a ptr argument
  ArgRole role = ArgRole::Param;
  size_t offset = 0;                ///< where the C ABI puts it in the packed argument buffer
  /// Filled by the runtime at launch, never by callers (isRuntimeFilled(role)): tensor maps,
  /// tile counters and workspaces. Set once when parsed: every launch asks.
  bool runtimeFilled = false;
};

/// A grid dimension (or any other expression over the arguments): the shared evaluator's
/// expression, its Arg indices into KernelInfo::args.
using GridExpr = grid::Expr;

/// How a tensor_map argument is encoded at launch (manifest "tensor_maps", docs/bundle.md).
struct TensorMapInfo {
  int arg = -1;                      ///< the tensor_map argument
  int tensor = -1;                   ///< the ptr argument it describes
  std::vector<GridExpr> dims;        ///< elements, innermost first
  std::vector<GridExpr> strides;     ///< elements, for dims 1.. (dim 0 is contiguous)
  std::vector<uint32_t> box;         ///< elements per TMA copy, innermost first
};

/// A launch precondition (manifest "divisible"): the integer argument `arg` must be a multiple
/// of `by` (0 only of 0), e.g. a kernel packing query heads of one KV head needs Hq to be a
/// multiple of Hkv x pack.
struct DivisibleInfo {
  int arg = -1;
  GridExpr by;
  std::string byText;                ///< the expression as written, for the error message
};

/// A workspace argument (role workspace): device memory the runtime allocates per stream, of
/// `bytes` (an expression over the arguments), zeroed before the set's first kernel if `zero`.
struct WorkspaceInfo {
  int arg = -1;
  GridExpr bytes;
  std::string bytesText;             ///< as written, for messages and to compare kernels of a set
  bool zero = false;
};

/// What tessera_args are set against: the arguments of a kernel, or of a kernel set (the union
/// of its kernels' arguments by name), each at its C offset in one packed buffer.
struct ArgList {
  std::string name;
  std::vector<ArgInfo> args;
  size_t argBufferSize = 0;          ///< packed size, rounded up to the largest alignment

  /// Index of the argument called `name`, or -1.
  int argIndex(const std::string &name) const;
};

struct KernelInfo : ArgList {
  std::string entry;
  std::string codeObject;            ///< file name relative to the bundle directory
  uint32_t block[3];
  GridExpr grid[3];
  uint32_t ldsBytes = 0;
  uint32_t dynamicLdsBytes = 0;
  std::vector<TensorMapInfo> tensorMaps;
  int tileCounterArg = -1;           ///< the tile_counter argument, or -1
  std::vector<DivisibleInfo> divisible;
  std::vector<WorkspaceInfo> workspaces;
  int kernelSet = -1;                ///< index into Manifest::kernelSets, or -1
  std::string json;                  ///< the manifest entry, for tessera_kernel_json
};

/// Kernels launched together in order, with one argument set: each kernel takes the arguments
/// it declares, by name (manifest "kernel_sets", docs/bundle.md).
struct KernelSetInfo : ArgList {
  std::vector<int> kernels;            ///< indices into Manifest::kernels, in launch order
  std::vector<std::vector<int>> argOf; ///< per kernel of the set: its argument i is set argument argOf[k][i]
  /// One per distinct workspace (by name); every kernel declaring it declares the same size and
  /// zeroing, and the first one's expression, over its own arguments, is evaluated.
  struct Workspace {
    int arg = -1;                      ///< the set argument
    int kernel = 0;                    ///< position in `kernels` of the first kernel declaring it
    int workspace = 0;                 ///< index into that kernel's KernelInfo::workspaces
  };
  std::vector<Workspace> workspaces;
  std::string json;                    ///< the manifest entry plus the set's "args", for tessera_bundle_kernel_set_json
};

struct Manifest {
  std::string target;
  std::string vendor;
  std::string codeObjectFormat;
  std::vector<KernelInfo> kernels;
  std::vector<KernelSetInfo> kernelSets;
};

/// Reads and validates `dir`/manifest.json. Failures are TESSERA_ERROR_MANIFEST with the file,
/// the JSON path of the offending value and what is wrong with it.
tessera_status readManifest(const std::string &dir, Manifest &out);

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_MANIFEST_H

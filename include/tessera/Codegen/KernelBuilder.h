// Builders shared by every generator: kernel skeleton, index math, LDS tiles, tile copies,
// fragment loads, matrix-core ops and accumulator stores.
#ifndef TESSERA_CODEGEN_KERNELBUILDER_H
#define TESSERA_CODEGEN_KERNELBUILDER_H

#include "tessera/Codegen/MMAAtom.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Support/ArgRole.h"
#include "tessera/Support/GridExpr.h"
#include "tessera/Target/TargetInfo.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <string>

namespace mlir::vector {
enum class CombiningKind : uint32_t;
} // namespace mlir::vector

namespace tessera {

// ArgRole (tessera/Support/ArgRole.h): the role of a kernel argument, recorded on the kernel as
// #tessera.arg_roles and in the manifest by name. A TensorMap argument is encoded from a
// TensorMapRecipe, a Workspace one sized by a WorkspaceSpec.

/// One kernel parameter: pointers are `memref<?xT>` (bare pointers after lowering), scalars
/// are `index` (i64), `i32` or `f32`.
struct KernelArg {
  std::string name;
  mlir::Type type;
  ArgRole role;
};

/// The grid of a kernel as an expression over its runtime arguments (docs/bundle.md), with the
/// operator names of tessera/Support/GridExpr.h.
struct GridExpr {
  std::string json; ///< e.g. ["ceil_div", "N", 128]
  static GridExpr constant(int64_t v);
  static GridExpr arg(const std::string &name);
  static GridExpr ceilDiv(const GridExpr &a, const GridExpr &b);
  static GridExpr mul(const GridExpr &a, const GridExpr &b);
  static GridExpr min(const GridExpr &a, const GridExpr &b);
  static GridExpr max(const GridExpr &a, const GridExpr &b);
  static GridExpr add(const GridExpr &a, const GridExpr &b);
  static GridExpr floorDiv(const GridExpr &a, const GridExpr &b);
  /// The device's multiprocessor count (persistent kernels launch at most one workgroup each).
  static GridExpr smCount();
  /// `[op, a, b]`.
  static GridExpr apply(grid::Op op, const GridExpr &a, const GridExpr &b);
};

/// How the runtime builds a TMA tensor map argument at launch (docs/bundle.md, "tensor_maps"):
/// the tensor pointer argument, its dimensions and strides (innermost first, grid-expression
/// syntax over the arguments), the box copied per TMA instruction and the swizzle.
struct TensorMapRecipe {
  std::string json;
  static TensorMapRecipe tiled(const std::string &mapArg, const std::string &tensorArg,
                               const std::vector<GridExpr> &dims,
                               const std::vector<GridExpr> &strides,
                               const std::vector<int> &box);
};

/// A kernel argument as its generator declared it (KernelSignature::add): its position in the
/// argument list, which becomes the function's argument once the kernel exists (argValue).
struct ArgHandle {
  int index = -1;
  explicit operator bool() const { return index >= 0; }
};

/// A workspace argument (ArgRole::Workspace): device memory the runtime allocates for each
/// launch of the kernel's set, `bytes` long (an expression over the arguments), zeroed on the
/// stream before the set's first kernel when `zero` (manifest "bytes" and "zero").
struct WorkspaceSpec {
  std::string arg;
  GridExpr bytes;
  bool zero = false;
};

/// What a generator declares about the kernel it is about to build.
struct KernelSignature {
  std::string name;
  std::string directive;                ///< "wmma_gemm", ...
  mlir::DictionaryAttr directiveAttrs;  ///< the directive's attributes, for the manifest
  std::vector<KernelArg> args;
  GridExpr grid[3];
  int blockThreads = 0;
  std::vector<TensorMapRecipe> tensorMaps;
  /// Launch preconditions the runtime checks: argument `first` must be a multiple of `second`
  /// (manifest "divisible").
  std::vector<std::pair<std::string, GridExpr>> divisible;
  int dynamicSharedBytes = 0; ///< passed at every launch (manifest "dynamic_lds_bytes")

  /// Appends an argument; its handle reads it in the kernel body and in grid expressions.
  ArgHandle add(std::string name, mlir::Type type, ArgRole role) {
    args.push_back({std::move(name), type, role});
    return {int(args.size()) - 1};
  }
  /// The grid-expression term of a declared argument (its value at launch).
  GridExpr expr(ArgHandle h) const { return GridExpr::arg(args[h.index].name); }
  std::vector<WorkspaceSpec> workspaces; ///< one per workspace argument
};

/// The kernels one directive generates, in launch order (a backward pass's preprocess, main and
/// convert kernels; a split-KV decode and its combine). They are launched together with one
/// argument set: each takes the arguments it declares, by name, and workspace arguments of the
/// same name are one buffer for the whole launch. A single kernel is a set of one.
struct KernelSet {
  std::string name;
  llvm::SmallVector<mlir::gpu::GPUFuncOp> kernels;
};

/// Records `set` on its kernels as #tessera.kernel_set<name, position> (the bundle writer makes
/// the manifest's "kernel_sets" from it). A set of one kernel without workspaces is a plain
/// kernel and records nothing, so its manifest entry stays as it was.
void recordKernelSet(const KernelSet &set);

/// The attributes of a directive without its symbol name: what the manifest records.
mlir::DictionaryAttr directiveAttributes(mlir::Operation *directive);

/// Creates `gpu.module @name [target] { gpu.func @name(args) kernel }` before `anchor` and
/// records the signature on the function (tessera.* attributes read by the manifest writer
/// and the simulator). Returns the function, whose body holds only its `gpu.return`.
mlir::gpu::GPUFuncOp createKernel(mlir::OpBuilder &b, mlir::Location loc,
                                  const TargetInfo &target, const KernelSignature &sig);

/// The argument `h` of a kernel made by createKernel from the signature that declared it.
inline mlir::Value argValue(mlir::gpu::GPUFuncOp func, ArgHandle h) {
  return func.getArgument(h.index);
}

/// A 2-D tile in LDS stored row-major, flattened into one workgroup memref, with the
/// target's bank-conflict avoidance (row padding or XOR swizzle of 16-byte chunks).
struct LdsTile {
  mlir::Value memref;  ///< memref<NxT, #gpu.address_space<workgroup>>
  int rows = 0, cols = 0;
  int rowStride = 0;   ///< elements per row including padding
  LdsSwizzle swizzle = LdsSwizzle::Pad;
  int chunk = 8;       ///< elements per 16-byte chunk (XOR swizzle unit)
  /// Element offset of the tile in `memref` (null: 0), e.g. the current one of a tile's
  /// buffers (buffer()).
  mlir::Value origin;
  int64_t elements() const { return int64_t(rows) * rowStride; }
};

/// Index arithmetic, matrix-core ops and memory helpers over one OpBuilder. Every helper
/// folds constants so generated IR stays readable.
class KernelBuilder {
public:
  KernelBuilder(mlir::OpBuilder &b, mlir::Location loc, const TargetInfo &target)
      : b(b), loc(loc), target(target) {}

  mlir::OpBuilder &builder() { return b; }
  mlir::Location location() const { return loc; }
  const TargetInfo &targetInfo() const { return target; }

  // Constants and index arithmetic (index type unless noted).
  mlir::Value idx(int64_t v);
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value add(mlir::Value a, int64_t c);
  mlir::Value sub(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, int64_t c);
  mlir::Value divui(mlir::Value a, int64_t c);
  mlir::Value remui(mlir::Value a, int64_t c);
  mlir::Value divui(mlir::Value a, mlir::Value c);
  mlir::Value remui(mlir::Value a, mlir::Value c);
  mlir::Value shrui(mlir::Value a, int64_t c);
  mlir::Value andi(mlir::Value a, int64_t c);
  mlir::Value xori(mlir::Value a, mlir::Value c);
  mlir::Value minsi(mlir::Value a, mlir::Value c);
  mlir::Value maxsi(mlir::Value a, mlir::Value c);
  mlir::Value ceilDiv(mlir::Value a, int64_t c); ///< unsigned
  /// Signed floor and ceiling divisions (sequence positions left of 0 round down / up).
  mlir::Value floorDivsi(mlir::Value a, int64_t c);
  mlir::Value ceilDivsi(mlir::Value a, int64_t c);
  mlir::Value ceilDivsi(mlir::Value a, mlir::Value c);
  mlir::Value cmpLt(mlir::Value a, mlir::Value c);
  mlir::Value cmpLe(mlir::Value a, mlir::Value c);
  mlir::Value cmpEq(mlir::Value a, mlir::Value c);
  mlir::Value andb(mlir::Value a, mlir::Value c);
  mlir::Value zero(mlir::Type t);
  /// Element `i` of an integer memref (e.g. cu_seqlens) as an index.
  mlir::Value loadIndex(mlir::Value memref, mlir::Value i);

  // f32 arithmetic (scalars or vectors); fmax is maxnum with no-NaN semantics.
  mlir::Value f32(double v);
  mlir::Value fadd(mlir::Value a, mlir::Value c);
  mlir::Value fsub(mlir::Value a, mlir::Value c);
  mlir::Value fmul(mlir::Value a, mlir::Value c);
  mlir::Value fmax(mlir::Value a, mlir::Value c);
  mlir::Value select(mlir::Value cond, mlir::Value a, mlir::Value c);

  /// Opens `if (cond)` and moves the insertion point into it; the caller's InsertionGuard
  /// restores it.
  void enterIf(mlir::Value cond);

  // Thread geometry.
  mlir::Value threadId();
  mlir::Value laneId();   ///< threadId % waveSize
  mlir::Value waveId();   ///< threadId / waveSize (uniform within a wave)
  mlir::Value blockId(mlir::gpu::Dimension d);

  /// The (row, col) a lane contributes to an operand layout (the lane-dependent part;
  /// add the constant `layout.at(0, elem)` for element `elem`).
  std::pair<mlir::Value, mlir::Value> laneCoord(const OperandLayout &layout, mlir::Value lane);

  /// Combines each of `values` (f32) with its copies on the lanes whose ids differ by the XOR
  /// `masks` (one shuffle per mask and value, masks in order): afterwards every lane of a group
  /// holds the group's result. The masks come from a layout, e.g. the lanes that share a row
  /// (OperandLayout::rowReductionLaneMasks). `kind` is ADD or MAXNUMF (no-NaN max).
  /// Where the target has one instruction for it (TargetInfo::hasHalfWaveSwap), the mask of
  /// half the wave takes a half-wave swap instead of a shuffle.
  llvm::SmallVector<mlir::Value> laneAllReduce(llvm::ArrayRef<mlir::Value> values,
                                               llvm::ArrayRef<int> masks,
                                               mlir::vector::CombiningKind kind);
  /// tessera.swap_wave_halves: {lo, hi} with lo = a's and b's lower half-waves, hi = their
  /// upper ones (lane l < h: lo = a[l], hi = a[l + h]; l >= h: lo = b[l - h], hi = b[l]).
  std::pair<mlir::Value, mlir::Value> swapWaveHalves(mlir::Value a, mlir::Value b);

  /// Allocates an LDS tile as a workgroup attribution of `func`.
  LdsTile allocLds(mlir::gpu::GPUFuncOp func, mlir::Type elemType, int rows, int cols);
  /// The same tile as a view of `arena` (memref<N x i8> in LDS, e.g. dynamic shared memory) at
  /// `byteOffset`.
  LdsTile ldsTileIn(mlir::Value arena, int64_t byteOffset, mlir::Type elemType, int rows,
                    int cols);
  /// The flat element offset of (row, col) in `tile`.
  mlir::Value ldsOffset(const LdsTile &tile, mlir::Value row, mlir::Value col);
  /// Buffer `which` (an index below `buffers`) of `tiles`, an allocation of `buffers` tiles of
  /// tiles.rows / buffers rows one after the other.
  LdsTile buffer(const LdsTile &tiles, int buffers, mlir::Value which);
  /// Column part `which` of `parts` of a tile (its columns cut evenly): a row-padded tile only,
  /// whose element offsets are linear in the column.
  LdsTile columns(const LdsTile &tile, int parts, mlir::Value which);

  /// A view of a row-major global matrix: element (r, c) at `base + r * ld + c`. Rows and
  /// columns at or past `validRows` / `validCols` read as zero and are never written.
  struct GlobalTile {
    mlir::Value memref, base, ld, validRows, validCols;
    mlir::Value vectorOk; ///< i1: ld and base keep 16-byte alignment
    /// The caller knows every row of the tile is valid and vectorOk holds: plain vector loads,
    /// no bounds or alignment branches (validRows and vectorOk are not read; a constant validCols
    /// below the tile's columns, a multiple of the vectors, zeroes the vectors past it).
    bool inBounds = false;
  };
  /// Cooperatively copies a `rows` x `cols` tile from global memory into LDS with 16-byte
  /// global loads by all `threads` threads. With `transpose`, global (r, c) lands at LDS
  /// (c, r): the global tile is stored with its contiguous dimension along the LDS rows.
  void copyGlobalToLds(const GlobalTile &src, const LdsTile &dst, int rows, int cols,
                       bool transpose, int threads);
  /// The two halves of copyGlobalToLds, for software pipelining: this thread's 16-byte vectors
  /// of the tile, loaded into registers now and stored to LDS later.
  llvm::SmallVector<mlir::Value> loadGlobalTile(const GlobalTile &src, int rows, int cols,
                                                int threads);
  void storeLdsTile(llvm::ArrayRef<mlir::Value> vectors, const LdsTile &dst, int rows, int cols,
                    bool transpose, int threads);
  /// This thread's vectors of `vectorBytes` of an LDS tile, as loadGlobalTile deals its 16-byte
  /// ones (thread t the vectors t, t + threads, ...).
  llvm::SmallVector<mlir::Value> loadLdsTile(const LdsTile &src, int rows, int cols, int threads,
                                             int vectorBytes = 16);
  /// Where each of this thread's vectors of `vectorBytes` of a rows x cols tile of `elemType`
  /// starts, in the order loadGlobalTile and loadLdsTile deal them: (row, col), or (0, cols) for
  /// a vector this thread does not have.
  llvm::SmallVector<std::pair<mlir::Value, mlir::Value>>
  tileVectorStarts(int rows, int cols, mlir::Type elemType, int threads, int vectorBytes = 16);
  /// loadGlobalTile over rows that are not evenly spaced (a gather: paged caches, packed query
  /// heads): row r starts at element rowStart(r) of `memref`, which is emitted only inside the
  /// branches that load row r (r < validRows), so it may read an index table no further than the
  /// valid rows.
  llvm::SmallVector<mlir::Value> loadGlobalRows(mlir::Value memref,
                                                llvm::function_ref<mlir::Value(mlir::Value)> rowStart,
                                                mlir::Value validRows, mlir::Value validCols,
                                                mlir::Value vectorOk, int rows, int cols,
                                                int threads);
  /// copyGlobalToLds (not transposed) through the target's asynchronous copies (hasAsyncCopy):
  /// no registers hold the data, rows and columns past the valid ones are zero-filled, and the
  /// tile is in LDS once this thread's asyncWait covers the group that asyncCommit closes. The
  /// tile's vectors must be aligned (src.vectorOk): callers branch on it once, around the loop
  /// that streams the tiles, since a synchronous fallback inside that loop costs its registers.
  void copyGlobalToLdsAsync(const GlobalTile &src, const LdsTile &dst, int rows, int cols,
                            int threads);
  /// loadGlobalRows' gather as copyGlobalToLdsAsync does it: whole 16-byte rows (cols a multiple
  /// of 8 16-bit elements, every row start 16-byte aligned: the caller's guarantee), rows past
  /// validRows zero-filled without evaluating rowStart for them.
  void copyGlobalRowsToLdsAsync(mlir::Value memref,
                                llvm::function_ref<mlir::Value(mlir::Value)> rowStart,
                                mlir::Value validRows, const LdsTile &dst, int rows, int cols,
                                int threads);
  /// dst[dstIndex...] = the first `srcElements` (of `elements`) elements at src[srcIndex],
  /// the rest zero, asynchronously (no source read when srcElements is 0).
  void asyncCopy(mlir::Value dst, mlir::Value dstIndex, mlir::Value src, mlir::Value srcIndex,
                 int elements, mlir::Value srcElements);
  /// Closes the group of this thread's asynchronous copies issued since the last commit.
  void asyncCommit();
  /// Waits until at most `pending` of this thread's committed groups are still in flight.
  void asyncWait(int pending);

  /// Loads one operand fragment of `atom` from an LDS tile whose columns are the reduction
  /// (K) dimension: for A the tile is [M][K], for B it is [N][K] (B transposed).
  mlir::Value loadFragment(const LdsTile &tile, const OperandLayout &layout, bool isB,
                           mlir::Value lane, mlir::Value outerBase, int kBase);
  enum class Operand { A, B };
  /// The 1-D vectors `pieces` concatenated in order.
  mlir::Value concat(llvm::ArrayRef<mlir::Value> pieces);
  /// Loads operand `which` of `atom` at (outerBase, kBase) of an LDS tile. The tile's columns
  /// are K ([M][K] for A, [N][K] for B) unless `kAlongRows` ([K][M] / [K][N]). mma.sync
  /// operands come through ldmatrix (.trans for kAlongRows); the others through loadFragment,
  /// or for kAlongRows through transposing LDS reads (TargetInfo::transposingLoads), else
  /// element by element.
  mlir::Value loadOperand(const LdsTile &tile, const MMAAtom &atom, Operand which,
                          mlir::Value lane, mlir::Value outerBase, int kBase,
                          bool kAlongRows = false);
  /// The fragments of operand `which` at each of `outerBases` (same kBase), where consecutive
  /// bases are adjacent tiles (atom.n apart for B): on mma.sync two B fragments come from one
  /// ldmatrix.x4.
  llvm::SmallVector<mlir::Value> loadOperands(const LdsTile &tile, const MMAAtom &atom,
                                              Operand which, mlir::Value lane,
                                              llvm::ArrayRef<mlir::Value> outerBases, int kBase,
                                              bool kAlongRows = false);
  /// D = A * B + C on the matrix cores (one atom).
  mlir::Value mma(const MMAAtom &atom, mlir::Value a, mlir::Value bFrag, mlir::Value c);
  /// The accumulator type of `atom`: vector<elems x f32>.
  mlir::VectorType accType(const MMAAtom &atom);

  /// Stores an accumulator fragment to `dst` at (rowBase, colBase) + C-layout position,
  /// converted to the memref's element type, skipping elements outside validRows/validCols.
  void storeAccumulator(const MMAAtom &atom, mlir::Value acc, const GlobalTile &dst,
                        mlir::Value lane, mlir::Value rowBase, mlir::Value colBase);

  /// Vector `x` to memref[at]: one store (aligned to the vector's size) where `vectorOk`, else
  /// element by element.
  void storeVector(mlir::Value x, mlir::Value memref, mlir::Value at, mlir::Value vectorOk);
  /// storeVector's twin: a vector of `type` from memref[at].
  mlir::Value loadVector(mlir::VectorType type, mlir::Value memref, mlir::Value at,
                         mlir::Value vectorOk);
  /// i1: every one of `values` (index) is a multiple of `n`.
  mlir::Value allMultiplesOf(mlir::ValueRange values, int64_t n);

  mlir::Value convert(mlir::Value v, mlir::Type to);
  /// convert for values that are finite when the kernel's inputs are (probabilities, score
  /// gradients): f32 to bf16 rounded to nearest even in integer code where the target has no
  /// rounding instruction (TargetInfo::hasBf16Convert), without the NaN guard of the generic
  /// lowering; a NaN may come out as an infinity there.
  mlir::Value convertFinite(mlir::Value v, mlir::Type to);
  /// memref[index] += value (f32) atomically: global red/atomic add on every target.
  void atomicAdd(mlir::Value value, mlir::Value memref, mlir::Value index);
  /// memref[index + i] += values[i] (f32) atomically for 2 or 4 contiguous values whose first
  /// is aligned to their size (tessera.atomic_addf: one vector reduction where the target has
  /// one).
  void atomicAddContiguous(llvm::ArrayRef<mlir::Value> values, mlir::Value memref,
                           mlir::Value index);
  void barrier();
  /// Keeps LDS and global memory operations from being scheduled across this point (AMD
  /// `sched_barrier`, NVIDIA `bar.warp.sync`) while arithmetic and matrix instructions may
  /// cross it: bounds the fragments in flight (registers), pins memory operations in between.
  void memoryScheduleFence();

private:
  /// One 16-byte vector of a tile row (`tileCols` wide) from `memref` at offset(col): whole where
  /// the row is loaded (`rowOk`), its columns are valid and `vectorOk`, else element by element,
  /// zero outside. `offsetInBranches`: offset() is emitted in each branch that loads, not once
  /// before them.
  mlir::Value loadTileVector(mlir::Value memref, mlir::Value rowOk, mlir::Value col,
                             mlir::Value validCols, mlir::Value vectorOk, int tileCols,
                             llvm::function_ref<mlir::Value(mlir::Value)> offset,
                             bool offsetInBranches);
  mlir::Value mmaSync(const MMAAtom &atom, mlir::Value a, mlir::Value bFrag, mlir::Value c);
  mlir::Value ldmatrixOperand(const LdsTile &tile, const MMAAtom &atom, Operand which,
                              mlir::Value lane, mlir::Value outerBase, int kBase,
                              bool kAlongRows, bool pair);

  mlir::OpBuilder &b;
  mlir::Location loc;
  const TargetInfo &target;
};

/// Maps an MLIR element type to the atom table's element type.
std::optional<ElemType> toElemType(mlir::Type t);
/// The MLIR type of an atom element type.
mlir::Type toMlirType(mlir::MLIRContext *ctx, ElemType t);

} // namespace tessera

#endif // TESSERA_CODEGEN_KERNELBUILDER_H

// Hopper (sm_90a) builders: wgmma shared-memory descriptors, SS and RS wgmma with their
// fences, the TMA + mbarrier pipeline and warp specialisation. The encodings were validated
// on the H200 (../shared/toolchain/examples/hopper-fa/README.md) and are pinned by unit tests.
#ifndef TESSERA_CODEGEN_HOPPER_H
#define TESSERA_CODEGEN_HOPPER_H

#include "tessera/Codegen/KernelBuilder.h"

#include <cstdint>

namespace tessera::hopper {

//===----------------------------------------------------------------------===//
// Shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format"): plain data.
//===----------------------------------------------------------------------===//

/// Bytes of one 128-byte-swizzled row: 64 16-bit elements. Tiles are stored as panels of
/// 64 columns, each panel `rows` x 128 bytes, 8-row swizzle atoms of 1024 bytes.
constexpr int kSwizzleBytes = 128;
constexpr int kSwizzleAtomBytes = 8 * kSwizzleBytes;
constexpr int kPanelElems = 64;

/// The 64-bit descriptor: bits [0,14) start address >> 4, [16,30) leading byte offset >> 4,
/// [32,46) stride byte offset >> 4, [62,64) layout (1 = 128-byte swizzle). The address field
/// holds 18 address bits, so shared addresses stay below 256 KiB.
constexpr uint64_t descriptor(uint32_t addressBytes, uint32_t leadingBytes, uint32_t strideBytes) {
  return ((uint64_t(addressBytes) & 0x3FFFF) >> 4) | (uint64_t(leadingBytes >> 4) << 16) |
         (uint64_t(strideBytes >> 4) << 32) | (uint64_t(1) << 62);
}

/// How one operand tile, stored as 128-byte-swizzled panels, is described to wgmma, and how the
/// descriptor advances per 16-deep k step.
struct OperandGeometry {
  uint32_t leadingBytes;  ///< LBO
  uint32_t strideBytes;   ///< SBO: the next 8-row (or 8-column) group
  uint32_t kStepBytes;    ///< added per k16 step inside a panel
  uint32_t panelBytes;    ///< the next 64-wide panel of the k dimension (K-major only)
};

/// K-major operand (rows = M or N, k contiguous): A = Q and B = K in S = Q K^T. One k16 step
/// is 32 bytes inside the 128-byte row; every 4 steps move to the next panel.
constexpr OperandGeometry kMajor(int rows) {
  return {16, kSwizzleAtomBytes, 32, uint32_t(rows) * kSwizzleBytes};
}
/// MN-major operand (k rows, N contiguous), such as V in O = P V with V stored [key][d]:
/// LBO = the panel stride (64 columns of N further), SBO = 8 k rows... of one atom, k16 = 16
/// rows = 2048 bytes. With a single panel (N = 64) LBO is unused.
constexpr OperandGeometry mnMajor(int kRows, int nCols) {
  return {nCols > kPanelElems ? uint32_t(kRows) * kSwizzleBytes : 16u, kSwizzleAtomBytes,
          16 * kSwizzleBytes, 0};
}

/// The descriptor for k step `k` of a K-major operand whose panel 0 starts at `tileBytes`.
constexpr uint64_t kMajorDescriptor(uint32_t tileBytes, int rows, int k) {
  OperandGeometry g = kMajor(rows);
  return descriptor(tileBytes + (k / 4) * g.panelBytes + (k % 4) * g.kStepBytes, g.leadingBytes,
                    g.strideBytes);
}
/// The descriptor for k step `k` of an MN-major operand of `kRows` x `nCols` at `tileBytes`.
constexpr uint64_t mnMajorDescriptor(uint32_t tileBytes, int kRows, int nCols, int k) {
  OperandGeometry g = mnMajor(kRows, nCols);
  return descriptor(tileBytes + k * g.kStepBytes, g.leadingBytes, g.strideBytes);
}

//===----------------------------------------------------------------------===//
// IR builders
//===----------------------------------------------------------------------===//

/// Emits Hopper instructions through one KernelBuilder.
class HopperBuilder {
public:
  explicit HopperBuilder(KernelBuilder &kb) : kb(kb), b(kb.builder()), loc(kb.location()) {}

  // ---- wgmma -------------------------------------------------------------------------------
  /// D (m64 x n, f32, n/2 values per thread) = A * B^T (+ D when `accumulate`), A and B both
  /// K-major in shared memory (`descA`, `descB`: i64 descriptors).
  llvm::SmallVector<mlir::Value> wgmmaSS(llvm::ArrayRef<mlir::Value> acc, mlir::Value descA,
                                         mlir::Value descB, int n, ElemType in, bool accumulate);
  /// D += A * B with A from registers (4 x i32 of packed 16-bit pairs per thread, the layout
  /// of the f32 accumulator with column pairs packed) and B MN-major in shared memory. The
  /// dialect has no RS form, so this is inline PTX.
  llvm::SmallVector<mlir::Value> wgmmaRS(llvm::ArrayRef<mlir::Value> acc,
                                         llvm::ArrayRef<mlir::Value> aRegs, mlir::Value descB,
                                         int n, ElemType in);
  void fence();            ///< wgmma.fence: register operands written before are visible
  void commitGroup();
  void waitGroup(int pending);
  /// An empty asm tying every value (CUTLASS warpgroup_fence_operand): LLVM cannot move their
  /// definitions or uses across it, so in-flight wgmma registers are not reused early.
  llvm::SmallVector<mlir::Value> registerFence(llvm::ArrayRef<mlir::Value> values);

  // ---- warp specialisation -----------------------------------------------------------------
  /// threadId / 128 taken through shfl.idx from lane 0, so ptxas sees a warp-uniform value
  /// (role branches on plain tid / 128 make it serialise wgmma).
  mlir::Value uniformWarpgroupId();
  void setMaxRegisters(int count, bool increase);
  /// i1: true on one elected lane of the warp.
  mlir::Value electOne();
  void namedBarrierSync(mlir::Value id, int threads);
  void namedBarrierArrive(mlir::Value id, int threads);
  mlir::Value i32(int64_t v);

  // ---- shared memory, TMA and mbarriers ----------------------------------------------------
  /// The dynamic shared memory of the kernel as memref<bytes x i8>, 1024-byte aligned (an
  /// external `.extern .shared .align 1024` symbol: gpu.dynamic_shared_memory would be
  /// addressed off a static symbol and may overlap the mbarriers).
  mlir::Value dynamicSharedMemory(mlir::gpu::GPUFuncOp func, int bytes);
  /// The shared address >> 4 of `smem` as i64: the descriptor address field.
  mlir::Value descriptorBase(mlir::Value smem);
  /// A view of `smem` at `byteOffset` with the given shape (outermost first).
  mlir::Value view(mlir::Value smem, mlir::Value byteOffset, llvm::ArrayRef<int64_t> shape,
                   mlir::Type elem);
  /// The type of a TMA tensor map whose box is `box` (outermost first), 128-byte swizzled,
  /// out-of-bounds elements read as zero.
  mlir::Type tensorMapType(llvm::ArrayRef<int64_t> box, mlir::Type elem);

  /// A ring of full/empty mbarrier pairs plus single barriers, all in one group.
  mlir::Value createBarriers(int count);
  void initBarrier(mlir::Value group, mlir::Value index, int arrivals);
  void fenceBarrierInit();
  void arriveExpectTx(mlir::Value group, mlir::Value index, int bytes);
  void arrive(mlir::Value group, mlir::Value index);
  void waitParity(mlir::Value group, mlir::Value index, mlir::Value parity);
  /// TMA load of one box at `coords` (innermost first) into `dst`, completing on the barrier.
  void tmaLoad(mlir::Value map, mlir::ValueRange coords, mlir::Value dst, mlir::Value group,
               mlir::Value index);
  /// TMA store of `src` to the box at `coords`; rows outside the tensor are not written.
  void tmaStore(mlir::Value src, mlir::Value map, mlir::ValueRange coords);
  void commitAndWaitBulkStores();
  /// Generic-proxy shared writes become visible to the async proxy (TMA).
  void fenceProxyAsyncShared();

private:
  mlir::Type accStruct(int values);
  mlir::Value packStruct(llvm::ArrayRef<mlir::Value> values);
  llvm::SmallVector<mlir::Value> unpackStruct(mlir::Value s, int values);

  KernelBuilder &kb;
  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_H

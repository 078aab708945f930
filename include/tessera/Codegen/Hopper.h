// Hopper (sm_90a) IR builders: SS and RS wgmma with their fences, the TMA + mbarrier pipeline
// and warp specialisation (descriptors: HopperDescriptors.h).
#ifndef TESSERA_CODEGEN_HOPPER_H
#define TESSERA_CODEGEN_HOPPER_H

#include "tessera/Codegen/HopperDescriptors.h"
#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::hopper {

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
  /// Closes the TMA stores issued so far into a bulk group.
  void commitBulkStores();
  /// Waits until every committed TMA store has read its shared memory (the buffer may be
  /// rewritten, or the workgroup exit).
  void waitBulkStoresRead();
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

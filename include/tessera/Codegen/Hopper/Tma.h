// The Hopper TMA pipeline: dynamic shared memory and views of it, mbarrier rings, TMA loads and
// stores and the proxy fences between them (the producer side of a warp-specialised kernel).
#ifndef TESSERA_CODEGEN_HOPPER_TMA_H
#define TESSERA_CODEGEN_HOPPER_TMA_H

#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::hopper {

/// Emits shared memory, mbarrier and TMA operations through one KernelBuilder.
class TmaBuilder {
public:
  explicit TmaBuilder(KernelBuilder &kb) : kb(kb), b(kb.builder()), loc(kb.location()) {}

  // ---- shared memory -----------------------------------------------------------------------
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

  // ---- mbarriers ---------------------------------------------------------------------------
  /// A ring of full/empty mbarrier pairs plus single barriers, all in one group.
  mlir::Value createBarriers(int count);
  void initBarrier(mlir::Value group, mlir::Value index, int arrivals);
  void fenceBarrierInit();
  void arriveExpectTx(mlir::Value group, mlir::Value index, mlir::Value bytes);
  void arrive(mlir::Value group, mlir::Value index);
  void waitParity(mlir::Value group, mlir::Value index, mlir::Value parity);

  // ---- TMA ---------------------------------------------------------------------------------
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
  KernelBuilder &kb;
  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_TMA_H

// Hopper warpgroup MMA: SS and RS wgmma and what orders them (fence, commit/wait groups, register
// fences). The operand descriptors they take are built from Hopper/Descriptors.h.
#ifndef TESSERA_CODEGEN_HOPPER_WGMMA_H
#define TESSERA_CODEGEN_HOPPER_WGMMA_H

#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::hopper {

/// Emits wgmma m64nNk16 (f16 / bf16 in, f32 accumulators) through one KernelBuilder.
class WgmmaBuilder {
public:
  explicit WgmmaBuilder(KernelBuilder &kb) : b(kb.builder()), loc(kb.location()) {}

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

private:
  mlir::Type accStruct(int values);
  mlir::Value packStruct(llvm::ArrayRef<mlir::Value> values);
  llvm::SmallVector<mlir::Value> unpackStruct(mlir::Value s, int values);

  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_WGMMA_H

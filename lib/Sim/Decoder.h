// The kernel-IR decoder's shared declarations (Decode.cpp: values, control flow, kernels; DecodeOps.cpp: operations).
#ifndef TESSERA_LIB_SIM_DECODER_H
#define TESSERA_LIB_SIM_DECODER_H

#include "Program.h"

#include "tessera/Target/TargetInfo.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace tessera::sim::detail {

/// The element kind and flattened element count of a value type.
struct ValueShape {
  ElemKind kind;
  uint32_t count = 1;
  llvm::SmallVector<int64_t> dims; ///< vector shape ({} for scalars and structs)
};

std::optional<ElemKind> elemKindOf(mlir::Type t);
/// Scalars, static 1-D/n-D vectors, and LLVM structs of one element kind (NVVM results).
std::optional<ValueShape> shapeOf(mlir::Type t);
/// "file:line:col" of a location.
std::string locString(mlir::Location loc);
std::string typeString(mlir::Type t);

/// What a block's terminator copies its operands into.
struct YieldTargets {
  std::vector<int32_t> dest;  ///< scf.yield / scf.condition values
  std::vector<int32_t> dest2; ///< scf.condition: the while's results as well
};

/// Turns one gpu.func into a Program, collecting every construct it cannot simulate.
class Decoder {
public:
  Decoder(Program &p, const TargetInfo &target) : P(p), target(target) {}

  void decodeFunction(mlir::gpu::GPUFuncOp func);
  /// Every unsupported construct found, one per line; empty on success.
  std::string problems() const { return llvm::join(problemList, "\n"); }

private:
  Program &P;
  const TargetInfo &target;
  llvm::DenseMap<mlir::Value, int32_t> slotOf;
  llvm::DenseMap<mlir::Value, int32_t> memrefOf;
  llvm::StringMap<int32_t> globalBinding;
  std::vector<std::string> problemList;
  llvm::DenseMap<mlir::Operation *, int32_t> siteOf;

  void problem(mlir::Operation *op, const llvm::Twine &what);
  void unsupported(mlir::Operation *op, const llvm::Twine &detail = "");
  int32_t site(mlir::Operation *op);
  int32_t newSlot(ElemKind kind, uint32_t count);
  /// A slot for `v`; reports (and gives a dummy scalar slot to) unsupported types.
  int32_t def(mlir::Value v, mlir::Operation *owner);
  int32_t use(mlir::Value v);
  const Slot &slot(mlir::Value v) { return P.slots[use(v)]; }
  Inst make(mlir::Operation *op, Op code);
  /// An element-wise op: operands in order, one result; kind and count from the result,
  /// srcKind from the first operand.
  Inst elementwise(mlir::Operation *op, Op code);
  /// A comparison: kind is the operands' element kind.
  Inst compare(mlir::Operation *op, Op code, int64_t predicate);
  Inst mathUnary(mlir::Operation *op, MathFn fn);
  /// A pure data movement: result element j of the concatenated results takes element
  /// `source[j]` of the concatenated operands.
  Inst gather(mlir::Operation *op, mlir::ValueRange operands, mlir::ValueRange results, llvm::ArrayRef<int64_t> source);
  Inst constant(mlir::Operation *op, mlir::Value result, std::vector<Cell> cells);

  void decodeOp(mlir::Operation *op, std::vector<Inst> &out, const YieldTargets &targets);
  int32_t decodeBlock(mlir::Block &block, const YieldTargets &targets);
  std::optional<Inst> decodeArith(mlir::Operation *op);
  std::optional<Inst> decodeMath(mlir::Operation *op);
  std::optional<Inst> decodeVector(mlir::Operation *op);
  std::optional<Inst> decodeMemory(mlir::Operation *op);
  std::optional<Inst> decodeGpu(mlir::Operation *op);
  std::optional<Inst> decodeMatrix(mlir::Operation *op);
  std::optional<Inst> decodeLLVM(mlir::Operation *op);
  Inst decodeIf(mlir::scf::IfOp op);
  Inst decodeFor(mlir::scf::ForOp op);
  Inst decodeWhile(mlir::scf::WhileOp op);
  Inst yield(mlir::Operation *op, mlir::ValueRange values, const YieldTargets &targets, bool condition);
  Inst memoryAccess(mlir::Operation *op, Op code, mlir::Value memref, mlir::ValueRange indices, mlir::Value value,
                    mlir::Type accessType);
  int32_t memrefFor(mlir::Value memref, mlir::Operation *user);
  int32_t bindMemref(mlir::Value v, int32_t binding, mlir::MemRefType type, mlir::Operation *op, int64_t offset = 0);
  Inst matrixOp(mlir::Operation *op, MatrixFamily family, int m, int n, int k, int subword, std::vector<ElemRef> a,
                std::vector<ElemRef> b, std::vector<ElemRef> c, mlir::Value d, ElemKind inKind);
  std::vector<ElemRef> operandElems(mlir::ValueRange values, std::optional<ElemKind> packed);
  std::vector<Cell> constantCells(mlir::Attribute value, ElemKind kind);
};

} // namespace tessera::sim::detail

#endif // TESSERA_LIB_SIM_DECODER_H

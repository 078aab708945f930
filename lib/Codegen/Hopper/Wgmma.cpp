// Hopper wgmma builders (Hopper/Wgmma.h): SS wgmma through the NVVM op, RS wgmma and register
// fences as inline PTX, accumulators passed as LLVM structs.
#include "tessera/Codegen/Hopper/Wgmma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <string>

using namespace mlir;

namespace tessera::hopper {

namespace {
NVVM::WGMMATypes wgmmaType(ElemType t) {
  return t == ElemType::BF16 ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
}
} // namespace

Type WgmmaBuilder::accStruct(int values) {
  return LLVM::LLVMStructType::getLiteral(b.getContext(),
                                          SmallVector<Type>(values, b.getF32Type()));
}

Value WgmmaBuilder::packStruct(ArrayRef<Value> values) {
  SmallVector<Type> types;
  for (Value v : values) types.push_back(v.getType());
  Type st = LLVM::LLVMStructType::getLiteral(b.getContext(), types);
  Value s = LLVM::UndefOp::create(b, loc, st);
  for (auto [i, v] : llvm::enumerate(values))
    s = LLVM::InsertValueOp::create(b, loc, s, v, ArrayRef<int64_t>{int64_t(i)});
  return s;
}

SmallVector<Value> WgmmaBuilder::unpackStruct(Value s, int values) {
  SmallVector<Value> out;
  for (int i = 0; i < values; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, s, ArrayRef<int64_t>{i}));
  return out;
}

SmallVector<Value> WgmmaBuilder::wgmmaSS(ArrayRef<Value> acc, Value descA, Value descB, int n,
                                         ElemType in, bool accumulate) {
  MLIRContext *ctx = b.getContext();
  Value d = packStruct(acc);
  auto op = NVVM::WgmmaMmaAsyncOp::create(
      b, loc, d.getType(), d, descA, descB, NVVM::MMAShapeAttr::get(ctx, 64, n, 16),
      NVVM::WGMMATypesAttr::get(ctx, wgmmaType(in)), NVVM::WGMMATypesAttr::get(ctx, wgmmaType(in)),
      NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32),
      NVVM::WGMMAScaleOutAttr::get(ctx, accumulate ? NVVM::WGMMAScaleOut::one
                                                   : NVVM::WGMMAScaleOut::zero),
      NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one),
      NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one),
      NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row),
      NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col), NVVM::MMAIntOverflowAttr());
  return unpackStruct(op.getResult(), int(acc.size()));
}

SmallVector<Value> WgmmaBuilder::wgmmaRS(ArrayRef<Value> acc, ArrayRef<Value> aRegs, Value descB,
                                         int n, ElemType in) {
  // wgmma.mma_async ... d, {a0..a3}, descB, p(scale-d), imm-scale-a, imm-scale-b, imm-trans-b:
  // B is MN-major (trans-b = 1); scale-d is 1 (accumulate) through a predicate register.
  int values = int(acc.size());
  const char *ty = in == ElemType::BF16 ? "bf16" : "f16";
  std::string d, a;
  for (int i = 0; i < values; ++i) d += (i ? ", $" : "$") + std::to_string(i);
  for (int i = 0; i < 4; ++i) a += (i ? ", $" : "$") + std::to_string(values + i);
  std::string ptx = "{\n.reg .pred p;\nsetp.ne.b32 p, $" + std::to_string(values + 5) +
                    ", 0;\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." +
                    ty + "." + ty + " {" + d + "}, {" + a + "}, $" + std::to_string(values + 4) +
                    ", p, 1, 1, 1;\n}";
  std::string constraints;
  for (int i = 0; i < values; ++i) constraints += "=f,";
  constraints += "r,r,r,r,l,n";
  for (int i = 0; i < values; ++i) constraints += "," + std::to_string(i); // tied: read-write
  SmallVector<Value> operands(aRegs.begin(), aRegs.end());
  operands.push_back(descB);
  operands.push_back(arith::ConstantIntOp::create(b, loc, 1, 32)); // scale-d
  operands.append(acc.begin(), acc.end());
  auto op = LLVM::InlineAsmOp::create(
      b, loc, accStruct(values), operands, ptx, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
  return unpackStruct(op.getRes(), values);
}

void WgmmaBuilder::fence() { NVVM::WgmmaFenceAlignedOp::create(b, loc); }
void WgmmaBuilder::commitGroup() { NVVM::WgmmaGroupSyncAlignedOp::create(b, loc); }
void WgmmaBuilder::waitGroup(int pending) { NVVM::WgmmaWaitGroupSyncOp::create(b, loc, pending); }

SmallVector<Value> WgmmaBuilder::registerFence(ArrayRef<Value> values) {
  SmallVector<Value> out;
  // One asm per 64 values keeps the constraint strings short.
  for (size_t start = 0; start < values.size(); start += 64) {
    ArrayRef<Value> chunk = values.slice(start, std::min<size_t>(64, values.size() - start));
    SmallVector<Type> types;
    std::string constraints;
    for (Value v : chunk) {
      types.push_back(v.getType());
      constraints += std::string(constraints.empty() ? "" : ",") +
                     (v.getType().isF32() ? "=f" : "=r");
    }
    for (size_t i = 0; i < chunk.size(); ++i) constraints += "," + std::to_string(i);
    Type st = LLVM::LLVMStructType::getLiteral(b.getContext(), types);
    auto op = LLVM::InlineAsmOp::create(
        b, loc, st, chunk, "", constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
    out.append(unpackStruct(op.getRes(), int(chunk.size())));
  }
  return out;
}

} // namespace tessera::hopper

// Hopper builders (Hopper.h): wgmma, warp specialisation, TMA and mbarriers.
#include "tessera/Codegen/Hopper.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

#include <string>

using namespace mlir;

namespace tessera::hopper {

namespace {
NVVM::WGMMATypes wgmmaType(ElemType t) {
  return t == ElemType::BF16 ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
}
Attribute workgroupSpace(MLIRContext *ctx) {
  return gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
}
} // namespace

Value HopperBuilder::i32(int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32); }

Type HopperBuilder::accStruct(int values) {
  return LLVM::LLVMStructType::getLiteral(b.getContext(),
                                          SmallVector<Type>(values, b.getF32Type()));
}

Value HopperBuilder::packStruct(ArrayRef<Value> values) {
  SmallVector<Type> types;
  for (Value v : values) types.push_back(v.getType());
  Type st = LLVM::LLVMStructType::getLiteral(b.getContext(), types);
  Value s = LLVM::UndefOp::create(b, loc, st);
  for (auto [i, v] : llvm::enumerate(values))
    s = LLVM::InsertValueOp::create(b, loc, s, v, ArrayRef<int64_t>{int64_t(i)});
  return s;
}

SmallVector<Value> HopperBuilder::unpackStruct(Value s, int values) {
  SmallVector<Value> out;
  for (int i = 0; i < values; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, s, ArrayRef<int64_t>{i}));
  return out;
}

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

SmallVector<Value> HopperBuilder::wgmmaSS(ArrayRef<Value> acc, Value descA, Value descB, int n,
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

SmallVector<Value> HopperBuilder::wgmmaRS(ArrayRef<Value> acc, ArrayRef<Value> aRegs, Value descB,
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
  operands.push_back(i32(1));
  operands.append(acc.begin(), acc.end());
  auto op = LLVM::InlineAsmOp::create(
      b, loc, accStruct(values), operands, ptx, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
  return unpackStruct(op.getRes(), values);
}

void HopperBuilder::fence() { NVVM::WgmmaFenceAlignedOp::create(b, loc); }
void HopperBuilder::commitGroup() { NVVM::WgmmaGroupSyncAlignedOp::create(b, loc); }
void HopperBuilder::waitGroup(int pending) { NVVM::WgmmaWaitGroupSyncOp::create(b, loc, pending); }

SmallVector<Value> HopperBuilder::registerFence(ArrayRef<Value> values) {
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

//===----------------------------------------------------------------------===//
// Warp specialisation
//===----------------------------------------------------------------------===//

Value HopperBuilder::uniformWarpgroupId() {
  Value tid = arith::IndexCastOp::create(b, loc, b.getI32Type(), kb.threadId());
  Value wg = arith::DivUIOp::create(b, loc, tid, i32(128));
  Value shfl = NVVM::ShflOp::create(b, loc, b.getI32Type(), i32(-1), wg, i32(0), i32(31),
                                    NVVM::ShflKind::idx, UnitAttr());
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), shfl);
}

void HopperBuilder::setMaxRegisters(int count, bool increase) {
  NVVM::SetMaxRegisterOp::create(b, loc, count,
                                 increase ? NVVM::SetMaxRegisterAction::increase
                                          : NVVM::SetMaxRegisterAction::decrease);
}

Value HopperBuilder::electOne() {
  return NVVM::ElectSyncOp::create(b, loc, b.getI1Type(), Value());
}

void HopperBuilder::namedBarrierSync(Value id, int threads) {
  NVVM::BarrierOp::create(b, loc, Type(), id, i32(threads), NVVM::BarrierReductionAttr(), Value());
}

void HopperBuilder::namedBarrierArrive(Value id, int threads) {
  NVVM::BarrierArriveOp::create(b, loc, id, i32(threads));
}

//===----------------------------------------------------------------------===//
// Shared memory, TMA and mbarriers
//===----------------------------------------------------------------------===//

Value HopperBuilder::dynamicSharedMemory(gpu::GPUFuncOp func, int bytes) {
  MLIRContext *ctx = b.getContext();
  Attribute space = workgroupSpace(ctx);
  auto module = func->getParentOfType<gpu::GPUModuleOp>();
  auto declType = MemRefType::get({0}, b.getI8Type(), MemRefLayoutAttrInterface(), space);
  const char *name = "tessera_dynamic_smem";
  if (!module.lookupSymbol(name)) {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(module.getBody());
    memref::GlobalOp::create(b, loc, name, /*sym_visibility=*/StringAttr(), declType,
                             /*initial_value=*/Attribute(), /*constant=*/false,
                             b.getI64IntegerAttr(1024));
  }
  Value decl = memref::GetGlobalOp::create(b, loc, declType, name);
  auto full = MemRefType::get({bytes}, b.getI8Type(), MemRefLayoutAttrInterface(), space);
  return memref::ReinterpretCastOp::create(b, loc, full, decl, 0, ArrayRef<int64_t>{bytes},
                                           ArrayRef<int64_t>{1});
}

Value HopperBuilder::descriptorBase(Value smem) {
  Value p = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, smem);
  Value p64 = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), p);
  Value masked = arith::AndIOp::create(b, loc, p64,
                                       arith::ConstantIntOp::create(b, loc, 0x3FFFF, 64));
  return arith::ShRUIOp::create(b, loc, masked, arith::ConstantIntOp::create(b, loc, 4, 64));
}

Value HopperBuilder::view(Value smem, Value byteOffset, ArrayRef<int64_t> shape, Type elem) {
  auto type = MemRefType::get(shape, elem, MemRefLayoutAttrInterface(),
                              workgroupSpace(b.getContext()));
  return memref::ViewOp::create(b, loc, type, smem, byteOffset, ValueRange{});
}

Type HopperBuilder::tensorMapType(ArrayRef<int64_t> box, Type elem) {
  auto tensor = MemRefType::get(box, elem, MemRefLayoutAttrInterface(),
                                workgroupSpace(b.getContext()));
  return nvgpu::TensorMapDescriptorType::get(
      b.getContext(), tensor, nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
      nvgpu::TensorMapL2PromoKind::L2PROMO_NONE, nvgpu::TensorMapOOBKind::OOB_ZERO,
      nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
}

Value HopperBuilder::createBarriers(int count) {
  auto type = nvgpu::MBarrierGroupType::get(b.getContext(), workgroupSpace(b.getContext()), count);
  return nvgpu::MBarrierCreateOp::create(b, loc, type);
}

void HopperBuilder::initBarrier(Value group, Value index, int arrivals) {
  nvgpu::MBarrierInitOp::create(b, loc, group, kb.idx(arrivals), index, Value());
}

void HopperBuilder::fenceBarrierInit() { NVVM::FenceMbarrierInitOp::create(b, loc); }

void HopperBuilder::arriveExpectTx(Value group, Value index, int bytes) {
  nvgpu::MBarrierArriveExpectTxOp::create(b, loc, group, kb.idx(bytes), index, Value());
}

void HopperBuilder::arrive(Value group, Value index) {
  nvgpu::MBarrierArriveOp::create(b, loc, nvgpu::MBarrierTokenType::get(b.getContext()), group,
                                  index);
}

void HopperBuilder::waitParity(Value group, Value index, Value parity) {
  // The lowering retries try_wait until the phase completes; `ticks` is only the hint of each
  // try (the prototype's value).
  nvgpu::MBarrierTryWaitParityOp::create(b, loc, group, parity, kb.idx(10000000), index);
}

void HopperBuilder::tmaLoad(Value map, ValueRange coords, Value dst, Value group, Value index) {
  nvgpu::TmaAsyncLoadOp::create(b, loc, dst, group, map, coords, index, Value(), Value());
}

void HopperBuilder::tmaStore(Value src, Value map, ValueRange coords) {
  nvgpu::TmaAsyncStoreOp::create(b, loc, src, map, coords, Value());
}

void HopperBuilder::commitBulkStores() { NVVM::CpAsyncBulkCommitGroupOp::create(b, loc); }

void HopperBuilder::waitBulkStoresRead() {
  NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
}

void HopperBuilder::fenceProxyAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

} // namespace tessera::hopper

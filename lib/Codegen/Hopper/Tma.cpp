// Hopper TMA pipeline builders (Hopper/Tma.h): nvgpu mbarrier and TMA ops over workgroup memrefs,
// the dynamic shared memory as one extern symbol, and the NVVM bulk-group and proxy fences.
#include "tessera/Codegen/Hopper/Tma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

using namespace mlir;

namespace tessera::hopper {

namespace {
Attribute workgroupSpace(MLIRContext *ctx) {
  return gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
}
} // namespace

//===----------------------------------------------------------------------===//
// Shared memory
//===----------------------------------------------------------------------===//

Value TmaBuilder::dynamicSharedMemory(gpu::GPUFuncOp func, int bytes) {
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

Value TmaBuilder::descriptorBase(Value smem) {
  Value p = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, smem);
  Value p64 = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), p);
  Value masked = arith::AndIOp::create(b, loc, p64,
                                       arith::ConstantIntOp::create(b, loc, 0x3FFFF, 64));
  return arith::ShRUIOp::create(b, loc, masked, arith::ConstantIntOp::create(b, loc, 4, 64));
}

Value TmaBuilder::view(Value smem, Value byteOffset, ArrayRef<int64_t> shape, Type elem) {
  auto type = MemRefType::get(shape, elem, MemRefLayoutAttrInterface(),
                              workgroupSpace(b.getContext()));
  return memref::ViewOp::create(b, loc, type, smem, byteOffset, ValueRange{});
}

Type TmaBuilder::tensorMapType(ArrayRef<int64_t> box, Type elem) {
  auto tensor = MemRefType::get(box, elem, MemRefLayoutAttrInterface(),
                                workgroupSpace(b.getContext()));
  return nvgpu::TensorMapDescriptorType::get(
      b.getContext(), tensor, nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
      nvgpu::TensorMapL2PromoKind::L2PROMO_NONE, nvgpu::TensorMapOOBKind::OOB_ZERO,
      nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
}

//===----------------------------------------------------------------------===//
// mbarriers
//===----------------------------------------------------------------------===//

Value TmaBuilder::createBarriers(int count) {
  auto type = nvgpu::MBarrierGroupType::get(b.getContext(), workgroupSpace(b.getContext()), count);
  return nvgpu::MBarrierCreateOp::create(b, loc, type);
}

void TmaBuilder::initBarrier(Value group, Value index, int arrivals) {
  nvgpu::MBarrierInitOp::create(b, loc, group, kb.idx(arrivals), index, Value());
}

void TmaBuilder::fenceBarrierInit() { NVVM::FenceMbarrierInitOp::create(b, loc); }

void TmaBuilder::arriveExpectTx(Value group, Value index, Value bytes) {
  nvgpu::MBarrierArriveExpectTxOp::create(b, loc, group, bytes, index, Value());
}

void TmaBuilder::arrive(Value group, Value index) {
  nvgpu::MBarrierArriveOp::create(b, loc, nvgpu::MBarrierTokenType::get(b.getContext()), group,
                                  index);
}

void TmaBuilder::waitParity(Value group, Value index, Value parity) {
  // The lowering retries try_wait until the phase completes; `ticks` is only the hint of each
  // try (the prototype's value).
  nvgpu::MBarrierTryWaitParityOp::create(b, loc, group, parity, kb.idx(10000000), index);
}

//===----------------------------------------------------------------------===//
// TMA
//===----------------------------------------------------------------------===//

void TmaBuilder::tmaLoad(Value map, ValueRange coords, Value dst, Value group, Value index) {
  nvgpu::TmaAsyncLoadOp::create(b, loc, dst, group, map, coords, index, Value(), Value());
}

void TmaBuilder::tmaStore(Value src, Value map, ValueRange coords) {
  nvgpu::TmaAsyncStoreOp::create(b, loc, src, map, coords, Value());
}

void TmaBuilder::commitBulkStores() { NVVM::CpAsyncBulkCommitGroupOp::create(b, loc); }

void TmaBuilder::waitBulkStoresRead() {
  NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
}

void TmaBuilder::fenceProxyAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

} // namespace tessera::hopper

// tessera-lower-to-nvvm: the NVIDIA lowering of generated kernels to the LLVM + NVVM dialects.
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"
#include "tessera/Dialect/Tessera/Transforms/Fp8Conversions.h"

#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace tessera {
#define GEN_PASS_DEF_TESSERALOWERTONVVM
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
} // namespace tessera

namespace {

// convert-gpu-to-nvvm maps math.exp2, math.log2 and arith.maxnumf to libdevice calls
// (__nv_exp2f, ...), which we do not link. f32 exp2/log2 become the PTX approximations
// (ex2.approx.ftz.f32, lg2.approx.f32: one instruction each, 2 ulp) through their NVVM
// intrinsics, unrolled over vectors; maxnumf becomes llvm.maxnum (max.f32).
template <typename MathOp>
struct ToNVVMIntrinsic : OpRewritePattern<MathOp> {
  ToNVVMIntrinsic(MLIRContext *ctx, StringRef intrinsic)
      : OpRewritePattern<MathOp>(ctx), intrinsic(intrinsic) {}
  LogicalResult matchAndRewrite(MathOp op, PatternRewriter &rw) const override {
    Type t = op.getType();
    if (!getElementTypeOrSelf(t).isF32()) return failure();
    auto name = rw.getStringAttr(intrinsic);
    auto call = [&](Value x) -> Value {
      return LLVM::CallIntrinsicOp::create(rw, op.getLoc(), rw.getF32Type(), name, ValueRange{x})
          .getResult(0);
    };
    auto vt = dyn_cast<VectorType>(t);
    if (!vt) {
      rw.replaceOp(op, call(op.getOperand()));
      return success();
    }
    if (vt.getRank() != 1) return failure();
    SmallVector<Value> elems;
    for (int64_t i = 0; i < vt.getNumElements(); ++i)
      elems.push_back(call(vector::ExtractOp::create(rw, op.getLoc(), op.getOperand(), i)));
    rw.replaceOpWithNewOp<vector::FromElementsOp>(op, vt, elems);
    return success();
  }
  std::string intrinsic;
};

/// An f32 op replaced by the LLVM op of the same operands (llvm.maxnum: max.f32, llvm.fma:
/// fma.rn.f32), where convert-gpu-to-nvvm would call libdevice.
template <typename From, typename To>
struct SameOperandsToLLVM : OpRewritePattern<From> {
  using OpRewritePattern<From>::OpRewritePattern;
  LogicalResult matchAndRewrite(From op, PatternRewriter &rw) const override {
    if (!getElementTypeOrSelf(op.getType()).isF32()) return failure();
    rw.replaceOpWithNewOp<To>(op, op.getType(), op->getOperands());
    return success();
  }
};

/// TMA tensor maps are 128-byte kernel parameters passed by value (CUTLASS's
/// `const __grid_constant__ CUtensorMap`): the TMA instructions take their generic address.
/// The generators mark them with the role ArgRole::TensorMap; convert-gpu-to-nvvm drops byval, so
/// the attributes are set on the lowered function.
struct TensorMapParamsPass
    : PassWrapper<TensorMapParamsPass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TensorMapParamsPass)
  StringRef getArgument() const override { return "tessera-nvvm-tensor-map-params"; }
  void runOnOperation() override {
    getOperation().walk([](LLVM::LLVMFuncOp func) {
      auto roles = func->getAttrOfType<tessera::ArgRolesAttr>(tessera::TesseraDialect::getArgRolesAttrName());
      if (!roles || roles.getRoles().size() != func.getNumArguments()) return;
      MLIRContext *ctx = func.getContext();
      OpBuilder b(ctx);
      for (auto [i, role] : llvm::enumerate(roles.getRoles())) {
        if (role != tessera::ArgRole::TensorMap) continue;
        func.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(),
                        TypeAttr::get(LLVM::LLVMArrayType::get(b.getI64Type(), 16)));
        func.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(), b.getI64IntegerAttr(64));
        func.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(), b.getUnitAttr());
      }
    });
  }
};

/// ldmatrix of 8-bit floats (fp8 fragments, never transposed): convert-nvgpu-to-nvvm builds
/// their registers as vectors of the unconverted fp8 type (MLIR 22), which does not verify. The
/// instruction only moves 32-bit words, so it is emitted on the tile's address directly and
/// each word reinterpreted as four bytes.
struct LdMatrixOfBytes : OpRewritePattern<nvgpu::LdMatrixOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nvgpu::LdMatrixOp op, PatternRewriter &rw) const override {
    VectorType type = op.getRes().getType();
    auto memref = cast<MemRefType>(op.getSrcMemref().getType());
    if (!isa<FloatType>(type.getElementType()) || type.getElementTypeBitWidth() != 8 ||
        op.getTranspose() || memref.getRank() != 1 || !memref.getLayout().isIdentity())
      return failure();
    Location loc = op.getLoc();
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(rw, loc, op.getSrcMemref());
    Value at = arith::AddIOp::create(rw, loc, base, op.getIndices()[0]);
    Value address = arith::IndexCastOp::create(rw, loc, rw.getI64Type(), at);
    auto shared = LLVM::LLVMPointerType::get(rw.getContext(), 3);
    Value pointer = LLVM::IntToPtrOp::create(rw, loc, shared, address);
    const int tiles = op.getNumTiles();
    Type i32 = rw.getI32Type();
    Type words = tiles == 1 ? i32
                            : LLVM::LLVMStructType::getLiteral(
                                  rw.getContext(), SmallVector<Type>(tiles, i32));
    Value loaded = NVVM::LdMatrixOp::create(
        rw, loc, words, pointer, tiles, NVVM::MMALayout::row,
        NVVM::LdStMatrixShapeAttr::get(rw.getContext(), 8, 8), NVVM::LdStMatrixEltType::B16);
    auto rowType = VectorType::get({type.getDimSize(1)}, type.getElementType());
    Value result = ub::PoisonOp::create(rw, loc, type);
    for (int j = 0; j < tiles; ++j) {
      Value word = tiles == 1 ? loaded : LLVM::ExtractValueOp::create(rw, loc, loaded, j);
      Value one = vector::FromElementsOp::create(rw, loc, VectorType::get({1}, i32), word);
      Value bytes = vector::BitCastOp::create(
          rw, loc, VectorType::get({type.getDimSize(1)}, rw.getI8Type()), one);
      Value row = arith::BitcastOp::create(rw, loc, rowType, bytes);
      result = vector::InsertOp::create(rw, loc, row, result, j);
    }
    rw.replaceOp(op, result);
    return success();
  }
};

struct LdMatrixOfBytesPass : PassWrapper<LdMatrixOfBytesPass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LdMatrixOfBytesPass)
  StringRef getArgument() const override { return "tessera-nvvm-ldmatrix-bytes"; }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<arith::ArithDialect, LLVM::LLVMDialect, memref::MemRefDialect,
                    NVVM::NVVMDialect, ub::UBDialect, vector::VectorDialect>();
  }
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LdMatrixOfBytes>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

struct NoLibdevicePass : PassWrapper<NoLibdevicePass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(NoLibdevicePass)
  StringRef getArgument() const override { return "tessera-nvvm-no-libdevice"; }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<LLVM::LLVMDialect, vector::VectorDialect>();
  }
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    // The flush-to-zero form, FlashAttention's (exp2f under --use_fast_math): one MUFU.EX2.
    // Without ftz ptxas wraps each in a subnormal-range fixup (a compare and two predicated
    // multiplies), 29% of the sm_90a D128 kernel's instructions. Softmax terms below 2^-126
    // next to the row maximum's 1 do not change a result.
    patterns.add<ToNVVMIntrinsic<math::Exp2Op>>(&getContext(), "llvm.nvvm.ex2.approx.ftz.f32");
    patterns.add<ToNVVMIntrinsic<math::Log2Op>>(&getContext(), "llvm.nvvm.lg2.approx.f");
    patterns.add<SameOperandsToLLVM<arith::MaxNumFOp, LLVM::MaxNumOp>,
                 SameOperandsToLLVM<math::FmaOp, LLVM::FMAOp>>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

struct LowerToNVVMPass : tessera::impl::TesseraLowerToNVVMBase<LowerToNVVMPass> {
  using TesseraLowerToNVVMBase::TesseraLowerToNVVMBase;
  // Load the nested pipeline's dialects before running (see LowerToROCDL.cpp).
  void getDependentDialects(DialectRegistry &registry) const override {
    TesseraLowerToNVVMBase::getDependentDialects(registry);
    OpPassManager pm(gpu::GPUModuleOp::getOperationName());
    tessera::buildNVVMLoweringPipeline(pm);
    pm.getDependentDialects(registry);
  }
  void runOnOperation() override {
    SmallVector<gpu::GPUModuleOp> modules(getOperation().getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp module : modules) {
      std::optional<std::string> moduleChip = tessera::nvvmChip(module);
      if (!moduleChip) continue; // not an NVIDIA kernel
      if (!chip.empty() && chip != *moduleChip) {
        module.emitError() << "gpu.module targets " << *moduleChip
                           << " but the lowering was asked for chip " << chip;
        return signalPassFailure();
      }
      OpPassManager pm(gpu::GPUModuleOp::getOperationName());
      tessera::buildNVVMLoweringPipeline(pm);
      if (failed(runPipeline(pm, module))) return signalPassFailure();
    }
  }
};

} // namespace

std::optional<std::string> tessera::nvvmChip(gpu::GPUModuleOp module) {
  if (ArrayAttr targets = module.getTargetsAttr())
    for (Attribute a : targets)
      if (auto t = dyn_cast<NVVM::NVVMTargetAttr>(a)) return t.getChip().str();
  return std::nullopt;
}

void tessera::buildNVVMLoweringPipeline(OpPassManager &pm) {
  pm.addPass(tessera::createTesseraStaticKernelArgs());
  pm.addPass(tessera::createLowerKernelOpsPass());
  pm.addPass(std::make_unique<LdMatrixOfBytesPass>());
  pm.addPass(createConvertNVGPUToNVVMPass());
  pm.addPass(tessera::createFp8ConversionsPass(/*nvvm=*/true));
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(std::make_unique<NoLibdevicePass>());
  ConvertGpuOpsToNVVMOpsOptions options;
  options.useBarePtrCallConv = true;
  pm.addPass(createConvertGpuOpsToNVVMOps(options));
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(std::make_unique<TensorMapParamsPass>());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

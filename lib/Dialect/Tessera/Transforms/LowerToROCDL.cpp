// tessera-lower-to-rocdl: the AMD lowering of generated kernels to the LLVM + ROCDL dialects.
#include "tessera/Dialect/Tessera/Transforms/Passes.h"
#include "tessera/Dialect/Tessera/Transforms/Fp8Conversions.h"

#include "mlir/Conversion/ArithToAMDGPU/ArithToAMDGPU.h"
#include "mlir/Conversion/GPUToROCDL/GPUToROCDLPass.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace tessera {
#define GEN_PASS_DEF_TESSERALOWERTOROCDL
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
} // namespace tessera

namespace {

// math.exp2 / math.log2 on f32 (scalar or 1-D vector) -> rocdl.exp2 / rocdl.log, one
// v_exp_f32 / v_log_f32 each. The upstream lowering calls __ocml_exp2_f32 / __ocml_log2_f32
// from the ROCm device libraries, which we do not link.
template <typename MathOp, typename RocdlOp>
struct MathToRocdl : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(MathOp op, PatternRewriter &rw) const override {
    Type t = op.getType();
    if (t.isF32()) {
      rw.replaceOpWithNewOp<RocdlOp>(op, t, op.getOperand());
      return success();
    }
    auto vt = dyn_cast<VectorType>(t);
    if (!vt || vt.getRank() != 1 || !vt.getElementType().isF32()) return failure();
    SmallVector<Value> elems;
    for (int64_t i = 0; i < vt.getNumElements(); ++i) {
      Value e = vector::ExtractOp::create(rw, op.getLoc(), op.getOperand(), i);
      elems.push_back(RocdlOp::create(rw, op.getLoc(), rw.getF32Type(), e));
    }
    rw.replaceOpWithNewOp<vector::FromElementsOp>(op, vt, elems);
    return success();
  }
};

// gpu.grid_dim -> the workgroup count from the HSA dispatch packet (grid_size_x, a u32 at byte
// 12, over workgroup_size_x, a u16 at byte 4; y and z follow). The upstream lowering calls
// __ockl_get_num_groups from the device libraries, which we do not link.
struct GridDimFromDispatchPacket : OpRewritePattern<gpu::GridDimOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(gpu::GridDimOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    const int dim = int(op.getDimension());
    auto ptr = LLVM::LLVMPointerType::get(rw.getContext(), /*constant address space*/ 4);
    Value packet = LLVM::CallIntrinsicOp::create(rw, loc, ptr,
                                                 rw.getStringAttr("llvm.amdgcn.dispatch.ptr"),
                                                 ValueRange{})
                       .getResult(0);
    auto field = [&](int offset, Type type, unsigned align) -> Value {
      Value at = LLVM::GEPOp::create(rw, loc, ptr, rw.getI8Type(), packet,
                                     ArrayRef<LLVM::GEPArg>{offset});
      return LLVM::LoadOp::create(rw, loc, type, at, align, /*isVolatile=*/false,
                                  /*isNonTemporal=*/false, /*isInvariant=*/true);
    };
    Value items = field(12 + 4 * dim, rw.getI32Type(), 4);
    Value size = arith::ExtUIOp::create(rw, loc, rw.getI32Type(),
                                        field(4 + 2 * dim, rw.getI16Type(), 2));
    Value groups = arith::DivUIOp::create(rw, loc, items, size);
    rw.replaceOpWithNewOp<arith::IndexCastUIOp>(op, rw.getIndexType(), groups);
    return success();
  }
};

// The ops whose upstream ROCDL lowering calls the device libraries, lowered without them.
struct DeviceLibraryFreeOpsPass
    : PassWrapper<DeviceLibraryFreeOpsPass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DeviceLibraryFreeOpsPass)
  StringRef getArgument() const override { return "tessera-device-library-free-ops"; }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<ROCDL::ROCDLDialect, vector::VectorDialect, LLVM::LLVMDialect,
                    arith::ArithDialect>();
  }
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<MathToRocdl<math::Exp2Op, ROCDL::ROCDLExp2>,
                 MathToRocdl<math::Log2Op, ROCDL::ROCDLLog>, GridDimFromDispatchPacket>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

std::optional<std::string> rocdlChip(gpu::GPUModuleOp module) {
  if (ArrayAttr targets = module.getTargetsAttr())
    for (Attribute a : targets)
      if (auto t = dyn_cast<ROCDL::ROCDLTargetAttr>(a)) return t.getChip().str();
  return std::nullopt;
}

struct LowerToROCDLPass : tessera::impl::TesseraLowerToROCDLBase<LowerToROCDLPass> {
  using TesseraLowerToROCDLBase::TesseraLowerToROCDLBase;
  // The nested pipeline's passes load dialects (cf, ...) that must be loaded before this
  // pass runs: a multithreaded context cannot load dialects mid-pass.
  void getDependentDialects(DialectRegistry &registry) const override {
    TesseraLowerToROCDLBase::getDependentDialects(registry);
    OpPassManager pm(gpu::GPUModuleOp::getOperationName());
    tessera::buildROCDLLoweringPipeline(pm, "gfx942");
    pm.getDependentDialects(registry);
  }
  void runOnOperation() override {
    SmallVector<gpu::GPUModuleOp> modules(getOperation().getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp module : modules) {
      std::optional<std::string> moduleChip = rocdlChip(module);
      if (!moduleChip) continue; // not an AMD kernel
      if (!chip.empty() && chip != *moduleChip) {
        module.emitError() << "gpu.module targets " << *moduleChip
                           << " but the lowering was asked for chip " << chip;
        return signalPassFailure();
      }
      OpPassManager pm(gpu::GPUModuleOp::getOperationName());
      tessera::buildROCDLLoweringPipeline(pm, *moduleChip);
      if (failed(runPipeline(pm, module))) return signalPassFailure();
    }
  }
};

// Float atomic adds into runtime-allocated workspaces (device memory, coarse-grained, never
// remote): without these LLVM expands them into compare-and-swap loops, for fine-grained memory.
// They only accumulate (a later kernel reads the sums), so they are relaxed and device-scoped:
// memref.atomic_rmw's acq_rel at system scope wraps every add in an L2 write-back and
// invalidate.
struct WorkspaceAtomicsPass
    : PassWrapper<WorkspaceAtomicsPass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(WorkspaceAtomicsPass)
  StringRef getArgument() const override { return "tessera-workspace-atomics"; }
  void runOnOperation() override {
    UnitAttr unit = UnitAttr::get(&getContext());
    getOperation().walk([&](LLVM::AtomicRMWOp op) {
      if (op.getBinOp() != LLVM::AtomicBinOp::fadd) return;
      op.setOrdering(LLVM::AtomicOrdering::monotonic);
      op.setSyncscope(StringRef("agent"));
      op->setAttr(ROCDL::ROCDLDialect::NoFineGrainedMemoryAttrHelper::getNameStr(), unit);
      op->setAttr(ROCDL::ROCDLDialect::NoRemoteMemoryAttrHelper::getNameStr(), unit);
      op->setAttr(ROCDL::ROCDLDialect::IgnoreDenormalModeAttrHelper::getNameStr(), unit);
    });
  }
};

} // namespace

void tessera::buildROCDLLoweringPipeline(OpPassManager &pm, const std::string &chip) {
  pm.addPass(tessera::createTesseraStaticKernelArgs());
  pm.addPass(tessera::createLowerKernelOpsPass());
  pm.addPass(std::make_unique<DeviceLibraryFreeOpsPass>());
  // fp8 conversions on the chip's converts where it has them (gfx942 FNUZ, gfx950 OCP), else
  // in integer code.
  ArithToAMDGPUConversionPassOptions fp8;
  fp8.chipset = chip;
  pm.addPass(createArithToAMDGPUConversionPass(fp8));
  pm.addPass(tessera::createFp8ConversionsPass(/*nvvm=*/false));
  pm.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToROCDLOpsOptions options;
  options.chipset = chip;
  options.runtime = gpu::amd::Runtime::HIP;
  options.useBarePtrCallConv = true;
  pm.addPass(createConvertGpuOpsToROCDLOps(options));
  // Casts left over from the fp8 conversions' vectors.
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(std::make_unique<WorkspaceAtomicsPass>());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

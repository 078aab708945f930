// The lowering of the kernel ops of the tessera dialect (Passes.h): tessera.atomic_addf to
// vector reductions where the target has them, tessera.swap_wave_halves to the target's swap
// instruction or to shuffles.
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"
#include "tessera/Target/TargetInfo.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace {

/// The NVIDIA compute capability of `module`'s target ("sm_90a" -> 90), or 0 for another vendor.
int smVersion(gpu::GPUModuleOp module) {
  std::optional<std::string> chip = tessera::nvvmChip(module);
  if (!chip) return 0;
  int version = 0;
  StringRef digits = StringRef(*chip);
  digits.consume_front("sm_");
  digits.take_while(llvm::isDigit).getAsInteger(10, version);
  return version;
}

struct ExpandAtomicAddF : OpRewritePattern<tessera::AtomicAddFOp> {
  ExpandAtomicAddF(MLIRContext *ctx, bool vectorReductions)
      : OpRewritePattern(ctx), vectorReductions(vectorReductions) {}
  LogicalResult matchAndRewrite(tessera::AtomicAddFOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    const int64_t n = op.getValue().getType().getNumElements();
    SmallVector<Value> elems;
    for (int64_t i = 0; i < n; ++i)
      elems.push_back(vector::ExtractOp::create(rw, loc, op.getValue(), i));
    if (!vectorReductions) {
      for (auto [i, x] : llvm::enumerate(elems)) {
        Value at = arith::AddIOp::create(rw, loc, op.getIndex(),
                                         arith::ConstantIndexOp::create(rw, loc, int64_t(i)));
        memref::AtomicRMWOp::create(rw, loc, arith::AtomicRMWKind::addf, x, op.getMemref(),
                                    ValueRange{at});
      }
      rw.eraseOp(op);
      return success();
    }
    // The memref holds a generic address; `red.global` (measured faster than the generic form,
    // bench/NOTES.md) takes it converted to the global window.
    Value base = memref::ExtractAlignedPointerAsIndexOp::create(rw, loc, op.getMemref());
    Value offset = arith::MulIOp::create(rw, loc, op.getIndex(),
                                         arith::ConstantIndexOp::create(rw, loc, 4));
    Value address = arith::IndexCastUIOp::create(rw, loc, rw.getI64Type(),
                                                 arith::AddIOp::create(rw, loc, base, offset));
    std::string ptx = "{\n.reg .b64 g;\ncvta.to.global.u64 g, $0;\nred.relaxed.gpu.global.add.v" +
                      std::to_string(n) + ".f32 [g], {";
    std::string constraints = "l";
    for (int64_t i = 0; i < n; ++i) {
      ptx += (i ? ", $" : "$") + std::to_string(i + 1);
      constraints += ",f";
    }
    ptx += "};\n}";
    SmallVector<Value> operands{address};
    operands.append(elems);
    LLVM::InlineAsmOp::create(rw, loc, TypeRange(), operands, ptx, constraints,
                              /*has_side_effects=*/true, /*is_align_stack=*/false,
                              LLVM::tailcallkind::TailCallKind::None,
                              LLVM::AsmDialectAttr::get(rw.getContext(), LLVM::AsmDialect::AD_ATT),
                              ArrayAttr());
    rw.eraseOp(op);
    return success();
  }
  bool vectorReductions;
};

/// The target of `module` (its ROCDL chip or NVVM chip), or null.
const tessera::TargetInfo *moduleTarget(gpu::GPUModuleOp module) {
  if (std::optional<std::string> chip = tessera::nvvmChip(module))
    return tessera::lookupTarget(*chip);
  if (ArrayAttr targets = module.getTargetsAttr())
    for (Attribute a : targets)
      if (auto t = dyn_cast<ROCDL::ROCDLTargetAttr>(a)) return tessera::lookupTarget(t.getChip().str());
  return nullptr;
}

struct ExpandSwapWaveHalves : OpRewritePattern<tessera::SwapWaveHalvesOp> {
  ExpandSwapWaveHalves(MLIRContext *ctx, int waveSize, bool permlaneSwap)
      : OpRewritePattern(ctx), waveSize(waveSize), permlaneSwap(permlaneSwap) {}
  LogicalResult matchAndRewrite(tessera::SwapWaveHalvesOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Type type = op.getA().getType(), i32 = rw.getI32Type();
    if (permlaneSwap) {
      // v_permlane32_swap: rows 2-3 of the first register trade places with rows 0-1 of the
      // second; the results are the first register's and the second's.
      auto toI32 = [&](Value x) {
        return type == i32 ? x : arith::BitcastOp::create(rw, loc, i32, x).getResult();
      };
      auto pair = LLVM::LLVMStructType::getLiteral(rw.getContext(), {i32, i32});
      Value swap = ROCDL::Permlane32SwapOp::create(rw, loc, pair, toI32(op.getA()),
                                                   toI32(op.getB()), /*fi=*/false,
                                                   /*boundControl=*/false);
      SmallVector<Value> results;
      for (int64_t i : {0, 1}) {
        Value x = LLVM::ExtractValueOp::create(rw, loc, swap, ArrayRef<int64_t>{i});
        results.push_back(type == i32 ? x : arith::BitcastOp::create(rw, loc, type, x).getResult());
      }
      rw.replaceOp(op, results);
      return success();
    }
    // lo = lane < h ? a : b from lane - h; hi = lane < h ? a from lane + h : b.
    auto i32Const = [&](int v) { return arith::ConstantIntOp::create(rw, loc, v, 32).getResult(); };
    Value half = i32Const(waveSize / 2);
    Value lane = arith::IndexCastOp::create(rw, loc, i32, gpu::LaneIdOp::create(rw, loc, nullptr));
    Value lower = arith::CmpIOp::create(rw, loc, arith::CmpIPredicate::ult, lane, half);
    auto shuffle = [&](Value x) {
      return gpu::ShuffleOp::create(rw, loc, x, half, i32Const(waveSize), gpu::ShuffleMode::XOR)
          .getShuffleResult();
    };
    Value lo = arith::SelectOp::create(rw, loc, lower, op.getA(), shuffle(op.getB()));
    Value hi = arith::SelectOp::create(rw, loc, lower, shuffle(op.getA()), op.getB());
    rw.replaceOp(op, ValueRange{lo, hi});
    return success();
  }
  int waveSize;
  bool permlaneSwap;
};

struct LowerKernelOpsPass : PassWrapper<LowerKernelOpsPass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LowerKernelOpsPass)
  StringRef getArgument() const override { return "tessera-lower-kernel-ops"; }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<arith::ArithDialect, gpu::GPUDialect, LLVM::LLVMDialect,
                    memref::MemRefDialect, ROCDL::ROCDLDialect, vector::VectorDialect>();
  }
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandAtomicAddF>(&getContext(), smVersion(getOperation()) >= 90);
    const tessera::TargetInfo *target = moduleTarget(getOperation());
    if (!target && getOperation()->walk([](tessera::SwapWaveHalvesOp) {
                       return WalkResult::interrupt();
                     }).wasInterrupted()) {
      getOperation().emitError("tessera.swap_wave_halves in a gpu.module without a known target");
      return signalPassFailure();
    }
    if (target)
      patterns.add<ExpandSwapWaveHalves>(&getContext(), target->waveSize, target->hasHalfWaveSwap);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

} // namespace

std::unique_ptr<Pass> tessera::createLowerKernelOpsPass() {
  return std::make_unique<LowerKernelOpsPass>();
}

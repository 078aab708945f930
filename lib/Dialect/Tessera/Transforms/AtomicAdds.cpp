// tessera.atomic_addf's lowering (Passes.h): vector reductions where the target has them.
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"

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

struct LowerAtomicAddsPass : PassWrapper<LowerAtomicAddsPass, OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LowerAtomicAddsPass)
  StringRef getArgument() const override { return "tessera-lower-atomic-adds"; }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<arith::ArithDialect, LLVM::LLVMDialect, memref::MemRefDialect,
                    vector::VectorDialect>();
  }
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandAtomicAddF>(&getContext(), smVersion(getOperation()) >= 90);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

} // namespace

std::unique_ptr<Pass> tessera::createLowerAtomicAddsPass() {
  return std::make_unique<LowerAtomicAddsPass>();
}

// arith.extf / arith.truncf on fp8 e4m3 (OCP "FN" and "FNUZ"), which the LLVM lowering cannot
// convert (LLVM has no 8-bit float type): on sm_90 the widening runs on `cvt.rn.f16x2.e4m3x2` and
// the narrowing of f32 pairs on `cvt.rn.satfinite.e4m3x2.f32` (its saturation undone),
// everywhere else (gfx11, and whatever ArithToAMDGPU left on gfx942/gfx950) in exact integer
// code. Both directions round to nearest even; a value past the format's range becomes its NaN
// (arith.truncf's non-saturating semantics: callers clamp first to saturate). The pass also turns
// the strided vector slices of ArithToAMDGPU's packed converts into shuffles.
#include "tessera/Dialect/Tessera/Transforms/Fp8Conversions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

using namespace mlir;

namespace {

/// The e4m3 format of `t`, or nullopt: its exponent bias and whether it is FNUZ.
struct E4M3 {
  int bias;
  bool fnuz;
};
std::optional<E4M3> e4m3Of(Type t) {
  if (isa<Float8E4M3FNType>(t)) return E4M3{7, false};
  if (isa<Float8E4M3FNUZType>(t)) return E4M3{8, true};
  return std::nullopt;
}

/// `t`'s shape (scalar or vector) with element type `elem`.
Type withElement(Type t, Type elem) {
  if (auto v = dyn_cast<VectorType>(t)) return v.clone(elem);
  return elem;
}

/// Builds the integer code over values shaped like one operand (scalar or vector).
struct Bits {
  PatternRewriter &b;
  Location loc;
  Type shape;
  Type i32() { return withElement(shape, b.getI32Type()); }
  Type f32() { return withElement(shape, b.getF32Type()); }
  Value splat(TypedAttr scalar) {
    Type t = withElement(shape, scalar.getType());
    if (auto v = dyn_cast<VectorType>(t))
      return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(v, scalar));
    return arith::ConstantOp::create(b, loc, scalar);
  }
  Value i(int64_t v) { return splat(b.getI32IntegerAttr(int32_t(uint32_t(v)))); }
  Value f(double v) { return splat(b.getF32FloatAttr(float(v))); }
  Value andi(Value x, int64_t m) { return arith::AndIOp::create(b, loc, x, i(m)); }
  Value shl(Value x, int s) { return arith::ShLIOp::create(b, loc, x, i(s)); }
  Value shr(Value x, int s) { return arith::ShRUIOp::create(b, loc, x, i(s)); }
  Value eq(Value x, int64_t v) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, i(v));
  }
  Value select(Value c, Value x, Value y) { return arith::SelectOp::create(b, loc, c, x, y); }
  Value toF32(Value x) { return arith::BitcastOp::create(b, loc, f32(), x); }
  Value toI32(Value x) { return arith::BitcastOp::create(b, loc, i32(), x); }
};

/// `x` (f32-shaped) as `to` (f16, bf16, f32 or f64): exact for the values an e4m3 widens to.
Value fromF32(PatternRewriter &b, Location loc, Value x, Type to) {
  Type elem = getElementTypeOrSelf(to);
  if (elem.isF32()) return x;
  if (elem.getIntOrFloatBitWidth() > 32) return arith::ExtFOp::create(b, loc, to, x);
  return arith::TruncFOp::create(b, loc, to, x);
}

/// e4m3 -> f32 in integer code: normal numbers rebias the exponent, subnormals are
/// man x 2^-(bias+2).
Value widenInSoftware(PatternRewriter &b, Location loc, Value src, E4M3 fmt) {
  Bits k{b, loc, src.getType()};
  Value bytes = arith::BitcastOp::create(b, loc, withElement(src.getType(), b.getI8Type()), src);
  Value x = arith::ExtUIOp::create(b, loc, k.i32(), bytes);
  Value em = k.andi(x, 0x7F);
  Value sign = k.shl(k.andi(x, 0x80), 24);
  Value normal = arith::AddIOp::create(b, loc, k.shl(em, 20), k.i((127 - fmt.bias) << 23));
  Value man = arith::UIToFPOp::create(b, loc, k.f32(), k.andi(x, 7));
  Value subnormal =
      k.toI32(arith::MulFOp::create(b, loc, man, k.f(std::ldexp(1.0, -fmt.bias - 2))));
  Value isSubnormal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, em, k.i(8));
  Value bits = arith::OrIOp::create(b, loc, k.select(isSubnormal, subnormal, normal), sign);
  Value isNan = fmt.fnuz ? k.eq(x, 0x80) : k.eq(em, 0x7F);
  return k.toF32(k.select(isNan, k.i(0x7FC00000), bits));
}

/// The vectors `parts` concatenated, joined pairwise by shuffles (which lower to LLVM directly).
Value concatPairwise(PatternRewriter &b, Location loc, SmallVector<Value> parts) {
  while (parts.size() > 1) {
    SmallVector<Value> joined;
    for (size_t j = 0; j + 1 < parts.size(); j += 2) {
      int64_t len = cast<VectorType>(parts[j].getType()).getNumElements();
      auto lanes = llvm::to_vector(llvm::seq<int64_t>(0, 2 * len));
      joined.push_back(vector::ShuffleOp::create(b, loc, parts[j], parts[j + 1], lanes));
    }
    if (parts.size() % 2) joined.push_back(parts.back());
    parts = std::move(joined);
  }
  return parts.front();
}

/// e4m3 pairs -> f16 pairs on sm_89+ (`cvt.rn.f16x2.e4m3x2`), then f16 -> f32.
Value widenOnNvvm(PatternRewriter &b, Location loc, Value src) {
  auto type = cast<VectorType>(src.getType());
  const int64_t n = type.getNumElements();
  auto halves = VectorType::get({2}, b.getF16Type());
  Value bytes = arith::BitcastOp::create(b, loc, type.clone(b.getI8Type()), src);
  // Pairs converted, then joined.
  SmallVector<Value> parts;
  for (int64_t j = 0; j < n; j += 2) {
    Value two = vector::ShuffleOp::create(b, loc, bytes, bytes, ArrayRef<int64_t>{j, j + 1});
    parts.push_back(NVVM::ConvertF8x2ToF16x2Op::create(b, loc, halves, two, /*relu=*/false,
                                                       type.getElementType()));
  }
  return arith::ExtFOp::create(b, loc, type.clone(b.getF32Type()), concatPairwise(b, loc, parts));
}

struct WidenFp8 : OpRewritePattern<arith::ExtFOp> {
  WidenFp8(MLIRContext *ctx, bool nvvm) : OpRewritePattern(ctx), nvvm(nvvm) {}
  LogicalResult matchAndRewrite(arith::ExtFOp op, PatternRewriter &b) const override {
    Type from = op.getIn().getType();
    std::optional<E4M3> fmt = e4m3Of(getElementTypeOrSelf(from));
    if (!fmt) return failure();
    auto vec = dyn_cast<VectorType>(from);
    bool hardware =
        nvvm && !fmt->fnuz && vec && vec.getRank() == 1 && vec.getNumElements() % 2 == 0;
    Value f32 = hardware ? widenOnNvvm(b, op.getLoc(), op.getIn())
                         : widenInSoftware(b, op.getLoc(), op.getIn(), *fmt);
    b.replaceOp(op, fromF32(b, op.getLoc(), f32, op.getType()));
    return success();
  }
  bool nvvm;
};

/// f32 pairs -> OCP e4m3 codes (i8) on sm_89+ (`cvt.rn.satfinite.e4m3x2.f32`, rounding to
/// nearest even; past 448 saturated).
Value narrowPairsOnNvvm(PatternRewriter &b, Location loc, Value x, VectorType result) {
  auto two = VectorType::get({2}, b.getI8Type());
  SmallVector<Value> pairs;
  for (int64_t j = 0; j < result.getNumElements(); j += 2) {
    // The first operand lands in the upper byte: element j + 1.
    Value lo = vector::ExtractOp::create(b, loc, x, j), hi = vector::ExtractOp::create(b, loc, x, j + 1);
    pairs.push_back(NVVM::ConvertF32x2ToF8x2Op::create(
        b, loc, two, hi, lo, NVVM::FPRoundingMode::RN, NVVM::SaturationMode::SATFINITE,
        /*relu=*/false, result.getElementType()));
  }
  return concatPairwise(b, loc, pairs);
}

/// f32 -> e4m3 rounding to nearest even (on sm_90's paired converts for even OCP vectors, in
/// integer code elsewhere); NaN and values past the range become the format's NaN.
struct NarrowToFp8 : OpRewritePattern<arith::TruncFOp> {
  NarrowToFp8(MLIRContext *ctx, bool nvvm) : OpRewritePattern(ctx), nvvm(nvvm) {}
  bool nvvm;
  LogicalResult matchAndRewrite(arith::TruncFOp op, PatternRewriter &b) const override {
    std::optional<E4M3> fmt = e4m3Of(getElementTypeOrSelf(op.getType()));
    if (!fmt) return failure();
    Location loc = op.getLoc();
    Bits k{b, loc, op.getType()};
    Value x = op.getIn();
    if (!getElementTypeOrSelf(x.getType()).isF32())
      x = getElementTypeOrSelf(x.getType()).getIntOrFloatBitWidth() < 32
              ? Value(arith::ExtFOp::create(b, loc, k.f32(), x))
              : Value(arith::TruncFOp::create(b, loc, k.f32(), x));
    Value bits = k.toI32(x);
    Value sign = k.shr(k.andi(bits, 0x80000000), 24);
    Value magnitude = k.andi(bits, 0x7FFFFFFF);
    Value abs = k.toF32(magnitude);
    // FN: 464 rounds to 448 (even), past it to 480, the NaN encoding. FNUZ: 248 rounds to 256.
    Value overflow = fmt->fnuz
                         ? arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, abs, k.f(248))
                         : arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, abs, k.f(464));
    Type bytes = withElement(op.getType(), b.getI8Type());
    auto finish = [&](Value result) {
      Value byte = arith::TruncIOp::create(b, loc, bytes, result);
      b.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), byte);
      return success();
    };
    auto vec = dyn_cast<VectorType>(op.getType());
    if (nvvm && !fmt->fnuz && vec && vec.getRank() == 1 && vec.getNumElements() % 2 == 0) {
      // The hardware's saturation undone: past 464 is the NaN, as arith.truncf's.
      Value codes = arith::ExtUIOp::create(b, loc, k.i32(), narrowPairsOnNvvm(b, loc, x, vec));
      return finish(k.select(overflow, arith::OrIOp::create(b, loc, sign, k.i(0x7F)), codes));
    }
    // Normal: round the f32 mantissa to 3 bits (ties to even), then rebias the exponent.
    Value lsb = k.andi(k.shr(magnitude, 20), 1);
    Value rounded = arith::AddIOp::create(
        b, loc, magnitude, arith::AddIOp::create(b, loc, k.i(0x7FFFF), lsb));
    Value normal = arith::SubIOp::create(b, loc, k.shr(rounded, 20), k.i((127 - fmt->bias) << 3));
    // Subnormal: |x| x 2^(bias+2) rounded to an integer (8 is the smallest normal's encoding).
    Value t = arith::MulFOp::create(b, loc, abs, k.f(std::ldexp(1.0, fmt->bias + 2)));
    Value magic = k.f(std::ldexp(1.0, 23));
    t = arith::SubFOp::create(b, loc, arith::AddFOp::create(b, loc, t, magic), magic);
    Value subnormal = arith::FPToUIOp::create(b, loc, k.i32(), t);
    Value isSubnormal = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, abs,
                                              k.f(std::ldexp(1.0, 1 - fmt->bias)));
    Value code = k.select(isSubnormal, subnormal, normal);
    Value isNan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, x, x);
    Value bad = arith::OrIOp::create(b, loc, overflow, isNan);
    Value signedCode = arith::OrIOp::create(b, loc, code, sign);
    if (fmt->fnuz) // no negative zero: 0x80 is the NaN
      return finish(k.select(bad, k.i(0x80), k.select(k.eq(code, 0), code, signedCode)));
    return finish(k.select(bad, arith::OrIOp::create(b, loc, sign, k.i(0x7F)), signedCode));
  }
};

struct Fp8ConversionsPass : PassWrapper<Fp8ConversionsPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(Fp8ConversionsPass)
  explicit Fp8ConversionsPass(bool nvvm) : nvvm(nvvm) {}
  StringRef getArgument() const override { return "tessera-fp8-conversions"; }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<arith::ArithDialect, vector::VectorDialect, NVVM::NVVMDialect>();
  }
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<WidenFp8>(&getContext(), nvvm);
    patterns.add<NarrowToFp8>(&getContext(), nvvm);
    // ArithToAMDGPU's strided slices as shuffles (LLVM translates those).
    vector::populateVectorInsertExtractStridedSliceTransforms(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
  bool nvvm;
};

} // namespace

std::unique_ptr<Pass> tessera::createFp8ConversionsPass(bool nvvm) {
  return std::make_unique<Fp8ConversionsPass>(nvvm);
}

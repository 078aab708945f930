// Scores, the online softmax and its finalisation (Attention/Softmax.h).
#include "tessera/Codegen/Attention/Softmax.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;

namespace tessera::attn {

/// `scalar` broadcast to the shape of `like` (a no-op for scalars).
static Value splatLike(KernelBuilder &kb, Value scalar, Value like) {
  if (scalar.getType() == like.getType()) return scalar;
  if (auto vt = dyn_cast<VectorType>(like.getType()))
    return vector::BroadcastOp::create(kb.builder(), kb.location(), vt, scalar);
  return scalar;
}

Value scaledScores(KernelBuilder &kb, Value acc, Value scaleLog2, Value cap, bool scaleInExp) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto scale = [&] { return kb.fmul(acc, splatLike(kb, scaleLog2, acc)); };
  Value uncapped = scaleInExp ? acc : scale();
  if (!cap) return uncapped;
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{acc.getType()}, softcapOn(kb, cap),
                                /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(b, loc, capScores(kb, scaleInExp ? scale() : uncapped, cap).scores);
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, loc, uncapped);
  return ifOp.getResult(0);
}

Value expScale(KernelBuilder &kb, Value scaleLog2, Value cap) {
  if (!cap) return scaleLog2;
  return kb.select(softcapOn(kb, cap), kb.f32(1.0), scaleLog2);
}

void scoreVariants(KernelBuilder &kb, Value needMask, Value cap,
                   function_ref<void(bool, bool)> body) {
  OpBuilder &b = kb.builder();
  // side(true) in the then-branch of `if (on)`, side(false) in its else-branch.
  auto branch = [&](Value on, function_ref<void(bool)> side) {
    auto ifOp = scf::IfOp::create(b, kb.location(), on, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    side(true);
    b.setInsertionPointToStart(ifOp.elseBlock());
    side(false);
  };
  branch(needMask, [&](bool masked) {
    if (!cap) return body(masked, false);
    branch(softcapOn(kb, cap), [&](bool capped) { body(masked, capped); });
  });
}

Value softcapOn(KernelBuilder &kb, Value cap) {
  return arith::CmpFOp::create(kb.builder(), kb.location(), arith::CmpFPredicate::OGT, cap,
                               kb.f32(0));
}

CappedScores capScores(KernelBuilder &kb, Value scaled, Value cap) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto splat = [&](Value x) { return splatLike(kb, x, scaled); };
  // With x = s * scale / cap: tanh(x) = 1 - 2 / (exp2(2 x log2 e) + 1), and 2 x log2 e is the
  // log2-domain score times 2 / cap (one scalar division).
  Value twoOverCap = arith::DivFOp::create(b, loc, kb.f32(2.0), cap);
  Value e2x = math::Exp2Op::create(b, loc, kb.fmul(scaled, splat(twoOverCap)));
  Value one = splat(kb.f32(1.0));
  // An approximate division (a reciprocal and a multiply, within 2 ulp): the IEEE one is a
  // dozen instructions an element with a slow path.
  Value twoOverE2x1 = arith::DivFOp::create(b, loc, splat(kb.f32(2.0)), kb.fadd(e2x, one),
                                            arith::FastMathFlags::afn);
  Value tanh = kb.fsub(one, twoOverE2x1);
  return {kb.fmul(tanh, splat(kb.fmul(cap, kb.f32(M_LOG2E)))), kb.fsub(one, kb.fmul(tanh, tanh))};
}

Value OnlineSoftmax::shiftFor(Value rowMax) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto isNegInf = [&](Value x) {
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x, kb.f32(-INFINITY));
  };
  if (!scoreScale) return kb.select(isNegInf(rowMax), kb.f32(0), rowMax);
  // Raw scores: the scaled max, negated so exp2Shifted is one fma.
  Value scaled = kb.select(isNegInf(rowMax), kb.f32(0), kb.fmul(rowMax, scoreScale));
  return arith::NegFOp::create(b, loc, scaled);
}

Value OnlineSoftmax::exp2Shifted(Value x, Value shift) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  if (!scoreScale) return math::Exp2Op::create(b, loc, kb.fsub(x, shift));
  Value scale = splatLike(kb, scoreScale, x);
  return math::Exp2Op::create(b, loc, math::FmaOp::create(b, loc, x, scale, shift));
}

Value OnlineSoftmax::rescaleFactor(Value oldMax, Value newMax) {
  if (!scoreScale) return exp2Shifted(oldMax, shiftFor(newMax));
  // Raw scores: exp2((m - m') * scale), exactly 1 when the max did not move (the fma of the
  // probabilities would leave the rounding error of m * scale); m' of -inf taken as 0.
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, newMax,
                                      kb.f32(-INFINITY));
  Value moved = kb.fsub(oldMax, kb.select(empty, kb.f32(0), newMax));
  return math::Exp2Op::create(b, loc, kb.fmul(moved, scoreScale));
}

Value OnlineSoftmax::nextSum(Value sum, Value alpha, Value rowSum) {
  return kb.fadd(kb.fmul(sum, alpha), rowSum);
}

Value OnlineSoftmax::inverseSum(Value sum) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, sum, kb.f32(0));
  return kb.select(positive, arith::DivFOp::create(b, loc, kb.f32(1.0), sum), kb.f32(0));
}

Value OnlineSoftmax::logSumExp(Value rowMax, Value sum) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, sum, kb.f32(0));
  if (!scoreScale)
    return kb.select(positive,
                     kb.fmul(kb.fadd(rowMax, math::Log2Op::create(b, loc, sum)), kb.f32(M_LN2)),
                     kb.f32(-INFINITY));
  Value log2Sum = math::Log2Op::create(b, loc, sum);
  return kb.select(positive,
                   kb.fmul(math::FmaOp::create(b, loc, rowMax, scoreScale, log2Sum), kb.f32(M_LN2)),
                   kb.f32(-INFINITY));
}

OnlineSoftmax::Finish OnlineSoftmax::finishWithSink(Value rowMax, Value sum, Value sink) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  // The loop's shift in the log2 domain (shiftFor negates it where it is an fma's addend).
  Value shift = shiftFor(rowMax);
  if (scoreScale) shift = arith::NegFOp::create(b, loc, shift);
  Value sinkLog2 = kb.fmul(sink, kb.f32(M_LOG2E));
  Value top = kb.fmax(shift, sinkLog2);
  Value rowPart = math::Exp2Op::create(b, loc, kb.fsub(shift, top));
  Value total = kb.fadd(kb.fmul(sum, rowPart), math::Exp2Op::create(b, loc, kb.fsub(sinkLog2, top)));
  // total > 0 unless the sink is -inf and no key was visible: then O = 0 and LSE = -inf.
  Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, total, kb.f32(0));
  Value safe = kb.select(positive, total, kb.f32(1));
  Value factor = kb.select(positive, arith::DivFOp::create(b, loc, rowPart, safe), kb.f32(0));
  Value lse = kb.select(positive,
                        kb.fmul(kb.fadd(top, math::Log2Op::create(b, loc, safe)), kb.f32(M_LN2)),
                        kb.f32(-INFINITY));
  return {factor, lse};
}

Value OnlineSoftmax::lseToShift(Value lse) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, lse,
                                      splatLike(kb, kb.f32(-INFINITY), lse));
  Value lseLog2 = kb.fmul(lse, splatLike(kb, kb.f32(M_LOG2E), lse));
  // Log2-domain scores subtract the shift, raw ones add it (exp2Shifted): either way an empty
  // row's probabilities come out exp2(-inf) = 0.
  if (!scoreScale)
    return kb.select(empty, splatLike(kb, kb.f32(INFINITY), lse), lseLog2);
  return kb.select(empty, splatLike(kb, kb.f32(-INFINITY), lse),
                   arith::NegFOp::create(b, loc, lseLog2));
}

} // namespace tessera::attn

// Visibility, key-tile ranges and scores shared by the flash_attn kernels (AttnCommon.h).
#include "AttnCommon.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;

namespace tessera {

AttnVisibility::AttnVisibility(tessera::FlashAttnOp op, KernelBuilder &kb, Value seqQ,
                               Value seqK, Value windowLeft, Value windowRight)
    : op(op), kb(kb), seqK(seqK), windowLeft(windowLeft), windowRight(windowRight) {
  diagOffset = op.getMask() == tessera::MaskKind::CausalTopLeft ? kb.idx(0) : kb.sub(seqK, seqQ);
}

std::pair<Value, Value> AttnVisibility::keyInterval(Value query) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto minsi = [&](Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); };
  auto maxsi = [&](Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); };
  Value first = kb.idx(0), last = kb.sub(seqK, kb.idx(1));
  Value diag = kb.add(query, diagOffset);
  if (op.getMask() != tessera::MaskKind::None) last = minsi(last, diag);
  if (op.getSlidingWindow()) {
    Value zero = kb.idx(0);
    Value leftOn = kb.cmpLe(zero, windowLeft), rightOn = kb.cmpLe(zero, windowRight);
    first = arith::SelectOp::create(b, loc, leftOn, maxsi(first, kb.sub(diag, windowLeft)), first);
    last = arith::SelectOp::create(b, loc, rightOn, minsi(last, kb.add(diag, windowRight)), last);
  }
  return {first, last};
}

Value AttnVisibility::visible(Value query, Value key) {
  auto [first, last] = keyInterval(query);
  return kb.andb(kb.cmpLe(first, key), kb.cmpLe(key, last));
}

std::pair<Value, Value> AttnVisibility::keyTileRange(Value q0, Value lastQuery, int blockN) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto ceilDiv = [&](Value a) { return arith::CeilDivSIOp::create(b, loc, a, kb.idx(blockN)); };
  auto select = [&](Value c, Value x, Value y) { return arith::SelectOp::create(b, loc, c, x, y); };
  Value lo = kb.idx(0);
  Value hi = ceilDiv(seqK);
  if (op.getMask() != tessera::MaskKind::None)
    hi = arith::MinSIOp::create(b, loc, hi, ceilDiv(kb.add(kb.add(lastQuery, diagOffset), 1)));
  if (op.getSlidingWindow()) {
    Value zero = kb.idx(0);
    Value rightOn = kb.cmpLe(zero, windowRight), leftOn = kb.cmpLe(zero, windowLeft);
    Value rightHi = ceilDiv(kb.add(kb.add(kb.add(lastQuery, diagOffset), windowRight), 1));
    hi = select(rightOn, arith::MinSIOp::create(b, loc, hi, rightHi), hi);
    Value leftLo = arith::FloorDivSIOp::create(
        b, loc, kb.sub(kb.add(q0, diagOffset), windowLeft), kb.idx(blockN));
    lo = select(leftOn, arith::MaxSIOp::create(b, loc, lo, leftLo), lo);
  }
  hi = arith::MaxSIOp::create(b, loc, hi, lo); // empty range when nothing is visible
  return {lo, hi};
}

std::pair<Value, Value> AttnVisibility::unmaskedTileRange(Value q0, Value lastQuery, int blockN) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  // Intervals only move right as the query grows: tile n is whole for every query when the
  // last query's interval starts at or before it and the first query's ends at or after it.
  Value start = keyInterval(lastQuery).first;  // >= 0
  Value end = kb.add(keyInterval(q0).second, 1); // one past the first query's last key
  Value lo = arith::CeilDivSIOp::create(b, loc, start, kb.idx(blockN));
  Value hi = arith::FloorDivSIOp::create(b, loc, end, kb.idx(blockN));
  return {lo, hi};
}

Value attnScores(KernelBuilder &kb, Value acc, Value scaleLog2, Value cap) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto vt = cast<VectorType>(acc.getType());
  auto splat = [&](Value x) { return vector::BroadcastOp::create(b, loc, vt, x); };
  auto fdiv = [&](Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); };
  Value scaled = kb.fmul(acc, splat(scaleLog2));
  if (!cap) return scaled;
  Value capOn = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, cap, kb.f32(0));
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{vt}, capOn, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  // x = s * scale / cap; tanh(x) = 1 - 2 / (exp2(2 x log2 e) + 1); result in log2 units.
  Value twoXLog2e = kb.fmul(scaled, splat(fdiv(kb.f32(2.0), cap)));
  Value e2x = math::Exp2Op::create(b, loc, twoXLog2e);
  Value one = splat(kb.f32(1.0));
  Value tanh = kb.fsub(one, fdiv(splat(kb.f32(2.0)), kb.fadd(e2x, one)));
  scf::YieldOp::create(b, loc, kb.fmul(tanh, splat(kb.fmul(cap, kb.f32(M_LOG2E)))));
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, loc, scaled);
  return ifOp.getResult(0);
}

KernelSignature flashAttnSignature(tessera::FlashAttnOp op, int blockM, int blockThreads) {
  MLIRContext *ctx = op.getContext();
  auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type index = IndexType::get(ctx), f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32);
  Type elem = op.getDtype();
  KernelSignature sig;
  sig.name = op.getSymName().str();
  sig.directive = "flash_attn";
  sig.directiveAttrs = directiveAttributes(op);
  auto &a = sig.args;
  for (const char *n : {"q", "k", "v"}) a.push_back({n, ptr(elem), ArgRole::Input});
  a.push_back({"o", ptr(elem), ArgRole::Output});
  if (op.getReturnLse()) a.push_back({"lse", ptr(f32), ArgRole::Output});
  if (op.getVarlen()) {
    a.push_back({"cu_seqlens_q", ptr(i32), ArgRole::Input});
    a.push_back({"cu_seqlens_k", ptr(i32), ArgRole::Input});
  }
  for (const char *n : {"B", "Sq", "Sk", "Hq", "Hkv"}) a.push_back({n, index, ArgRole::Size});
  // The packed tensors' row counts: TMA maps of the sm_90a kernel span them.
  if (op.getVarlen())
    for (const char *n : {"total_q", "total_k"}) a.push_back({n, index, ArgRole::Size});
  for (const char *t : {"q", "k", "v", "o"})
    for (const char *d : {"b", "s", "h"})
      a.push_back({std::string(t) + "_stride_" + d, index, ArgRole::Stride});
  if (op.getReturnLse()) {
    a.push_back({"lse_stride_b", index, ArgRole::Stride});
    a.push_back({"lse_stride_h", index, ArgRole::Stride});
  }
  a.push_back({"scale", f32, ArgRole::Scale});
  if (op.getSlidingWindow()) {
    a.push_back({"window_left", index, ArgRole::Param});
    a.push_back({"window_right", index, ArgRole::Param});
  }
  if (op.getSoftcap()) a.push_back({"softcap", f32, ArgRole::Param});
  // Query head h reads KV head h / (Hq / Hkv): Hq must be a multiple of Hkv.
  sig.divisible.push_back({"Hq", GridExpr::arg("Hkv")});
  sig.grid[0] = GridExpr::ceilDiv(GridExpr::arg("Sq"), GridExpr::constant(blockM));
  sig.grid[1] = GridExpr::arg("Hq");
  sig.grid[2] = GridExpr::arg("B");
  sig.blockThreads = blockThreads;
  return sig;
}

} // namespace tessera

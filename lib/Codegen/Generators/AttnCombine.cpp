// The merge of attention results computed over parts of the keys (attn::emitCombine), and the
// attn_combine directive's generator, a kernel that runs it on FlashAttention-3's layout
// (docs/decode.md).
//
// Recipe: one workgroup per (batch, token, head) row. Its waves take turns over the parts,
// kCombineUnroll at a time (their loads independent of each other, so a wave waits on memory once
// per turn, not once per part), and their sums meet in LDS.
#include "tessera/Codegen/Attention/Combine.h"
#include "tessera/Codegen/Generators.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;

namespace tessera {
namespace attn {

/// The parts each wave reads per turn.
constexpr int kCombineUnroll = 4;

void emitCombine(KernelBuilder &kb, gpu::GPUFuncOp func, int64_t headDim, const CombineRow &row) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  const int wave = kb.targetInfo().waveSize, waves = kCombineWaves, unroll = kCombineUnroll;
  Type f32 = b.getF32Type();
  // Each wave's column sums, then its sum of weights: row w of `sums`, flat (no swizzle).
  const int64_t sumsRow = headDim + 1;
  Value sums = kb.allocLds(func, f32, 1, int(waves * sumsRow)).memref;
  auto sumAt = [&](Value w, Value col) { return kb.add(kb.mul(w, sumsRow), col); };
  Value tid = kb.threadId(), lane = kb.remui(tid, wave), waveId = kb.waveId();
  Value splits = row.numSplits;
  auto lseOf = [&](Value s) {
    return memref::LoadOp::create(b, loc, row.lsePartials, ValueRange{row.lseAt(s)}).getResult();
  };
  auto loop = [&](Value from, Value step, ValueRange init,
                  llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto l = scf::ForOp::create(b, loc, from, splits, step, init);
    OpBuilder::InsertionGuard gl(b);
    b.setInsertionPointToStart(l.getBody());
    scf::YieldOp::create(b, loc, body(l.getInductionVar(), l.getRegionIterArgs()));
    return SmallVector<Value>(l.getResults());
  };
  // M = max LSE (every wave, its lanes over parts lane, lane + wave, ...), 0 when every part is
  // empty (-inf): no (-inf) - (-inf).
  Value m = loop(lane, kb.idx(wave), ValueRange{kb.f32(-INFINITY)},
                 [&](Value s, ValueRange acc) -> SmallVector<Value> {
                   return {arith::MaximumFOp::create(b, loc, acc[0], lseOf(s))};
                 })[0];
  SmallVector<int> allLanes;
  for (int mask = 1; mask < wave; mask *= 2) allLanes.push_back(mask);
  m = kb.laneAllReduce({m}, allLanes, vector::CombiningKind::MAXNUMF)[0];
  // The sink joins the denominator once: in M, then in the sum of weights.
  if (row.sink) m = kb.fmax(m, row.sink);
  Value mUse = kb.select(
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, m, kb.f32(-INFINITY)), kb.f32(0), m);
  // This wave's sum w_s O_s over its turns, each lane's columns lane, lane + wave, ...; and its
  // sum of w_s.
  const int cols = int(llvm::divideCeil(headDim, wave));
  SmallVector<Value> init(cols + 1, kb.f32(0));
  SmallVector<Value> waveSums = loop(
      kb.mul(waveId, unroll), kb.idx(waves * unroll), init,
      [&](Value first, ValueRange acc) -> SmallVector<Value> {
        SmallVector<Value> next(acc);
        for (int u = 0; u < unroll; ++u) {
          // Past the last part: part `first`'s row read again, weighted 0.
          Value s = kb.add(first, u), real = kb.cmpLt(s, splits);
          Value at = kb.select(real, s, first);
          Value w = math::Exp2Op::create(b, loc,
                                         kb.fmul(kb.fsub(lseOf(at), mUse), kb.f32(M_LOG2E)));
          w = kb.select(real, w, kb.f32(0));
          // A weight of 0 (an empty part, whose row may never have been written) drops the
          // term: never 0 x an unwritten value.
          Value counts = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, w, kb.f32(0));
          Value rowAt = row.partialRow(at);
          for (int c = 0; c < cols; ++c) {
            Value col = kb.minsi(kb.add(lane, c * wave), kb.idx(headDim - 1));
            Value x = memref::LoadOp::create(b, loc, row.partials, ValueRange{kb.add(rowAt, col)});
            next[c] = kb.select(counts, math::FmaOp::create(b, loc, w, x, next[c]), next[c]);
          }
          next[cols] = kb.fadd(next[cols], w);
        }
        return next;
      });
  auto store = [&](Value col, Value v) {
    memref::StoreOp::create(b, loc, v, sums, ValueRange{sumAt(waveId, col)});
  };
  for (int c = 0; c < cols; ++c) {
    OpBuilder::InsertionGuard gc(b);
    Value col = kb.add(lane, c * wave);
    kb.enterIf(kb.cmpLt(col, kb.idx(headDim)));
    store(col, waveSums[c]);
  }
  {
    OpBuilder::InsertionGuard gl(b);
    kb.enterIf(kb.cmpEq(lane, kb.idx(0)));
    store(kb.idx(headDim), waveSums[cols]);
  }
  kb.barrier();
  // The waves' sums in wave order (the same bits whichever wave finishes first).
  auto total = [&](Value col) {
    Value sum = kb.f32(0);
    for (int w = 0; w < waves; ++w)
      sum = kb.fadd(sum, memref::LoadOp::create(b, loc, sums, ValueRange{sumAt(kb.idx(w), col)}));
    return sum;
  };
  Value sum = total(kb.idx(headDim));
  if (row.sink)
    sum = kb.fadd(sum,
                  math::Exp2Op::create(b, loc, kb.fmul(kb.fsub(row.sink, mUse), kb.f32(M_LOG2E))));
  // 1 / sum, 0 when the sum is 0 (every part empty) or not a number.
  Value usable = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, sum, kb.f32(0));
  Value inv = kb.select(usable, arith::DivFOp::create(b, loc, kb.f32(1), sum), kb.f32(0));
  const int threads = waves * wave;
  for (int c = 0; c < int(llvm::divideCeil(headDim, threads)); ++c) {
    OpBuilder::InsertionGuard gc(b);
    Value col = kb.add(tid, c * threads);
    kb.enterIf(kb.cmpLt(col, kb.idx(headDim)));
    row.storeOutput(col, kb.fmul(total(col), inv));
  }
  if (row.storeLse) {
    OpBuilder::InsertionGuard gl(b);
    kb.enterIf(kb.cmpEq(tid, kb.idx(0)));
    Value lnSum = kb.fmul(math::Log2Op::create(b, loc, sum), kb.f32(M_LN2));
    row.storeLse(kb.fadd(mUse, lnSum));
  }
}

} // namespace attn

FailureOr<gpu::GPUFuncOp> generateAttnCombine(tessera::AttnCombineOp op, const TargetInfo &target) {
  MLIRContext *ctx = op.getContext();
  auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type f32 = Float32Type::get(ctx), index = IndexType::get(ctx), out = op.getDtype();
  KernelSignature sig;
  sig.name = op.getSymName().str();
  sig.directive = "attn_combine";
  sig.directiveAttrs = directiveAttributes(op);
  ArgHandle partials = sig.add("out_partial", ptr(f32), ArgRole::Input);
  ArgHandle lsePartials = sig.add("lse_partial", ptr(f32), ArgRole::Input);
  ArgHandle o = sig.add("o", ptr(out), ArgRole::Output);
  ArgHandle lse = sig.add("lse", ptr(f32), ArgRole::Output);
  ArgHandle splits = sig.add("num_splits", index, ArgRole::Size);
  ArgHandle batch = sig.add("B", index, ArgRole::Size);
  ArgHandle seq = sig.add("S", index, ArgRole::Size);
  ArgHandle heads = sig.add("H", index, ArgRole::Size);
  // Strides in elements, (split,) batch, token, head; D has unit stride.
  auto strides = [&](const std::string &name, bool split) {
    SmallVector<ArgHandle, 4> s;
    for (const char *axis : {"split", "b", "s", "h"})
      if (split || std::string(axis) != "split")
        s.push_back(sig.add(name + "_stride_" + axis, index, ArgRole::Stride));
    return s;
  };
  SmallVector<ArgHandle, 4> partialStrides = strides("out_partial", true),
                            lsePartialStrides = strides("lse_partial", true),
                            oStrides = strides("o", false), lseStrides = strides("lse", false);
  sig.grid[0] = GridExpr::mul(sig.expr(heads), sig.expr(seq));
  sig.grid[1] = sig.expr(batch);
  sig.grid[2] = GridExpr::constant(1);
  sig.blockThreads = attn::kCombineWaves * target.waveSize;
  OpBuilder b(op);
  gpu::GPUFuncOp func = createKernel(b, op.getLoc(), target, sig);
  b.setInsertionPoint(func.getBody().front().getTerminator());
  KernelBuilder kb(b, op.getLoc(), target);
  auto arg = [&](ArgHandle h) { return argValue(func, h); };
  // Workgroup x: head-major (head, token) of batch item y.
  Value item = kb.blockId(gpu::Dimension::y), x = kb.blockId(gpu::Dimension::x);
  Value head = kb.divui(x, arg(seq)), token = kb.remui(x, arg(seq));
  // The offset of (batch, token, head) under strides {b, s, h} (after `from`).
  auto at = [&](ArrayRef<ArgHandle> s) {
    return kb.add(kb.add(kb.mul(item, arg(s[0])), kb.mul(token, arg(s[1]))),
                  kb.mul(head, arg(s[2])));
  };
  Value partialBase = at(ArrayRef(partialStrides).drop_front());
  Value lsePartialBase = at(ArrayRef(lsePartialStrides).drop_front());
  Value outBase = at(oStrides), lseOut = at(lseStrides);
  attn::CombineRow row;
  row.partials = arg(partials);
  row.lsePartials = arg(lsePartials);
  row.numSplits = arg(splits);
  row.partialRow = [&](Value s) { return kb.add(partialBase, kb.mul(s, arg(partialStrides[0]))); };
  row.lseAt = [&](Value s) { return kb.add(lsePartialBase, kb.mul(s, arg(lsePartialStrides[0]))); };
  row.storeOutput = [&](Value col, Value value) {
    memref::StoreOp::create(b, op.getLoc(), kb.convert(value, out), arg(o),
                            ValueRange{kb.add(outBase, col)});
  };
  row.storeLse = [&](Value value) {
    memref::StoreOp::create(b, op.getLoc(), value, arg(lse), ValueRange{lseOut});
  };
  attn::emitCombine(kb, func, op.getHeadDim(), row);
  return func;
}

} // namespace tessera

// The mask rules as key and query intervals and tile ranges, and the sequence lengths of a batch
// item (Attention/Visibility.h).
#include "tessera/Codegen/Attention/Visibility.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <map>

using namespace mlir;

namespace tessera::attn {

Visibility::Visibility(const MaskSpec &spec, KernelBuilder &kb, Value seqQ, Value seqK,
                       Value windowLeft, Value windowRight, Value chunk)
    : spec(spec), kb(kb), seqQ(seqQ), seqK(seqK), windowLeft(windowLeft),
      windowRight(windowRight), chunk(chunk) {
  diagOffset = spec.mask == tessera::MaskKind::CausalTopLeft ? kb.idx(0) : kb.sub(seqK, seqQ);
}

Value Visibility::chunkOn() { return kb.cmpLt(kb.idx(0), chunk); }

std::pair<Value, Value> Visibility::chunkOf(Value pos) {
  Value size = kb.maxsi(chunk, kb.idx(1)); // no division by a chunk of 0 (off)
  Value first = kb.mul(
      arith::FloorDivSIOp::create(kb.builder(), kb.location(), pos, size).getResult(), size);
  return {first, kb.sub(kb.add(first, size), kb.idx(1))};
}

std::pair<Value, Value> Visibility::keyInterval(Value query) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto minsi = [&](Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); };
  auto maxsi = [&](Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); };
  Value first = kb.idx(0), last = kb.sub(seqK, kb.idx(1));
  Value diag = kb.add(query, diagOffset);
  if (spec.causal()) last = minsi(last, diag);
  if (spec.slidingWindow) {
    Value zero = kb.idx(0);
    Value leftOn = kb.cmpLe(zero, windowLeft), rightOn = kb.cmpLe(zero, windowRight);
    first = arith::SelectOp::create(b, loc, leftOn, maxsi(first, kb.sub(diag, windowLeft)), first);
    last = arith::SelectOp::create(b, loc, rightOn, minsi(last, kb.add(diag, windowRight)), last);
  }
  if (chunk) {
    auto [chunkFirst, chunkLast] = chunkOf(diag);
    Value on = chunkOn();
    first = kb.select(on, maxsi(first, chunkFirst), first);
    last = kb.select(on, minsi(last, chunkLast), last);
  }
  return {first, last};
}

std::pair<Value, Value> Visibility::queryInterval(Value key) {
  // The key interval's bounds solved for the query: j <= i + off (causal), j <= i + off + right
  // and j >= i + off - left (window), within [0, Sq) and only for a key below Sk.
  Value first = kb.idx(0), last = kb.sub(seqQ, kb.idx(1));
  Value onDiagonal = kb.sub(key, diagOffset);
  if (spec.causal()) first = kb.maxsi(first, onDiagonal);
  if (spec.slidingWindow) {
    Value zero = kb.idx(0);
    Value leftOn = kb.cmpLe(zero, windowLeft), rightOn = kb.cmpLe(zero, windowRight);
    first = kb.select(rightOn, kb.maxsi(first, kb.sub(onDiagonal, windowRight)), first);
    last = kb.select(leftOn, kb.minsi(last, kb.add(onDiagonal, windowLeft)), last);
  }
  if (chunk) { // i + off in the key's chunk
    auto [chunkFirst, chunkLast] = chunkOf(key);
    Value on = chunkOn();
    first = kb.select(on, kb.maxsi(first, kb.sub(chunkFirst, diagOffset)), first);
    last = kb.select(on, kb.minsi(last, kb.sub(chunkLast, diagOffset)), last);
  }
  last = kb.select(kb.cmpLt(key, seqK), last, kb.idx(-1));
  return {first, last};
}

Value Visibility::visible(Value query, Value key) {
  auto [first, last] = keyInterval(query);
  return kb.andb(kb.cmpLe(first, key), kb.cmpLe(key, last));
}

/// Relative bounds as i32, clamped to +-kFar.
constexpr int64_t kFar = int64_t(1) << 20;
static Value narrowBound(KernelBuilder &kb, Value v) {
  v = kb.minsi(kb.maxsi(v, kb.idx(-kFar)), kb.idx(kFar));
  OpBuilder &b = kb.builder();
  return arith::IndexCastOp::create(b, kb.location(), b.getI32Type(), v).getResult();
}

Visibility::TileBounds Visibility::tileBounds(Value query0, Value key0) {
  auto narrow = [&](Value v) { return narrowBound(kb, v); };
  // keyInterval's bounds on the key minus the query, less the tile's key0 - query0.
  Value diag = kb.sub(diagOffset, kb.sub(key0, query0));
  Value lo, hi;
  if (spec.causal()) hi = diag;
  if (spec.slidingWindow) {
    // A window side of -1 is off: no bound from it.
    Value zero = kb.idx(0), right = kb.add(diag, windowRight);
    Value withRight = hi ? kb.minsi(hi, right) : right;
    hi = kb.select(kb.cmpLe(zero, windowRight), withRight, hi ? hi : kb.idx(kFar));
    lo = kb.select(kb.cmpLe(zero, windowLeft), kb.sub(diag, windowLeft), kb.idx(-kFar));
  }
  return {lo ? narrow(lo) : Value(), hi ? narrow(hi) : Value(),
          narrow(kb.sub(kb.sub(seqK, kb.idx(1)), key0))};
}

std::pair<Value, Value> Visibility::chunkBounds(Value query, Value key0) {
  if (!chunk) return {};
  auto [first, last] = chunkOf(kb.add(query, diagOffset));
  Value on = chunkOn();
  return {narrowBound(kb, kb.select(on, kb.sub(first, key0), kb.idx(-kFar))),
          narrowBound(kb, kb.select(on, kb.sub(last, key0), kb.idx(kFar)))};
}

TileRange Visibility::keyTiles(Value q0, Value lastQuery, int blockN) {
  // From the first query's first key to the last query's last (intervals only move right).
  Value lo = kb.floorDivsi(keyInterval(q0).first, blockN);
  Value hi = kb.ceilDivsi(kb.add(keyInterval(lastQuery).second, 1), blockN);
  return {lo, kb.maxsi(hi, lo)}; // empty when nothing is visible
}

TileRange Visibility::unmaskedKeyTiles(Value q0, Value lastQuery, int blockN) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  // Tile n is whole for every query when the last query's interval starts at or before it and
  // the first query's ends at or after it.
  Value start = keyInterval(lastQuery).first;    // >= 0
  Value end = kb.add(keyInterval(q0).second, 1); // one past the first query's last key
  Value lo = arith::CeilDivSIOp::create(b, loc, start, kb.idx(blockN));
  Value hi = arith::FloorDivSIOp::create(b, loc, end, kb.idx(blockN));
  return {lo, hi};
}

TileRange Visibility::queryTiles(Value k0, Value lastKey, int blockM) {
  // The first key's queries start the range and the last valid key's end it.
  Value lastValid = kb.minsi(lastKey, kb.sub(seqK, kb.idx(1)));
  Value first = queryInterval(k0).first;
  Value last = queryInterval(lastValid).second;
  Value lo = kb.floorDivsi(first, blockM);
  Value hi = kb.ceilDivsi(kb.add(last, 1), blockM);
  hi = kb.select(kb.cmpLt(k0, seqK), hi, lo);
  return {lo, kb.maxsi(hi, lo)};
}

TileRange Visibility::unmaskedQueryTiles(Value k0, Value lastKey, int blockM) {
  // Query i sees all of [k0, lastKey] when its interval starts at or before k0 and ends at or
  // after lastKey: i from lastKey's first query to k0's last one.
  Value start = queryInterval(lastKey).first;
  Value end = kb.add(queryInterval(k0).second, 1);
  Value lo = kb.ceilDivsi(start, blockM);
  Value hi = kb.floorDivsi(end, blockM);
  // A key block reaching past Sk is masked throughout.
  return {lo, kb.select(kb.cmpLt(lastKey, seqK), hi, lo)};
}

Value maskScores(KernelBuilder &kb, Visibility &visibility, const AccView &view, Value lane,
                 Value scores, Value query0, Value key0, Value needMask,
                 llvm::function_ref<Value(Value)> queryOf, int queryOffset, int keyOffset) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  OpBuilder::InsertionGuard g(b);
  scf::IfOp masked;
  if (needMask) {
    masked = scf::IfOp::create(b, loc, TypeRange{scores.getType()}, needMask, true);
    b.setInsertionPointToStart(masked.thenBlock());
  }
  auto [laneQuery, laneKey] = view.laneOffsets(kb, lane);
  Value negInf = kb.f32(-INFINITY), out = scores;
  auto setInvisible = [&](const AccElement &el, Value ok) {
    Value x = vector::ExtractOp::create(b, loc, out, el.reg);
    out = vector::InsertOp::create(b, loc, kb.select(ok, x, negInf), out, el.reg);
  };
  if (queryOf) {
    // Rows are not queries: each element's query from its row.
    Value firstQuery = kb.add(query0, laneQuery), firstKey = kb.add(key0, laneKey);
    for (const AccElement &el : view.elements())
      setInvisible(el, visibility.visible(queryOf(kb.add(firstQuery, queryOffset + el.query)),
                                          kb.add(firstKey, keyOffset + el.inner)));
  } else {
    Visibility::TileBounds bounds = visibility.tileBounds(query0, key0);
    Type i32 = b.getI32Type();
    auto narrow = [&](Value v) { return arith::IndexCastOp::create(b, loc, i32, v).getResult(); };
    auto plus = [&](Value v, int64_t c) {
      return c ? arith::AddIOp::create(b, loc, v, arith::ConstantIntOp::create(b, loc, i32, c))
                     .getResult()
               : v;
    };
    // keyInterval's form, per row: the key at most min(row + hi, lastKey), at least row + lo.
    // (Tested as kl - ql against the bounds instead, the sequence end's test alone is
    // loop-invariant in the main kernel; hoisted, its lane masks cost gfx950 SGPR spills.)
    Value key = narrow(laneKey), query = narrow(laneQuery);
    // A chunk's bounds per query (a division each): once per distinct query of the lane.
    std::map<int, std::pair<Value, Value>> chunkOfRow;
    for (const AccElement &el : view.elements()) {
      Value row = plus(query, queryOffset + el.query);
      Value last = bounds.lastKey;
      if (bounds.hi) last = kb.minsi(kb.add(row, bounds.hi), last);
      Value k = plus(key, keyOffset + el.inner);
      Value ok = kb.cmpLe(k, last);
      if (bounds.lo) ok = kb.andb(ok, kb.cmpLe(kb.add(row, bounds.lo), k));
      auto [it, added] = chunkOfRow.try_emplace(queryOffset + el.query);
      if (added)
        it->second = visibility.chunkBounds(
            kb.add(kb.add(query0, laneQuery), queryOffset + el.query), key0);
      if (auto [lo, hi] = it->second; lo)
        ok = kb.andb(ok, kb.andb(kb.cmpLe(lo, k), kb.cmpLe(k, hi)));
      setInvisible(el, ok);
    }
  }
  if (!needMask) return out;
  scf::YieldOp::create(b, loc, out);
  b.setInsertionPointToStart(masked.elseBlock());
  scf::YieldOp::create(b, loc, scores);
  return masked.getResult(0);
}

namespace {
/// An index as f32 (exact below 2^24).
Value toF32(KernelBuilder &kb, Value index) {
  OpBuilder &b = kb.builder();
  return arith::SIToFPOp::create(
      b, kb.location(), b.getF32Type(),
      arith::IndexCastOp::create(b, kb.location(), b.getI32Type(), index).getResult());
}

/// scores - slopes * |distance| (distance = j - (i + off) per element; slopes one scalar,
/// negated before it is broadcast, or one per element).
Value alibiFma(KernelBuilder &kb, Visibility &visibility, Value scores, Value slopes,
               Value distance) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  // Causal: the visible keys have j <= i + off, so -|d| is d (the others are masked).
  if (!visibility.causal()) {
    // max(d, -d): math.absf would become a device-library call on NVVM.
    distance = kb.fmax(distance, arith::NegFOp::create(b, loc, distance));
    slopes = arith::NegFOp::create(b, loc, slopes);
  }
  if (!isa<VectorType>(slopes.getType()))
    slopes = vector::BroadcastOp::create(b, loc, scores.getType(), slopes);
  return math::FmaOp::create(b, loc, slopes, distance, scores);
}
} // namespace

Value addAlibiBias(KernelBuilder &kb, Visibility &visibility, const AccView &view, Value lane,
                   Value scores, Value query0, Value key0, Value slopeLog2, int queryOffset,
                   int keyOffset) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto type = cast<VectorType>(scores.getType());
  // j - (i + off) per element: the lane's at (query0, key0), as f32 (exact below 2^24), plus each
  // element's constant offset from it (the tile's offsets in the constant, not in the integer:
  // hoisted out of a loop, a per-tile integer would hold a register per tile).
  auto [laneQuery, laneKey] = view.laneOffsets(kb, lane);
  Value first = kb.sub(kb.add(key0, laneKey),
                       kb.add(kb.add(query0, laneQuery), visibility.diagonalOffset()));
  SmallVector<float> offsets(type.getNumElements());
  for (const AccElement &el : view.elements())
    offsets[el.reg] = float(keyOffset + el.inner - queryOffset - el.query);
  Value distance = kb.fadd(vector::BroadcastOp::create(b, loc, type, toF32(kb, first)),
                           arith::ConstantOp::create(b, loc, type,
                                                     DenseElementsAttr::get(type, ArrayRef(offsets))));
  return alibiFma(kb, visibility, scores, slopeLog2, distance);
}

AlibiRows alibiRows(KernelBuilder &kb, Visibility &visibility, const AccView &view, Value lane,
                    Type scoreType, Value row0, function_ref<Value(Value)> slopeOf,
                    function_ref<Value(Value)> queryOf) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value firstRow = kb.add(row0, view.laneOffsets(kb, lane).first);
  AlibiRows out{kb.zero(scoreType), kb.zero(scoreType)};
  std::map<int, std::pair<Value, Value>> perRow; // an element's row offset -> (slope, query + off)
  for (const AccElement &el : view.elements()) {
    auto [it, fresh] = perRow.try_emplace(el.query);
    if (fresh) {
      Value row = kb.add(firstRow, el.query);
      it->second = {slopeOf(row), toF32(kb, kb.add(queryOf(row), visibility.diagonalOffset()))};
    }
    out.slopes = vector::InsertOp::create(b, loc, it->second.first, out.slopes, el.reg);
    out.queries = vector::InsertOp::create(b, loc, it->second.second, out.queries, el.reg);
  }
  return out;
}

Value addAlibiBias(KernelBuilder &kb, Visibility &visibility, const AccView &view, Value lane,
                   Value scores, const AlibiRows &rows, Value key0) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto type = cast<VectorType>(scores.getType());
  SmallVector<float> inner(type.getNumElements());
  for (const AccElement &el : view.elements()) inner[el.reg] = float(el.inner);
  Value keys = kb.fadd(
      vector::BroadcastOp::create(b, loc, type,
                                  toF32(kb, kb.add(key0, view.laneOffsets(kb, lane).second))),
      arith::ConstantOp::create(b, loc, type, DenseElementsAttr::get(type, ArrayRef(inner))));
  return alibiFma(kb, visibility, scores, rows.slopes, kb.fsub(keys, rows.queries));
}

Value isEdgeTile(KernelBuilder &kb, Value tile, const TileRange &unmasked) {
  return arith::OrIOp::create(kb.builder(), kb.location(), kb.cmpLt(tile, unmasked.lo),
                              kb.cmpLe(unmasked.hi, tile));
}

TileRange splitTiles(KernelBuilder &kb, const TileRange &range, Value part, Value numParts) {
  Value count = kb.maxsi(kb.sub(range.hi, range.lo), kb.idx(0));
  Value perPart = kb.ceilDivsi(count, numParts);
  Value lo = kb.minsi(kb.add(range.lo, kb.mul(part, perPart)), range.hi);
  Value hi = kb.minsi(kb.add(lo, perPart), range.hi);
  return {lo, kb.maxsi(hi, lo)};
}

SeqInfo SeqInfo::dense(KernelBuilder &kb, Value sq, Value sk) {
  return {sq, sk, kb.idx(0), kb.idx(0), /*varlen=*/false};
}

SeqInfo SeqInfo::packed(KernelBuilder &kb, Value cuSeqlensQ, Value cuSeqlensK, Value batch,
                        Value seqUsedQ, Value seqUsedK) {
  SeqInfo s;
  s.varlen = true;
  Value next = kb.add(batch, 1);
  s.rowQ0 = kb.loadIndex(cuSeqlensQ, batch);
  s.rowK0 = kb.loadIndex(cuSeqlensK, batch);
  s.seqQ = seqUsedQ ? kb.loadIndex(seqUsedQ, batch)
                    : kb.sub(kb.loadIndex(cuSeqlensQ, next), s.rowQ0);
  s.seqK = seqUsedK ? kb.loadIndex(seqUsedK, batch)
                    : kb.sub(kb.loadIndex(cuSeqlensK, next), s.rowK0);
  return s;
}

} // namespace tessera::attn

// The flash_attn generator: FlashAttention-2 forward with online softmax on the matrix cores.
//
// Recipe: a workgroup owns tile.m queries of one (batch, head); each wave owns a slice of
// them. Q stays in LDS; per step of tile.n keys, K ([key][d]) and V ([d][key]) are staged in
// LDS, S = Q K^T runs on the matrix cores, scores are scaled (log2(e) folded in), capped and
// masked (edge tiles only), the online softmax rescales the running output, and P V
// accumulates. Orientation: where the accumulator layout of S^T = K Q^T hands P^T to the PV
// atom in registers, at most one shuffle away (MFMA, WMMA), the kernel computes transposed; where
// S = Q K^T does (mma.sync), it computes S; otherwise P goes through LDS. The plan is FlashAttnPlan's;
// visibility, sequence lengths, softmax and the ABI are the shared Attention/ pieces.
#include "tessera/Codegen/Attention/AccView.h"
#include "tessera/Codegen/Attention/Signature.h"
#include "tessera/Codegen/Attention/Softmax.h"
#include "tessera/Codegen/Attention/Visibility.h"
#include "tessera/Codegen/FlashAttnPlan.h"
#include "tessera/Codegen/Generators.h"
#include "tessera/Codegen/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <map>

using namespace mlir;

namespace tessera {
namespace {

using attn::AccView;
using attn::QueryAxis;
using CK = vector::CombiningKind;

/// The online-softmax state of one query tile: per-lane slot vectors of the running max and the
/// lane's partial row sum.
struct RowState {
  Value max, sum;
};

/// Emits the kernel body. Holds the values every step needs.
class AttnEmitter {
public:
  AttnEmitter(tessera::FlashAttnOp op, const AttnPlan &p, const TargetInfo &t, OpBuilder &b,
              gpu::GPUFuncOp func, const attn::FlashAttnArgs &args)
      : op(op), p(p), t(t), b(b), loc(op.getLoc()), kb(b, loc, t), func(func), args(args),
        elem(op.getDtype()), sView(p.qk->c, axis()),
        oView(p.pv->c, axis()), softmax(kb) {}

  void emit();

private:
  using Operand = KernelBuilder::Operand;
  QueryAxis axis() const { return p.transposed ? QueryAxis::Cols : QueryAxis::Rows; }
  Value arg(ArgHandle h) { return argValue(func, h); }
  Value fcmp(arith::CmpFPredicate pred, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, pred, x, y);
  }
  Value icmp(arith::CmpIPredicate pred, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, pred, x, y);
  }
  Value extract(Value v, int i) { return vector::ExtractOp::create(b, loc, v, i); }

  // Per-lane statistics slots: the distinct queries a lane holds in one S tile.
  int slotOf(int e) const;
  int slots() const;
  /// The slot of output accumulator element `e` (the same query in the same lane).
  int outputSlotOf(int e) const;
  /// Max (or sum) over keys of the S tiles of one query tile, within the lane, per slot.
  SmallVector<Value> reduceInLane(ArrayRef<Value> tiles, CK kind);
  /// ... and across the lanes holding the same queries.
  SmallVector<Value> reduceAcrossLanes(ArrayRef<Value> values, CK kind) {
    return kb.laneAllReduce(values, sView.queryLaneMasks(), kind);
  }
  /// `slotValues` (one per slot) gathered per element of an accumulator of `view`.
  Value perElement(ArrayRef<Value> slotValues, bool outputs);

  /// Block coordinates, sequence, tensor bases, visibility and scales.
  void setUp();
  /// K and V tiles starting at key n0, loaded into registers (rows past Sk read as zero and are
  /// never loaded), and their stores into LDS.
  SmallVector<Value> loadKV(Value n0);
  void storeKV(ArrayRef<Value> regs);
  /// S (or S^T) of query tile `qt` against the staged keys: one accumulator per key tile.
  SmallVector<Value> computeScores(Value ldsQueryRow);
  /// Scaled, capped, and masked on edge tiles (`needMask`).
  SmallVector<Value> scoreTiles(SmallVector<Value> s, Value needMask, Value queryBase, Value n0);
  /// One online-softmax step of a query tile: the new state, the probabilities, the rescale
  /// factor per slot.
  RowState softmaxStep(ArrayRef<Value> s, RowState old, SmallVector<Value> &probs,
                       SmallVector<Value> &alpha);
  /// O (this query tile's head tiles) += P V.
  void accumulatePV(MutableArrayRef<Value> o, ArrayRef<Value> probs, Value ldsQueryRow);
  Value pOperand(ArrayRef<Value> pTiles, int kstep);
  /// O / l of query tile `qt` (0 for rows that saw nothing), and the LSE; `oLane` is
  /// oView's lane offsets.
  void storeOutputs(ArrayRef<Value> o, RowState state, int qt, std::pair<Value, Value> oLane);
  void storeLse(RowState state, ArrayRef<Value> rowSums, Value queryBase);

  tessera::FlashAttnOp op;
  const AttnPlan &p;
  const TargetInfo &t;
  OpBuilder &b;
  Location loc;
  KernelBuilder kb;
  gpu::GPUFuncOp func;
  const attn::FlashAttnArgs &args;
  Type elem;
  AccView sView, oView;
  attn::OnlineSoftmax softmax;
  // Per-call values.
  LdsTile ldsQ, ldsK, ldsV, ldsP;
  bool vNatural = false; ///< V staged [key][d], read by transposing matrix loads
  int threads = 0;
  Value lane, q0, waveQ0, head, batch, kvHead, d;
  attn::SeqInfo seq;
  attn::Tensor q, k, v, o;
  Value qBase, kBase, vBase, oBase, alignedK, alignedV;
  std::optional<attn::Visibility> visibility;
  Value scaleLog2, cap;
  size_t kvSplit = 0; ///< K vectors before V vectors in a prefetched register tile
};

int AttnEmitter::slotOf(int e) const {
  int slot = 0, bit = 0;
  for (size_t r = 0; r < p.qk->c.regBases.size(); ++r)
    if (sView.regBitMovesQuery(r)) slot |= ((e >> r) & 1) << bit++;
  return slot;
}

int AttnEmitter::outputSlotOf(int e) const {
  int query = oView.elements()[e].query;
  for (const attn::AccElement &s : sView.elements())
    if (s.query == query) return slotOf(s.reg);
  llvm_unreachable("sameQueryLanes() guarantees a slot");
}

int AttnEmitter::slots() const {
  int n = 1;
  for (size_t r = 0; r < p.qk->c.regBases.size(); ++r)
    if (sView.regBitMovesQuery(r)) n *= 2;
  return n;
}

SmallVector<Value> AttnEmitter::reduceInLane(ArrayRef<Value> tiles, CK kind) {
  SmallVector<Value> out(slots());
  for (Value tile : tiles)
    for (const attn::AccElement &el : sView.elements()) {
      Value x = extract(tile, el.reg);
      Value &acc = out[slotOf(el.reg)];
      acc = !acc ? x : (kind == CK::MAXNUMF ? kb.fmax(acc, x) : kb.fadd(acc, x));
    }
  return out;
}

Value AttnEmitter::perElement(ArrayRef<Value> slotValues, bool outputs) {
  auto slotType = VectorType::get({int64_t(slotValues.size())}, b.getF32Type());
  SmallVector<int64_t> slotIdx;
  for (const attn::AccElement &el : (outputs ? oView : sView).elements())
    slotIdx.push_back(outputs ? outputSlotOf(el.reg) : slotOf(el.reg));
  Value vec = vector::FromElementsOp::create(b, loc, slotType, slotValues);
  return vector::ShuffleOp::create(b, loc, vec, vec, slotIdx);
}

/// The P operand of one PV k-step, assembled from the probabilities of the S tiles.
Value AttnEmitter::pOperand(ArrayRef<Value> pTiles, int kstep) {
  auto laneBitSet = [&](int bit) {
    return icmp(arith::CmpIPredicate::ne, kb.andi(lane, 1 << bit), kb.idx(0));
  };
  auto choose = [&](Value tile, const LaneChoice &c) -> Value {
    Value first = extract(tile, c.elem[0]);
    if (c.laneBit < 0 || c.elem[0] == c.elem[1]) return first;
    return kb.select(laneBitSet(c.laneBit), extract(tile, c.elem[1]), first);
  };
  // Shuffles are shared by the elements that need the same value from the partner.
  std::map<std::tuple<int, int, int, int, int>, Value> shuffled;
  SmallVector<Value> elems;
  for (const AccSource &src : p.conversion[kstep]) {
    Value tile = pTiles[src.keyTile];
    Value value = choose(tile, src.ownElem);
    if (src.xorMask) {
      const LaneChoice &c = src.sendElem;
      Value &fromPartner =
          shuffled[{src.keyTile, src.xorMask, c.laneBit, c.elem[0], c.elem[1]}];
      if (!fromPartner)
        fromPartner = gpu::ShuffleOp::create(b, loc, choose(tile, c), src.xorMask, t.waveSize,
                                             gpu::ShuffleMode::XOR)
                          .getShuffleResult();
      const LaneChoice &own = src.own;
      if (own.laneBit < 0)
        value = own.elem[0] ? value : fromPartner;
      else
        value = kb.select(laneBitSet(own.laneBit), own.elem[1] ? value : fromPartner,
                          own.elem[0] ? value : fromPartner);
    }
    elems.push_back(kb.convert(value, elem));
  }
  auto type = VectorType::get({int64_t(elems.size())}, elem);
  return vector::FromElementsOp::create(b, loc, type, elems);
}

void AttnEmitter::setUp() {
  const bool varlen = op.getVarlen();
  ldsQ = kb.allocLds(func, elem, p.blockM, p.headDim);
  ldsK = kb.allocLds(func, elem, p.blockN, p.headDim);
  // V as P V's operand with K = keys: staged [key][d] where transposing matrix loads read it
  // (ldmatrix.trans), else transposed into [d][key] while staging.
  vNatural = !p.transposed && kb.hasTransposedLoads(*p.pv);
  ldsV = vNatural ? kb.allocLds(func, elem, p.blockN, p.headDim)
                  : kb.allocLds(func, elem, p.headDim, p.blockN);
  if (!p.pInRegisters()) ldsP = kb.allocLds(func, elem, p.blockM, p.blockN);
  b.setInsertionPoint(func.getBody().front().getTerminator());
  threads = p.waves * t.waveSize;

  Value qBlock = kb.blockId(gpu::Dimension::x);
  head = kb.blockId(gpu::Dimension::y);
  batch = kb.blockId(gpu::Dimension::z);
  q0 = kb.mul(qBlock, p.blockM);
  lane = kb.laneId();
  waveQ0 = kb.mul(kb.waveId(), p.waveQueries());
  // GQA / MQA: query heads [g * Hq/Hkv, (g + 1) * Hq/Hkv) read KV head g.
  kvHead = arith::DivUIOp::create(
      b, loc, head, arith::DivUIOp::create(b, loc, arg(args.headsQ), arg(args.headsKv)));

  seq = attn::seqInfo(kb, func, args, varlen, batch);
  q = attn::Tensor::bind(func, args.q), k = attn::Tensor::bind(func, args.k);
  v = attn::Tensor::bind(func, args.v), o = attn::Tensor::bind(func, args.o);
  qBase = q.base(kb, seq, batch, seq.rowQ0, head);
  kBase = k.base(kb, seq, batch, seq.rowK0, kvHead);
  vBase = v.base(kb, seq, batch, seq.rowK0, kvHead);
  oBase = o.base(kb, seq, batch, seq.rowQ0, head);
  attn::MaskSpec spec = attn::MaskSpec::of(op);
  if (spec.slidingWindow)
    visibility.emplace(spec, kb, seq.seqQ, seq.seqK, arg(args.windowLeft), arg(args.windowRight));
  else
    visibility.emplace(spec, kb, seq.seqQ, seq.seqK);
  scaleLog2 = kb.fmul(arg(args.scale), kb.f32(M_LOG2E));
  cap = op.getSoftcap() ? arg(args.softcap) : Value();
}

SmallVector<Value> AttnEmitter::loadKV(Value n0) {
  Value rowsLeft = kb.sub(seq.seqK, n0);
  SmallVector<Value> regs = kb.loadGlobalTile(
      {k.ptr, kb.add(kBase, kb.mul(n0, k.strideS)), k.strideS, rowsLeft, d, alignedK}, p.blockN,
      p.headDim, threads);
  kvSplit = regs.size();
  regs.append(kb.loadGlobalTile(
      {v.ptr, kb.add(vBase, kb.mul(n0, v.strideS)), v.strideS, rowsLeft, d, alignedV}, p.blockN,
      p.headDim, threads));
  return regs;
}

void AttnEmitter::storeKV(ArrayRef<Value> regs) {
  kb.storeLdsTile(regs.take_front(kvSplit), ldsK, p.blockN, p.headDim, /*transpose=*/false,
                  threads);
  kb.storeLdsTile(regs.drop_front(kvSplit), ldsV, p.blockN, p.headDim,
                  /*transpose=*/!vNatural, threads);
}

SmallVector<Value> AttnEmitter::computeScores(Value ldsQueryRow) {
  const MMAAtom &qk = *p.qk;
  SmallVector<Value> s(p.keyTiles(), kb.zero(kb.accType(qk)));
  for (int kk = 0; kk < p.headDim; kk += qk.k) {
    if (p.tightRegisters) kb.memoryScheduleFence();
    for (int kt = 0; kt < p.keyTiles(); ++kt) {
      Value keyRow = kb.idx(kt * p.keyDim());
      if (p.transposed) {
        Value kFrag = kb.loadOperand(ldsK, qk, Operand::A, lane, keyRow, kk);
        Value qFrag = kb.loadOperand(ldsQ, qk, Operand::B, lane, ldsQueryRow, kk);
        s[kt] = kb.mma(qk, kFrag, qFrag, s[kt]);
      } else {
        Value qFrag = kb.loadOperand(ldsQ, qk, Operand::A, lane, ldsQueryRow, kk);
        Value kFrag = kb.loadOperand(ldsK, qk, Operand::B, lane, keyRow, kk);
        s[kt] = kb.mma(qk, qFrag, kFrag, s[kt]);
      }
    }
  }
  return s;
}

SmallVector<Value> AttnEmitter::scoreTiles(SmallVector<Value> s, Value needMask, Value queryBase,
                                           Value n0) {
  for (int kt = 0; kt < p.keyTiles(); ++kt) {
    Value sc = attn::scaledScores(kb, s[kt], scaleLog2, cap);
    s[kt] = attn::maskScores(kb, *visibility, sView, lane, sc, queryBase,
                             kb.add(n0, kt * p.keyDim()), needMask);
  }
  return s;
}

RowState AttnEmitter::softmaxStep(ArrayRef<Value> s, RowState old, SmallVector<Value> &probs,
                                  SmallVector<Value> &alpha) {
  const int nSlots = slots();
  auto slotType = VectorType::get({nSlots}, b.getF32Type());
  SmallVector<Value> rowMax = reduceAcrossLanes(reduceInLane(s, CK::MAXNUMF), CK::MAXNUMF);
  SmallVector<Value> mNew, shift;
  alpha.clear();
  for (int sl = 0; sl < nSlots; ++sl) {
    Value m = kb.fmax(extract(old.max, sl), rowMax[sl]);
    Value use = softmax.shiftFor(m);
    mNew.push_back(m);
    shift.push_back(use);
    alpha.push_back(softmax.exp2Shifted(extract(old.max, sl), use));
  }
  probs.clear();
  for (int kt = 0; kt < p.keyTiles(); ++kt)
    probs.push_back(softmax.exp2Shifted(s[kt], perElement(shift, /*outputs=*/false)));
  SmallVector<Value> rowSum = reduceInLane(probs, CK::ADD);
  SmallVector<Value> lNew;
  for (int sl = 0; sl < nSlots; ++sl)
    lNew.push_back(softmax.nextSum(extract(old.sum, sl), alpha[sl], rowSum[sl]));
  return {vector::FromElementsOp::create(b, loc, slotType, mNew),
          vector::FromElementsOp::create(b, loc, slotType, lNew)};
}

void AttnEmitter::accumulatePV(MutableArrayRef<Value> out, ArrayRef<Value> probs,
                               Value ldsQueryRow) {
  const MMAAtom &pv = *p.pv;
  if (!p.pInRegisters()) {
    // P through this wave's rows of the LDS P tile ([query][key]).
    auto [laneQuery, laneKey] = sView.laneOffsets(kb, lane);
    for (int kt = 0; kt < p.keyTiles(); ++kt)
      for (const attn::AccElement &el : sView.elements()) {
        Value row = kb.add(kb.add(ldsQueryRow, laneQuery), el.query);
        Value col = kb.add(laneKey, kt * p.keyDim() + el.inner);
        memref::StoreOp::create(b, loc, kb.convert(extract(probs[kt], el.reg), elem), ldsP.memref,
                                ValueRange{kb.ldsOffset(ldsP, row, col)});
      }
    kb.barrier();
  }
  for (int ks = 0; ks < p.blockN / pv.k; ++ks) {
    Value pFrag = p.pInRegisters() ? pOperand(probs, ks)
                                   : kb.loadFragment(ldsP, p.pOperandLayout(), p.transposed, lane,
                                                     ldsQueryRow, ks * pv.k);
    for (int ht = 0; ht < p.headTiles(); ++ht) {
      if (p.tightRegisters) kb.memoryScheduleFence();
      Value &acc = out[ht];
      if (p.transposed) {
        Value vFrag = kb.loadOperand(ldsV, pv, Operand::A, lane, kb.idx(ht * pv.m), ks * pv.k);
        acc = kb.mma(pv, vFrag, pFrag, acc);
      } else {
        Value vFrag = kb.loadOperand(ldsV, pv, Operand::B, lane, kb.idx(ht * pv.n), ks * pv.k,
                                     /*kAlongRows=*/vNatural);
        acc = kb.mma(pv, pFrag, vFrag, acc);
      }
    }
  }
}

void AttnEmitter::storeOutputs(ArrayRef<Value> out, RowState state, int qt,
                               std::pair<Value, Value> oLane) {
  SmallVector<Value> lPart;
  for (int sl = 0; sl < slots(); ++sl) lPart.push_back(extract(state.sum, sl));
  SmallVector<Value> l = reduceAcrossLanes(lPart, CK::ADD);
  SmallVector<Value> inv;
  for (Value sum : l) inv.push_back(softmax.inverseSum(sum));
  Value queryBase = kb.add(kb.add(q0, waveQ0), qt * p.queryDim());
  auto [laneQuery, laneD] = oLane;
  const int headTile = p.transposed ? p.pv->m : p.pv->n;
  for (int ht = 0; ht < p.headTiles(); ++ht)
    for (const attn::AccElement &el : oView.elements()) {
      Value query = kb.add(kb.add(queryBase, laneQuery), el.query);
      Value col = kb.add(laneD, ht * headTile + el.inner);
      auto inRange = scf::IfOp::create(b, loc, kb.cmpLt(query, seq.seqQ), false);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(inRange.thenBlock());
      Value x = kb.convert(kb.fmul(extract(out[ht], el.reg), inv[outputSlotOf(el.reg)]), elem);
      Value addr = kb.add(oBase, kb.add(kb.mul(query, o.strideS), col));
      memref::StoreOp::create(b, loc, x, o.ptr, ValueRange{addr});
    }
  if (op.getReturnLse()) storeLse(state, l, queryBase);
}

void AttnEmitter::storeLse(RowState state, ArrayRef<Value> l, Value queryBase) {
  // One writer per query: the lanes whose non-query lane bits are zero.
  Value laneQuery = sView.laneOffsets(kb, lane).first;
  Value writer = icmp(arith::CmpIPredicate::eq, kb.andi(lane, sView.nonQueryLaneBits()), kb.idx(0));
  Value lseBase = kb.mul(head, arg(args.lseStrideH));
  lseBase = seq.varlen ? kb.add(lseBase, seq.rowQ0)
                       : kb.add(lseBase, kb.mul(batch, arg(args.lseStrideB)));
  for (const attn::AccElement &el : sView.elements()) {
    if (el.inner != 0) continue; // one element per slot
    int sl = slotOf(el.reg);
    Value value = softmax.logSumExp(extract(state.max, sl), l[sl]);
    Value query = kb.add(kb.add(queryBase, laneQuery), el.query);
    auto write = scf::IfOp::create(b, loc, kb.andb(writer, kb.cmpLt(query, seq.seqQ)), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(write.thenBlock());
    memref::StoreOp::create(b, loc, value, arg(args.lse), ValueRange{kb.add(lseBase, query)});
  }
}

void AttnEmitter::emit() {
  setUp();
  // Varlen items shorter than this block have nothing to do (uniform).
  auto active = scf::IfOp::create(b, loc, kb.cmpLt(q0, seq.seqQ), /*withElse=*/false);
  b.setInsertionPointToStart(active.thenBlock());

  // Q tile, staged once.
  const int elemBits = elem.getIntOrFloatBitWidth();
  d = kb.idx(p.headDim);
  kb.copyGlobalToLds({q.ptr, kb.add(qBase, kb.mul(q0, q.strideS)), q.strideS,
                      kb.sub(seq.seqQ, q0), d, q.stridesAligned16(kb, elemBits)},
                     ldsQ, p.blockM, p.headDim, /*transpose=*/false, threads);

  // The key tiles this query block can see, and those that need no mask.
  Value lastQuery = kb.add(q0, p.blockM - 1);
  attn::TileRange tiles = visibility->keyTiles(q0, lastQuery, p.blockN);
  attn::TileRange whole = visibility->unmaskedKeyTiles(q0, lastQuery, p.blockN);

  // Loop-carried state: S-slot statistics (max, partial sum) per query tile, O accumulators.
  const int nSlots = slots(), qTiles = p.queryTiles(), hTiles = p.headTiles();
  auto slotType = VectorType::get({nSlots}, b.getF32Type());
  SmallVector<Value> init;
  for (int i = 0; i < qTiles; ++i) {
    init.push_back(arith::ConstantOp::create(
        b, loc, slotType, DenseElementsAttr::get(slotType, b.getF32FloatAttr(-INFINITY))));
    init.push_back(kb.zero(slotType));
  }
  for (int i = 0; i < qTiles * hTiles; ++i) init.push_back(kb.zero(kb.accType(*p.pv)));

  alignedK = k.stridesAligned16(kb, elemBits), alignedV = v.stridesAligned16(kb, elemBits);
  // With two stages the next tile's global loads are in flight while this one computes.
  const size_t stateCount = init.size();
  if (p.stages > 1) init.append(loadKV(kb.mul(tiles.lo, p.blockN)));
  auto loop = scf::ForOp::create(b, loc, tiles.lo, tiles.hi, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value tile = loop.getInductionVar();
    Value n0 = kb.mul(tile, p.blockN);
    kb.barrier(); // previous step's K/V/P reads are done
    SmallVector<Value> prefetched;
    if (p.stages > 1) {
      storeKV(SmallVector<Value>(loop.getRegionIterArgs().drop_front(stateCount)));
      kb.barrier();
      prefetched = loadKV(kb.add(n0, p.blockN));
    } else {
      storeKV(loadKV(n0));
      kb.barrier();
    }
    Value needMask = attn::isEdgeTile(kb, tile, whole); // uniform

    auto iter = loop.getRegionIterArgs().take_front(stateCount);
    SmallVector<Value> next;
    SmallVector<Value> oNext(iter.begin() + 2 * qTiles, iter.end());
    for (int qt = 0; qt < qTiles; ++qt) {
      Value queryBase = kb.add(kb.add(q0, waveQ0), qt * p.queryDim());
      Value ldsQueryRow = kb.add(waveQ0, qt * p.queryDim());
      SmallVector<Value> s = scoreTiles(computeScores(ldsQueryRow), needMask, queryBase, n0);
      SmallVector<Value> probs, alpha;
      RowState state = softmaxStep(s, {iter[2 * qt], iter[2 * qt + 1]}, probs, alpha);
      next.push_back(state.max);
      next.push_back(state.sum);
      // Rescale this query tile's output accumulators: element -> its query's slot.
      Value alphaO = perElement(alpha, /*outputs=*/true);
      MutableArrayRef<Value> outs(oNext.data() + qt * hTiles, hTiles);
      for (Value &acc : outs) acc = kb.fmul(acc, alphaO);
      accumulatePV(outs, probs, ldsQueryRow);
    }
    next.append(oNext.begin(), oNext.end());
    next.append(prefetched);
    scf::YieldOp::create(b, loc, next);
  }

  // Epilogue: total row sums, O / l (0 for rows that saw nothing), LSE.
  auto results = loop.getResults();
  std::pair<Value, Value> oLane = oView.laneOffsets(kb, lane);
  for (int qt = 0; qt < qTiles; ++qt) {
    SmallVector<Value> out(results.begin() + 2 * qTiles + qt * hTiles,
                           results.begin() + 2 * qTiles + (qt + 1) * hTiles);
    storeOutputs(out, {results[2 * qt], results[2 * qt + 1]}, qt, oLane);
  }
}

} // namespace

FailureOr<gpu::GPUFuncOp> generateFlashAttn(tessera::FlashAttnOp op, const TargetInfo &target) {
  // pack_gqa is a tiling choice; this kernel takes one query head per tile whatever it says
  // (the dispatcher records the fallback).
  AttnRequest request;
  request.headDim = int(op.getHeadDim());
  request.elem = *toElemType(op.getDtype());
  request.slidingWindow = op.getSlidingWindow();
  request.softcap = op.getSoftcap();
  if (auto tile = op.getTileAttr())
    request.tile = AttnRequest::Tile{int(tile.getM()), int(tile.getN()), int(tile.getWaves()),
                                     int(tile.getStages())};
  AttnPlanResult plan = planAttention(request, target);
  if (!plan.plan) return op.emitOpError() << plan.whyNot;
  OpBuilder b(op);
  attn::FlashAttnSignature sig =
      attn::flashAttnSignature(op, plan.plan->blockM, plan.plan->waves * target.waveSize);
  gpu::GPUFuncOp func = createKernel(b, op.getLoc(), target, sig.sig);
  AttnEmitter(op, *plan.plan, target, b, func, sig.args).emit();
  return func;
}

} // namespace tessera

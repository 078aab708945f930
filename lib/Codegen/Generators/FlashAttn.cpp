// The flash_attn generator: FlashAttention-2 forward with online softmax on the matrix cores.
//
// Recipe: a workgroup owns tile.m queries of one (batch, head); each wave owns a slice of
// them. Q stays in LDS; per step of tile.n keys, K ([key][d]) and V ([d][key]) are staged in
// LDS, S = Q K^T runs on the matrix cores, scores are scaled (log2(e) folded in), capped and
// masked (edge tiles only), the online softmax rescales the running output, and P V
// accumulates. Orientation: where the accumulator layout of S^T = K Q^T hands P^T to the PV
// atom without leaving registers (MFMA), the kernel computes transposed; where S = Q K^T does
// (mma.sync), it computes S; otherwise (WMMA) P goes through LDS.
#include "AttnCommon.h"
#include "tessera/Codegen/Generators.h"
#include "tessera/Codegen/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <map>

using namespace mlir;

namespace tessera {
namespace {

/// A per-lane choice of an accumulator element: `elem[bit]` where `bit` is lane bit `laneBit`
/// of the lane (laneBit < 0: `elem[0]` on every lane).
struct LaneChoice {
  int laneBit = -1;
  int elem[2] = {0, 0};
};

/// Where one element of the P operand comes from in the S accumulators of tile `keyTile`: on
/// lanes where `own` holds, the lane's own element `ownElem`; elsewhere (xorMask != 0) the
/// element `sendElem` of lane ^ xorMask, which every lane sends with one shuffle.
struct AccSource {
  int keyTile = 0;
  LaneChoice ownElem;
  int xorMask = 0;
  LaneChoice own;      ///< elem[] hold 1 (own) or 0 (from the partner)
  LaneChoice sendElem;
};

struct AttnPlan {
  const MMAAtom *qk = nullptr, *pv = nullptr;
  bool transposed = false;   ///< S^T = K Q^T: accumulator rows are keys, columns queries
  bool pInRegisters = false; ///< P reaches the PV atom in registers, at most one shuffle away
                             ///< (else through LDS)
  /// conversion[kstep][elem]: the source of each element of the P operand per PV k-step.
  std::vector<std::vector<AccSource>> conversion;
  int blockM = 0, blockN = 0, waves = 0, headDim = 0;
  bool tightRegisters = false; ///< accumulators near the budget: fence fragment loads per k-step
  int stages = 1;              ///< 2: the next K/V tile is loaded into registers during compute
  Type elem;

  int queryDim() const { return transposed ? qk->n : qk->m; }  // queries per S tile
  int keyDim() const { return transposed ? qk->m : qk->n; }    // keys per S tile
  int waveQueries() const { return blockM / waves; }
  int queryTiles() const { return waveQueries() / queryDim(); }
  int keyTiles() const { return blockN / keyDim(); }
  int headTiles() const { return headDim / (transposed ? pv->m : pv->n); }
  int pvKeyDim() const { return pv->k; }
  /// P needs cross-lane shuffles on its way to the PV atom.
  bool pShuffles() const {
    for (const auto &step : conversion)
      for (const AccSource &src : step)
        if (src.xorMask) return true;
    return false;
  }
};

// Query / key coordinates of an accumulator position in the chosen orientation.
int queryOf(const AttnPlan &p, Coord c) { return p.transposed ? c.col : c.row; }
int keyOf(const AttnPlan &p, Coord c) { return p.transposed ? c.row : c.col; }

/// The P operand layout of the PV atom: B = P^T (keys x queries) when transposed, else
/// A = P (queries x keys).
const OperandLayout &pOperandLayout(const AttnPlan &p) { return p.transposed ? p.pv->b : p.pv->a; }

/// A LaneChoice equal to `f` on every lane where f is defined (f[l] < 0: undefined), if one
/// lane bit (or none) decides it.
std::optional<LaneChoice> laneChoice(const std::vector<int> &f) {
  auto fits = [&](int bit, LaneChoice &c) {
    bool seen[2] = {false, false};
    for (size_t l = 0; l < f.size(); ++l) {
      if (f[l] < 0) continue;
      int side = bit < 0 ? 0 : (l >> bit) & 1;
      if (seen[side] && c.elem[side] != f[l]) return false;
      seen[side] = true, c.elem[side] = f[l];
    }
    return true;
  };
  for (int bit = -1; (1 << std::max(bit, 0)) < int(f.size()); ++bit) {
    LaneChoice c;
    c.laneBit = bit;
    if (fits(bit, c)) return c;
  }
  return std::nullopt;
}

/// Plans how every element of the P operand of each PV k-step is taken from the S
/// accumulators without LDS: from the same lane, or from one partner lane (a fixed XOR of the
/// lane id, one shuffle) with per-lane choices decided by single lane bits. Fails otherwise.
bool planRegisterConversion(AttnPlan &p) {
  const OperandLayout &op = pOperandLayout(p);
  const OperandLayout &acc = p.qk->c;
  int pvQueries = p.transposed ? p.pv->n : p.pv->m;
  if (pvQueries != p.queryDim() || p.blockN % p.pvKeyDim() || op.lanes() != acc.lanes())
    return false;
  // (query, key in tile) -> (lane, element) of the S accumulator.
  std::map<std::pair<int, int>, std::pair<int, int>> holder;
  for (int lane = 0; lane < acc.lanes(); ++lane)
    for (int e = 0; e < acc.elementsPerLane(); ++e) {
      Coord c = acc.at(lane, e);
      holder.emplace(std::pair{queryOf(p, c), keyOf(p, c)}, std::pair{lane, e});
    }
  p.conversion.clear();
  for (int ks = 0; ks < p.blockN / p.pvKeyDim(); ++ks) {
    std::vector<AccSource> sources;
    for (int e = 0; e < op.elementsPerLane(); ++e) {
      AccSource src;
      std::optional<int> tile;
      std::vector<int> ownElem(op.lanes(), -1), own(op.lanes(), 0), send(op.lanes(), -1);
      for (int lane = 0; lane < op.lanes(); ++lane) {
        Coord want = op.at(lane, e);
        int query = p.transposed ? want.col : want.row;
        int key = (p.transposed ? want.row : want.col) + ks * p.pvKeyDim();
        if (tile && *tile != key / p.keyDim()) return false;
        tile = key / p.keyDim();
        auto it = holder.find({query, key % p.keyDim()});
        if (it == holder.end()) return false;
        auto [srcLane, srcElem] = it->second;
        if (srcLane == lane) {
          ownElem[lane] = srcElem, own[lane] = 1;
          continue;
        }
        int mask = srcLane ^ lane;
        if (src.xorMask && src.xorMask != mask) return false;
        src.xorMask = mask;
        send[srcLane] = srcElem; // the partner sends what this lane needs
      }
      auto ownChoice = laneChoice(ownElem), ownPred = laneChoice(own),
           sendChoice = laneChoice(send);
      if (!ownChoice || !ownPred || !sendChoice) return false;
      src.keyTile = *tile, src.ownElem = *ownChoice, src.own = *ownPred;
      src.sendElem = *sendChoice;
      sources.push_back(src);
    }
    p.conversion.push_back(std::move(sources));
  }
  return true;
}

/// The output accumulators must hold, per lane, queries the S statistics hold (their slots).
bool sameQueryLanes(const AttnPlan &p) {
  const OperandLayout &s = p.qk->c, &o = p.pv->c;
  auto oQuery = [&](Coord c) { return p.transposed ? c.col : c.row; };
  for (size_t bit = 0; bit < s.laneBases.size(); ++bit)
    if (queryOf(p, s.laneBases[bit]) != oQuery(o.laneBases[bit])) return false;
  for (int e = 0; e < o.elementsPerLane(); ++e) {
    bool found = false;
    for (int e2 = 0; e2 < s.elementsPerLane(); ++e2)
      found |= queryOf(p, s.at(0, e2)) == oQuery(o.at(0, e));
    if (!found) return false;
  }
  return true;
}

/// LDS bytes of the staged tiles (Q, K, V^T, and P when it goes through LDS), with padding.
int ldsBytes(const AttnPlan &p, const TargetInfo &t) {
  int pad = t.ldsSwizzle == LdsSwizzle::Pad ? 8 : 0;
  int elems = p.blockM * (p.headDim + pad) + p.blockN * (p.headDim + pad) +
              p.headDim * (p.blockN + pad) + (p.pInRegisters ? 0 : p.blockM * (p.blockN + pad));
  return elems * 2;
}

FailureOr<AttnPlan> planAttention(tessera::FlashAttnOp op, const TargetInfo &target) {
  AttnPlan best;
  Type elem = op.getDtype();
  ElemType in = *toElemType(elem);
  std::vector<const MMAAtom *> atoms = chooseAtoms(target, in).atoms;
  auto tile = op.getTileAttr();
  // Preference: P in registers, then the target's atom order, then 4 waves and 64 keys.
  for (bool wantRegisters : {true, false})
    for (const MMAAtom *qk : atoms)
      for (const MMAAtom *pv : atoms)
        for (bool transposed : {true, false})
          for (int waves : {4, 2})
            for (int blockN : {64, 32, 16}) {
              AttnPlan p;
              p.qk = qk, p.pv = pv, p.transposed = transposed, p.elem = elem;
              p.headDim = op.getHeadDim();
              p.waves = tile ? tile.getWaves() : waves;
              p.blockN = tile ? tile.getN() : blockN;
              p.blockM = tile ? tile.getM() : p.waves * p.queryDim();
              int pvQueries = transposed ? pv->n : pv->m;
              if (pvQueries != p.queryDim() || p.blockM % p.waves ||
                  p.waveQueries() % p.queryDim() || p.blockN % p.keyDim() ||
                  p.blockN % pv->k || p.headDim % qk->k ||
                  p.headDim % (transposed ? pv->m : pv->n))
                continue;
              if (!sameQueryLanes(p)) continue;
              p.pInRegisters = planRegisterConversion(p);
              if (p.pInRegisters != wantRegisters) continue;
              if (ldsBytes(p, target) > target.ldsBytes) continue;
              // Keep the accumulators (O and S) within ~30% of the register file so the
              // unrolled fragment loads do not push the kernel into spills.
              // Keep the accumulators (O and S) within 40% of the register file (30% when P
              // goes through shuffles or LDS, which keep more values live) so the unrolled fragment
              // loads do not spill. On the H200, D 128 with 64 keys per step (235 registers, LSE only)
              // ran 1.17x faster than with 32 (bench/NOTES.md).
              int accRegs = p.waveQueries() * (p.headDim + p.blockN) / target.waveSize;
              // Window and softcap code keeps more values live: 5% less for each.
              int budgetPercent = (p.pInRegisters && !p.pShuffles() ? 40 : 30) -
                                  5 * op.getSlidingWindow() - 5 * op.getSoftcap();
              p.tightRegisters = accRegs * 100 > target.maxVgprsPerWave * budgetPercent;
              if (!tile && p.tightRegisters && p.blockN > 16) continue;
              // Register prefetch of the next K/V tile is opt-in (tile stages = 2): on the
              // H200 it cost registers and ran slower (0.69x at D 128, 64 keys per step).
              p.stages = tile ? tile.getStages() : 1;
              return p;
            }
  return op.emitOpError() << "no tile configuration of " << target.chip << " atoms fits head_dim "
                          << op.getHeadDim() << " in " << target.ldsBytes << " bytes of LDS"
                          << (tile ? " with the given tile" : "");
}

/// Emits the kernel body. Holds the values every step needs.
class AttnEmitter {
public:
  AttnEmitter(tessera::FlashAttnOp op, const AttnPlan &p, const TargetInfo &t, OpBuilder &b,
              gpu::GPUFuncOp func)
      : op(op), p(p), t(t), b(b), loc(op.getLoc()), kb(b, loc, t), func(func) {}

  void emit();

private:
  Value arg(StringRef name) { return kernelArgument(func, name); }
  Value exp2(Value x) { return math::Exp2Op::create(b, loc, x); }
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
  /// Reduces `values` (one per slot, per-lane partial) across the lanes sharing the queries.
  SmallVector<Value> reduceAcrossLanes(SmallVector<Value> values, bool isMax);
  /// Max (or sum) over keys of the S tiles of query tile `qt`, within the lane.
  SmallVector<Value> reduceInLane(ArrayRef<Value> tiles, bool isMax);

  Value maskTile(Value s, Value queryBase, Value keyBase);
  Value pOperand(ArrayRef<Value> pTiles, int kstep);

  tessera::FlashAttnOp op;
  const AttnPlan &p;
  const TargetInfo &t;
  OpBuilder &b;
  Location loc;
  KernelBuilder kb;
  gpu::GPUFuncOp func;
  // Per-call values.
  Value lane, seqQ, seqK;
  std::optional<AttnVisibility> visibility;
  size_t kvSplit = 0; ///< K vectors before V vectors in a prefetched register tile
};

int AttnEmitter::slotOf(int e) const {
  int slot = 0, bit = 0;
  for (size_t r = 0; r < p.qk->c.regBases.size(); ++r)
    if (queryOf(p, p.qk->c.regBases[r]) != 0) slot |= ((e >> r) & 1) << bit++;
  return slot;
}

int AttnEmitter::outputSlotOf(int e) const {
  Coord c = p.pv->c.at(0, e);
  int query = p.transposed ? c.col : c.row;
  for (int e2 = 0; e2 < p.qk->c.elementsPerLane(); ++e2)
    if (queryOf(p, p.qk->c.at(0, e2)) == query) return slotOf(e2);
  llvm_unreachable("sameQueryLanes() guarantees a slot");
}

int AttnEmitter::slots() const {
  int n = 1;
  for (const Coord &c : p.qk->c.regBases)
    if (queryOf(p, c) != 0) n *= 2;
  return n;
}

SmallVector<Value> AttnEmitter::reduceInLane(ArrayRef<Value> tiles, bool isMax) {
  SmallVector<Value> out(slots());
  for (Value tile : tiles)
    for (int e = 0; e < p.qk->c.elementsPerLane(); ++e) {
      Value x = extract(tile, e);
      Value &acc = out[slotOf(e)];
      acc = !acc ? x : (isMax ? kb.fmax(acc, x) : kb.fadd(acc, x));
    }
  return out;
}

SmallVector<Value> AttnEmitter::reduceAcrossLanes(SmallVector<Value> values, bool isMax) {
  const OperandLayout &c = p.qk->c;
  for (size_t bit = 0; bit < c.laneBases.size(); ++bit) {
    Coord base = c.laneBases[bit];
    if (keyOf(p, base) == 0 || queryOf(p, base) != 0) continue; // not a key-axis lane bit
    for (Value &v : values) {
      auto shuffled = gpu::ShuffleOp::create(b, loc, v, 1 << bit, t.waveSize, gpu::ShuffleMode::XOR);
      v = isMax ? kb.fmax(v, shuffled.getShuffleResult()) : kb.fadd(v, shuffled.getShuffleResult());
    }
  }
  return values;
}

Value AttnEmitter::maskTile(Value s, Value queryBase, Value keyBase) {
  auto [laneRow, laneCol] = kb.laneCoord(p.qk->c, lane);
  Value laneQuery = p.transposed ? laneCol : laneRow, laneKey = p.transposed ? laneRow : laneCol;
  Value q0 = kb.add(queryBase, laneQuery), k0 = kb.add(keyBase, laneKey);
  Value negInf = kb.f32(-INFINITY);
  for (int e = 0; e < p.qk->c.elementsPerLane(); ++e) {
    Coord c = p.qk->c.at(0, e);
    Value ok = visibility->visible(kb.add(q0, queryOf(p, c)), kb.add(k0, keyOf(p, c)));
    s = vector::InsertOp::create(b, loc, kb.select(ok, extract(s, e), negInf), s, e);
  }
  return s;
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
    elems.push_back(kb.convert(value, p.elem));
  }
  auto type = VectorType::get({int64_t(elems.size())}, p.elem);
  return vector::FromElementsOp::create(b, loc, type, elems);
}

void AttnEmitter::emit() {
  using Operand = KernelBuilder::Operand;
  const MMAAtom &qk = *p.qk, &pv = *p.pv;
  const bool varlen = op.getVarlen(), lse = op.getReturnLse();
  LdsTile ldsQ = kb.allocLds(func, p.elem, p.blockM, p.headDim);
  LdsTile ldsK = kb.allocLds(func, p.elem, p.blockN, p.headDim);
  // V as P V's operand with K = keys: staged [key][d] where transposing matrix loads read it
  // (ldmatrix.trans), else transposed into [d][key] while staging.
  const bool vNatural = !p.transposed && kb.hasTransposedLoads(pv);
  LdsTile ldsV = vNatural ? kb.allocLds(func, p.elem, p.blockN, p.headDim)
                          : kb.allocLds(func, p.elem, p.headDim, p.blockN);
  LdsTile ldsP;
  if (!p.pInRegisters) ldsP = kb.allocLds(func, p.elem, p.blockM, p.blockN);
  b.setInsertionPoint(func.getBody().front().getTerminator());
  const int threads = p.waves * t.waveSize;

  Value qBlock = kb.blockId(gpu::Dimension::x), head = kb.blockId(gpu::Dimension::y);
  Value batch = kb.blockId(gpu::Dimension::z);
  Value q0 = kb.mul(qBlock, p.blockM);
  lane = kb.laneId();
  Value waveQ0 = kb.mul(kb.waveId(), p.waveQueries());
  // GQA / MQA: query heads [g * Hq/Hkv, (g + 1) * Hq/Hkv) read KV head g.
  Value kvHead = arith::DivUIOp::create(b, loc, head,
                                        arith::DivUIOp::create(b, loc, arg("Hq"), arg("Hkv")));

  // Sequence extents and row bases of this batch item.
  Value rowQ0 = kb.idx(0), rowK0 = kb.idx(0);
  if (varlen) {
    Value next = kb.add(batch, 1);
    rowQ0 = kb.loadIndex(arg("cu_seqlens_q"), batch);
    rowK0 = kb.loadIndex(arg("cu_seqlens_k"), batch);
    seqQ = kb.sub(kb.loadIndex(arg("cu_seqlens_q"), next), rowQ0);
    seqK = kb.sub(kb.loadIndex(arg("cu_seqlens_k"), next), rowK0);
  } else {
    seqQ = arg("Sq");
    seqK = arg("Sk");
  }
  auto base = [&](StringRef t, Value rowStart, Value h) {
    Value bTerm = varlen ? kb.idx(0) : kb.mul(batch, arg((t + "_stride_b").str()));
    Value rowTerm = kb.mul(rowStart, arg((t + "_stride_s").str()));
    return kb.add(kb.add(bTerm, rowTerm), kb.mul(h, arg((t + "_stride_h").str())));
  };
  Value qBase = base("q", rowQ0, head), kBase = base("k", rowK0, kvHead);
  Value vBase = base("v", rowK0, kvHead), oBase = base("o", rowQ0, head);
  auto aligned = [&](StringRef t) {
    Value ok = arith::ConstantIntOp::create(b, loc, 1, 1);
    for (const char *d : {"b", "s", "h"}) {
      Value s = arg((t + "_stride_" + d).str());
      ok = kb.andb(ok, icmp(arith::CmpIPredicate::eq, kb.remui(s, 8), kb.idx(0)));
    }
    return ok;
  };
  if (op.getSlidingWindow())
    visibility.emplace(op, kb, seqQ, seqK, arg("window_left"), arg("window_right"));
  else
    visibility.emplace(op, kb, seqQ, seqK);
  Value scaleLog2 = kb.fmul(arg("scale"), kb.f32(M_LOG2E));
  Value cap = op.getSoftcap() ? arg("softcap") : Value();

  // Varlen items shorter than this block have nothing to do (uniform).
  auto active = scf::IfOp::create(b, loc, kb.cmpLt(q0, seqQ), /*withElse=*/false);
  b.setInsertionPointToStart(active.thenBlock());

  // Q tile, staged once.
  Value d = kb.idx(p.headDim);
  kb.copyGlobalToLds({arg("q"), kb.add(qBase, kb.mul(q0, arg("q_stride_s"))), arg("q_stride_s"),
                      kb.sub(seqQ, q0), d, aligned("q")},
                     ldsQ, p.blockM, p.headDim, /*transpose=*/false, threads);

  // The key tiles this query block can see: [lo, hi).
  Value lastQuery = kb.add(q0, p.blockM - 1);
  auto [tileLo, tileHi] = visibility->keyTileRange(q0, lastQuery, p.blockN);
  auto [wholeLo, wholeHi] = visibility->unmaskedTileRange(q0, lastQuery, p.blockN);

  // Loop-carried state: S-slot statistics (max, partial sum) per query tile, O accumulators.
  const int nSlots = slots(), qTiles = p.queryTiles(), hTiles = p.headTiles();
  auto slotType = VectorType::get({nSlots}, b.getF32Type());
  VectorType oType = kb.accType(pv);
  SmallVector<Value> init;
  for (int i = 0; i < qTiles; ++i) {
    init.push_back(arith::ConstantOp::create(
        b, loc, slotType, DenseElementsAttr::get(slotType, b.getF32FloatAttr(-INFINITY))));
    init.push_back(kb.zero(slotType));
  }
  for (int i = 0; i < qTiles * hTiles; ++i) init.push_back(kb.zero(oType));

  // K and V tiles starting at key n0, loaded into registers (rows past Sk read as zero and
  // are never loaded) and stored into LDS.
  Value alignedK = aligned("k"), alignedV = aligned("v");
  auto loadKV = [&](Value n0) {
    Value rowsLeft = kb.sub(seqK, n0);
    SmallVector<Value> regs = kb.loadGlobalTile(
        {arg("k"), kb.add(kBase, kb.mul(n0, arg("k_stride_s"))), arg("k_stride_s"), rowsLeft, d,
         alignedK},
        p.blockN, p.headDim, threads);
    kvSplit = regs.size();
    regs.append(kb.loadGlobalTile({arg("v"), kb.add(vBase, kb.mul(n0, arg("v_stride_s"))),
                                   arg("v_stride_s"), rowsLeft, d, alignedV},
                                  p.blockN, p.headDim, threads));
    return regs;
  };
  auto storeKV = [&](ArrayRef<Value> regs) {
    kb.storeLdsTile(regs.take_front(kvSplit), ldsK, p.blockN, p.headDim, /*transpose=*/false,
                    threads);
    kb.storeLdsTile(regs.drop_front(kvSplit), ldsV, p.blockN, p.headDim,
                    /*transpose=*/!vNatural, threads);
  };
  // With two stages the next tile's global loads are in flight while this one computes.
  const size_t stateCount = init.size();
  if (p.stages > 1) init.append(loadKV(kb.mul(tileLo, p.blockN)));
  auto loop = scf::ForOp::create(b, loc, tileLo, tileHi, kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value n0 = kb.mul(loop.getInductionVar(), p.blockN);
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

    // Does this tile cross a mask edge? (uniform)
    Value tile = loop.getInductionVar();
    Value needMask = arith::OrIOp::create(b, loc, kb.cmpLt(tile, wholeLo), kb.cmpLe(wholeHi, tile));

    auto iter = loop.getRegionIterArgs().take_front(stateCount);
    SmallVector<Value> next;
    SmallVector<Value> oNext(iter.begin() + 2 * qTiles, iter.end());
    for (int qt = 0; qt < qTiles; ++qt) {
      Value queryBase = kb.add(kb.add(q0, waveQ0), qt * p.queryDim());
      Value ldsQueryRow = kb.add(waveQ0, qt * p.queryDim());
      // S (or S^T) for this query tile, one accumulator per key tile.
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
      for (int kt = 0; kt < p.keyTiles(); ++kt) {
        Value sc = attnScores(kb, s[kt], scaleLog2, cap);
        auto masked = scf::IfOp::create(b, loc, TypeRange{sc.getType()}, needMask, true);
        {
          OpBuilder::InsertionGuard g2(b);
          b.setInsertionPointToStart(masked.thenBlock());
          scf::YieldOp::create(b, loc, maskTile(sc, queryBase, kb.add(n0, kt * p.keyDim())));
          b.setInsertionPointToStart(masked.elseBlock());
          scf::YieldOp::create(b, loc, sc);
        }
        s[kt] = masked.getResult(0);
      }

      // Online softmax: new max, rescale factor, probabilities, partial row sums.
      Value mOld = iter[2 * qt], lOld = iter[2 * qt + 1];
      SmallVector<Value> rowMax = reduceAcrossLanes(reduceInLane(s, /*isMax=*/true), true);
      SmallVector<Value> mNew, mUse, alpha;
      for (int sl = 0; sl < nSlots; ++sl) {
        Value m = kb.fmax(extract(mOld, sl), rowMax[sl]);
        // A row with nothing visible yet keeps max -inf; subtract 0 so exp2 gives 0, not NaN.
        Value use = kb.select(fcmp(arith::CmpFPredicate::OEQ, m, kb.f32(-INFINITY)), kb.f32(0), m);
        mNew.push_back(m);
        mUse.push_back(use);
        alpha.push_back(exp2(kb.fsub(extract(mOld, sl), use)));
      }
      SmallVector<Value> probs;
      for (int kt = 0; kt < p.keyTiles(); ++kt) {
        SmallVector<int64_t> slotIdx;
        for (int e = 0; e < qk.c.elementsPerLane(); ++e) slotIdx.push_back(slotOf(e));
        Value mVec = vector::FromElementsOp::create(b, loc, slotType, mUse);
        Value mB = vector::ShuffleOp::create(b, loc, mVec, mVec, slotIdx);
        probs.push_back(exp2(kb.fsub(s[kt], mB)));
      }
      SmallVector<Value> rowSum = reduceInLane(probs, /*isMax=*/false);
      SmallVector<Value> lNew;
      for (int sl = 0; sl < nSlots; ++sl)
        lNew.push_back(kb.fadd(kb.fmul(extract(lOld, sl), alpha[sl]), rowSum[sl]));
      next.push_back(vector::FromElementsOp::create(b, loc, slotType, mNew));
      next.push_back(vector::FromElementsOp::create(b, loc, slotType, lNew));

      // Rescale this query tile's output accumulators: element -> its query's slot.
      Value alphaVec = vector::FromElementsOp::create(b, loc, slotType, alpha);
      SmallVector<int64_t> oSlots;
      for (int e = 0; e < pv.c.elementsPerLane(); ++e) oSlots.push_back(outputSlotOf(e));
      Value alphaO = vector::ShuffleOp::create(b, loc, alphaVec, alphaVec, oSlots);
      for (int ht = 0; ht < hTiles; ++ht)
        oNext[qt * hTiles + ht] = kb.fmul(oNext[qt * hTiles + ht], alphaO);

      // P V.
      if (!p.pInRegisters) {
        // P through this wave's rows of the LDS P tile ([query][key]).
        auto [laneRow, laneCol] = kb.laneCoord(qk.c, lane);
        Value lq = p.transposed ? laneCol : laneRow, lk = p.transposed ? laneRow : laneCol;
        for (int kt = 0; kt < p.keyTiles(); ++kt)
          for (int e = 0; e < qk.c.elementsPerLane(); ++e) {
            Coord c = qk.c.at(0, e);
            Value row = kb.add(kb.add(ldsQueryRow, lq), queryOf(p, c));
            Value col = kb.add(lk, kt * p.keyDim() + keyOf(p, c));
            memref::StoreOp::create(b, loc, kb.convert(extract(probs[kt], e), p.elem), ldsP.memref,
                                    ValueRange{kb.ldsOffset(ldsP, row, col)});
          }
        kb.barrier();
      }
      for (int ks = 0; ks < p.blockN / pv.k; ++ks) {
        Value pFrag = p.pInRegisters
                          ? pOperand(probs, ks)
                          : kb.loadFragment(ldsP, pOperandLayout(p), p.transposed, lane, ldsQueryRow,
                                            ks * pv.k);
        for (int ht = 0; ht < hTiles; ++ht) {
          if (p.tightRegisters) kb.memoryScheduleFence();
          Value &o = oNext[qt * hTiles + ht];
          if (p.transposed) {
            Value vFrag = kb.loadOperand(ldsV, pv, Operand::A, lane, kb.idx(ht * pv.m), ks * pv.k);
            o = kb.mma(pv, vFrag, pFrag, o);
          } else {
            Value vFrag = kb.loadOperand(ldsV, pv, Operand::B, lane, kb.idx(ht * pv.n), ks * pv.k,
                                         /*kAlongRows=*/vNatural);
            o = kb.mma(pv, pFrag, vFrag, o);
          }
        }
      }
    }
    next.append(oNext.begin(), oNext.end());
    next.append(prefetched);
    scf::YieldOp::create(b, loc, next);
  }

  // Epilogue: total row sums, O / l (0 for rows that saw nothing), LSE.
  auto results = loop.getResults();
  auto [oLaneRow, oLaneCol] = kb.laneCoord(pv.c, lane);
  Value oLaneQuery = p.transposed ? oLaneCol : oLaneRow, oLaneD = p.transposed ? oLaneRow : oLaneCol;
  for (int qt = 0; qt < qTiles; ++qt) {
    SmallVector<Value> lPart;
    for (int sl = 0; sl < nSlots; ++sl) lPart.push_back(extract(results[2 * qt + 1], sl));
    SmallVector<Value> l = reduceAcrossLanes(lPart, /*isMax=*/false);
    SmallVector<Value> inv;
    for (int sl = 0; sl < nSlots; ++sl) {
      Value positive = fcmp(arith::CmpFPredicate::OGT, l[sl], kb.f32(0));
      inv.push_back(kb.select(positive, arith::DivFOp::create(b, loc, kb.f32(1.0), l[sl]), kb.f32(0)));
    }
    Value queryBase = kb.add(kb.add(q0, waveQ0), qt * p.queryDim());
    for (int ht = 0; ht < hTiles; ++ht) {
      Value o = results[2 * qTiles + qt * hTiles + ht];
      for (int e = 0; e < pv.c.elementsPerLane(); ++e) {
        Coord c = pv.c.at(0, e);
        int q = p.transposed ? c.col : c.row, dd = p.transposed ? c.row : c.col;
        int slot = outputSlotOf(e);
        Value query = kb.add(kb.add(queryBase, oLaneQuery), q);
        Value col = kb.add(oLaneD, ht * (p.transposed ? pv.m : pv.n) + dd);
        auto inRange = scf::IfOp::create(b, loc, kb.cmpLt(query, seqQ), false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(inRange.thenBlock());
        Value x = kb.convert(kb.fmul(extract(o, e), inv[slot]), p.elem);
        Value addr = kb.add(oBase, kb.add(kb.mul(query, arg("o_stride_s")), col));
        memref::StoreOp::create(b, loc, x, arg("o"), ValueRange{addr});
      }
    }
    if (lse) {
      // One writer per query: the lanes whose key-axis lane bits are zero.
      auto [sLaneRow, sLaneCol] = kb.laneCoord(qk.c, lane);
      Value sLaneQuery = p.transposed ? sLaneCol : sLaneRow;
      int keyLaneMask = 0;
      for (size_t bit = 0; bit < qk.c.laneBases.size(); ++bit)
        if (queryOf(p, qk.c.laneBases[bit]) == 0) keyLaneMask |= 1 << bit;
      Value writer = icmp(arith::CmpIPredicate::eq, kb.andi(lane, keyLaneMask), kb.idx(0));
      Value lseBase = kb.mul(head, arg("lse_stride_h"));
      lseBase = varlen ? kb.add(lseBase, rowQ0) : kb.add(lseBase, kb.mul(batch, arg("lse_stride_b")));
      for (int e = 0; e < qk.c.elementsPerLane(); ++e) {
        Coord c = qk.c.at(0, e);
        if (keyOf(p, c) != 0) continue; // one element per slot
        int sl = slotOf(e);
        Value m = extract(results[2 * qt], sl);
        Value positive = fcmp(arith::CmpFPredicate::OGT, l[sl], kb.f32(0));
        Value value = kb.select(positive,
                             kb.fmul(kb.fadd(m, math::Log2Op::create(b, loc, l[sl])), kb.f32(M_LN2)),
                             kb.f32(-INFINITY));
        Value query = kb.add(kb.add(queryBase, sLaneQuery), queryOf(p, c));
        auto write = scf::IfOp::create(b, loc, kb.andb(writer, kb.cmpLt(query, seqQ)), false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(write.thenBlock());
        memref::StoreOp::create(b, loc, value, arg("lse"), ValueRange{kb.add(lseBase, query)});
      }
    }
  }
}

} // namespace

FailureOr<gpu::GPUFuncOp> generateFlashAttn(tessera::FlashAttnOp op, const TargetInfo &target) {
  // pack_gqa is a tiling choice; this kernel takes one query head per tile whatever it says
  // (the dispatcher records the fallback).
  FailureOr<AttnPlan> plan = planAttention(op, target);
  if (failed(plan)) return failure();
  OpBuilder b(op);
  KernelSignature sig = flashAttnSignature(op, plan->blockM, plan->waves * target.waveSize);
  gpu::GPUFuncOp func = createKernel(b, op.getLoc(), target, sig);
  AttnEmitter(op, *plan, target, b, func).emit();
  return func;
}

} // namespace tessera

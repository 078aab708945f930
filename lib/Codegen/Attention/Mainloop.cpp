// The attention forward mainloop shared by flash_attn and paged_decode (Mainloop.h).
//
// Orientation: where the accumulator layout of S^T = K Q^T hands P^T to the PV atom in registers,
// at most one shuffle away (MFMA, WMMA), the kernel computes transposed; where S = Q K^T does
// (mma.sync), it computes S; otherwise P goes through LDS. Each wave owns a slice of the block's
// rows against the whole staged K/V tile.
#include "tessera/Codegen/Attention/Mainloop.h"
#include "tessera/Codegen/LdsLayout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <map>

using namespace mlir;

namespace tessera::attn {

using CK = vector::CombiningKind;

namespace {
/// The online-softmax state of one query tile: per-lane slot vectors of the running max and the
/// lane's partial row sum.
struct RowState {
  Value max, sum;
};
} // namespace

/// One emission: the values every step needs.
class Mainloop::Impl {
public:
  Impl(Mainloop &m, AttnRows &rows, const KeyWalk &walk)
      : m(m), p(m.p), t(m.t), b(m.b), loc(m.loc), kb(b, loc, t), rows(rows), walk(walk),
        elem(m.elem), pvElem(m.pvElem), sView(p.qk->c, axis()), oView(p.pv->c, axis()),
        softmax(kb, p.scaleInExp ? expScale(kb, walk.scaleLog2, walk.cap) : Value()) {}

  void emit();

private:
  using Operand = KernelBuilder::Operand;
  QueryAxis axis() const { return p.transposed ? QueryAxis::Cols : QueryAxis::Rows; }
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

  /// The K and V tiles from key n0 in registers, and their stores into LDS (V's rows times
  /// `vScales`, one per V vector, where given).
  SmallVector<Value> loadKV(Value n0, bool inBounds = false);
  void storeKV(ArrayRef<Value> regs, ArrayRef<Value> vScales = {});
  /// V^T from the staged [key][d] tile `staged` (AttnPlan::transposesStagedV): 4 x 4 blocks of
  /// bytes, each read as 4 keys' words and written as 4 d rows' words, the columns in
  /// p.pvKeyOrder, each key wave's keys one [d][blockN] block of rows.
  void transposeValues(const LdsTile &staged);
  /// S (or S^T) of the query tile at block row `ldsQueryRow` against the staged keys: one
  /// accumulator per key tile.
  SmallVector<Value> computeScores(Value ldsQueryRow);
  /// Scaled by `scaleLog2` (a scalar, or per element), capped, and masked on edge tiles
  /// (`needMask`); an interior tile only scaled (no mask, softcap off).
  SmallVector<Value> scoreTiles(SmallVector<Value> s, Value needMask, Value rowBase, Value n0,
                                Value scaleLog2, bool interior, const AlibiRows *alibi);
  /// Scaled queries (AttnPlan::scaledQueries): this thread's query vectors each times the power
  /// of two that puts its row's largest magnitude just below the largest power of two the tiles'
  /// type holds ([2^14, 2^15) in f16, which holds every bf16 value from 2^-14 of that up
  /// exactly, so only magnitudes below 2^-28 of the row's largest lose bits; [2^7, 2^8) in OCP
  /// e4m3, [2^6, 2^7) in FNUZ e4m3, where every value rounds to 3 bits); and per query tile, the
  /// score scale times each S element's inverse power (exact).
  SmallVector<Value> scaleQueries(ArrayRef<Value> vectors);
  Value rowMax(Value row);
  std::pair<Value, Value> rowPowers(Value max);
  Value queryTileScale(Value ldsQueryRow);
  /// A probability (at most 1) as P V's operand element: in an fp8 product times
  /// AttnPlan::pStretch first, so that it lands in the format's normal range (O is divided by
  /// it with the row sum).
  Value pElement(Value prob);
  /// The probabilities `probs` as one P operand: an fp8 one stretched and rounded as one vector
  /// (pairs convert together where the target has such converts).
  Value pVector(ArrayRef<Value> probs);
  /// One online-softmax step of a query tile: the new state, the probabilities, the rescale
  /// factor per slot.
  RowState softmaxStep(ArrayRef<Value> s, RowState old, SmallVector<Value> &probs,
                       SmallVector<Value> &alpha);
  /// Per-key scales (hasKeyScales()). V's scale the V rows as they widen (storeKV), rounded
  /// once like any dequantised cache; K's, exact on the scores, reach the lanes of S through
  /// m.ldsScales (readKeyScales: this lane's keys of this wave's keys from `waveRow` on, one
  /// vector per key tile in S's order, from K's row `kRow`).
  /// With K/V buffers in LDS (kvBuffers > 1) each tile's scales are copied asynchronously with it
  /// (copyScalesAsync) and V's read back per vector (readValueScales); else they are loaded a
  /// step ahead like the K/V tiles (loadScales: the K and V scales of the rows of this thread's
  /// tile vectors from key `n0`, zeros unless `any`) and K's stored to LDS (storeKeyScales).
  void copyScalesAsync(Value n0, Value buffer);
  SmallVector<Value> readValueScales(Value buffer);
  SmallVector<Value> loadScales(Value any, Value n0);
  void storeKeyScales(ArrayRef<Value> scales);
  SmallVector<Value> readKeyScales(Value waveRow, Value kRow);
  SmallVector<std::pair<Value, Value>> scaleRows() {
    return kb.tileVectorStarts(p.stepKeys(), p.headDim, m.cacheElem, m.threads());
  }
  /// Bytes of the narrow vectors a thread widens from the staging tiles: those that widen into
  /// one 16-byte vector, so each quarter-warp's stores cover every LDS bank once (a 16-byte
  /// narrow vector widens into two, and the lanes' first halves share banks).
  int stagedVectorBytes() const {
    return 16 * m.cacheElem.getIntOrFloatBitWidth() / elem.getIntOrFloatBitWidth();
  }
  /// tiles[i] * by[i] (as is without `by`).
  SmallVector<Value> scaled(ArrayRef<Value> tiles, ArrayRef<Value> by);
  /// O (this query tile's head tiles) times each element's query's `alpha` (per slot).
  void rescaleOutputs(MutableArrayRef<Value> o, ArrayRef<Value> alpha);
  /// O (this query tile's head tiles) += P V.
  void accumulatePV(MutableArrayRef<Value> o, ArrayRef<Value> probs, Value ldsQueryRow);
  Value pOperand(ArrayRef<Value> pTiles, int kstep);
  /// Key-splitting waves: the others' max, sum and O handed to wave 0 through LDS and merged
  /// into its state (`results`, the loop's); leaves the builder in wave 0's branch, where the
  /// outputs are then stored.
  void mergeKeyWaves(SmallVector<Value> &results);
  /// O / l of query tile `qt` (0 for rows that saw nothing), and the LSE; `oLane` is
  /// oView's lane offsets.
  void storeOutputs(ArrayRef<Value> o, RowState state, int qt, std::pair<Value, Value> oLane);
  void storeLse(ArrayRef<Value> lse, Value rowBase);

  Mainloop &m;
  const AttnPlan &p;
  const TargetInfo &t;
  OpBuilder &b;
  Location loc;
  KernelBuilder kb;
  AttnRows &rows;
  const KeyWalk &walk;
  Type elem, pvElem;
  AccView sView, oView;
  OnlineSoftmax softmax;
  Value lane, waveQ0;
  Value alibiSlope; ///< AttnRows::alibiSlopeLog2
  SmallVector<AlibiRows> alibiRowTerms; ///< per query tile, with AttnRows::alibiPerRow
  std::optional<Dropout> drop;          ///< AttnRows::dropout
  LdsTile curK, curV;   ///< this step's K and V buffers
  LdsTile waveK, waveV; ///< this wave's keys of them (all of them unless p.keyWaves > 1)
  Value keyWave;        ///< which of p.keyWaves this wave is (null: 1)
  size_t kvSplit = 0; ///< K vectors before V vectors in a prefetched register tile
};

Mainloop::Mainloop(const AttnPlan &p, const TargetInfo &t, OpBuilder &b, Location loc,
                   gpu::GPUFuncOp func, Type queryElem, Type cacheElem, bool keyScales)
    : p(p), t(t), b(b), loc(loc), func(func), queryElem(queryElem),
      elem(toMlirType(b.getContext(), p.elem)), cacheElem(cacheElem ? cacheElem : elem),
      pvElem(toMlirType(b.getContext(), p.pvElem)), keyScales(keyScales) {}

Mainloop::~Mainloop() = default;

void AttnRows::copyKeysAsync(Value, const LdsTile &, int) {
  llvm_unreachable("a plan with K/V buffers in LDS needs a recipe that copies asynchronously");
}
void AttnRows::copyValuesAsync(Value, const LdsTile &, int) {
  llvm_unreachable("a plan with K/V buffers in LDS needs a recipe that copies asynchronously");
}

AttnRows::KeyScaleSlot AttnRows::keyScaleSlot(Value, Value) {
  llvm_unreachable("keyScaleSlot of rows without per-key scales");
}

void Mainloop::allocate() {
  KernelBuilder kb(b, loc, t);
  ldsQ = kb.allocLds(func, elem, p.blockM, p.headDim);
  if (p.scaledQueries())
    ldsQueryMax = kb.allocLds(func, b.getF32Type(), p.blockM, p.queryVectorsPerRow());
  // V as P V's operand with K = keys: staged [key][d] where transposing matrix loads read it
  // (ldmatrix.trans, ds_read_b64_tr_b16), else transposed into [d][key] while staging, or from
  // its staging buffers.
  assert((p.kvBuffers == 1 || p.vNatural() || p.transposesStagedV()) &&
         "asynchronous copies cannot transpose V");
  assert((p.keyWaves == 1 || p.vNatural() || p.transposesStagedV() ||
          t.ldsSwizzle == LdsSwizzle::Pad) &&
         "key-splitting waves take column parts of a transposed V tile: row padding only");
  if (!p.pInRegisters()) ldsP = kb.allocLds(func, pvElem, p.blockM, p.blockN);
  if (keyScales) ldsScales = kb.allocLds(func, b.getF32Type(), attnKeyScaleRows(p), p.stepKeys());
  // The K and V tiles' buffers, one after the other (AttnPlan::kvBuffers); a narrower cache's
  // buffers are staging ones, each step widened into a single K and V tile, as are V's where
  // V^T is transposed from them.
  const int keys = p.stepKeys();
  const int kBuffers = widensStaged() ? 1 : p.kvBuffers, vBuffers = stagesV() ? 1 : p.kvBuffers;
  struct Part {
    LdsTile *tile;
    Type type;
    int rows, cols;
    int64_t at;
  };
  SmallVector<Part> parts;
  int64_t size = 0;
  auto place = [&](LdsTile *tile, Type type, int rows, int cols) {
    parts.push_back({tile, type, rows, cols, size});
    size += (ldsTileBytes(t, *toElemType(type), rows, cols) + 15) / 16 * 16;
  };
  place(&ldsK, elem, kBuffers * keys, p.headDim);
  if (p.vNatural())
    place(&ldsV, pvElem, vBuffers * keys, p.headDim);
  else if (p.transposesStagedV())
    place(&ldsV, pvElem, p.keyWaves * p.headDim, p.blockN);
  else
    place(&ldsV, pvElem, p.headDim, keys);
  if (widensStaged()) place(&ldsK8, cacheElem, p.kvBuffers * keys, p.headDim);
  if (stagesV()) place(&ldsV8, cacheElem, p.kvBuffers * keys, p.headDim);
  if (p.keyWaves == 1) {
    for (const Part &part : parts)
      *part.tile = kb.allocLds(func, part.type, part.rows, part.cols);
    return;
  }
  // Key-splitting waves: the K/V tiles and the waves' merge (used after the last tile) share
  // one LDS arena, so the merge costs no LDS of its own (attnLdsBytes counts the larger).
  const int floats = attnMergeFloats(p);
  size = std::max<int64_t>(size, int64_t(4) * floats * ldsRowStride(t, 32, t.waveSize));
  auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  Value arena = func.addWorkgroupAttribution(
      MemRefType::get({size}, b.getI8Type(), MemRefLayoutAttrInterface{}, space), loc);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(&func.getBody().front());
  for (const Part &part : parts)
    *part.tile = kb.ldsTileIn(arena, part.at, part.type, part.rows, part.cols);
  ldsMerge = kb.ldsTileIn(arena, 0, b.getF32Type(), floats, t.waveSize);
}

void Mainloop::emit(AttnRows &rows, const KeyWalk &walk) { Impl(*this, rows, walk).emit(); }

int Mainloop::Impl::slotOf(int e) const {
  int slot = 0, bit = 0;
  for (size_t r = 0; r < p.qk->c.regBases.size(); ++r)
    if (sView.regBitMovesQuery(r)) slot |= ((e >> r) & 1) << bit++;
  return slot;
}

int Mainloop::Impl::outputSlotOf(int e) const {
  int query = oView.elements()[e].query;
  for (const attn::AccElement &s : sView.elements())
    if (s.query == query) return slotOf(s.reg);
  llvm_unreachable("sameQueryLanes() guarantees a slot");
}

int Mainloop::Impl::slots() const {
  int n = 1;
  for (size_t r = 0; r < p.qk->c.regBases.size(); ++r)
    if (sView.regBitMovesQuery(r)) n *= 2;
  return n;
}

SmallVector<Value> Mainloop::Impl::reduceInLane(ArrayRef<Value> tiles, CK kind) {
  SmallVector<Value> out(slots());
  for (Value tile : tiles)
    for (const attn::AccElement &el : sView.elements()) {
      Value x = extract(tile, el.reg);
      Value &acc = out[slotOf(el.reg)];
      acc = !acc ? x : (kind == CK::MAXNUMF ? kb.fmax(acc, x) : kb.fadd(acc, x));
    }
  return out;
}

Value Mainloop::Impl::perElement(ArrayRef<Value> slotValues, bool outputs) {
  auto slotType = VectorType::get({int64_t(slotValues.size())}, b.getF32Type());
  SmallVector<int64_t> slotIdx;
  for (const attn::AccElement &el : (outputs ? oView : sView).elements())
    slotIdx.push_back(outputs ? outputSlotOf(el.reg) : slotOf(el.reg));
  Value vec = vector::FromElementsOp::create(b, loc, slotType, slotValues);
  return vector::ShuffleOp::create(b, loc, vec, vec, slotIdx);
}

Value Mainloop::Impl::pElement(Value prob) {
  if (int stretch = p.pStretch()) prob = kb.fmul(prob, kb.f32(float(stretch)));
  return kb.convertFinite(prob, pvElem);
}

Value Mainloop::Impl::pVector(ArrayRef<Value> probs) {
  auto type = VectorType::get({int64_t(probs.size())}, pvElem);
  if (!p.pStretch()) {
    SmallVector<Value> elems;
    for (Value prob : probs) elems.push_back(pElement(prob));
    return vector::FromElementsOp::create(b, loc, type, elems);
  }
  Value f32 = vector::FromElementsOp::create(b, loc, type.clone(b.getF32Type()), probs);
  Value stretch = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(cast<ShapedType>(f32.getType()),
                                     b.getF32FloatAttr(float(p.pStretch()))));
  return arith::TruncFOp::create(b, loc, type, kb.fmul(f32, stretch));
}

/// The P operand of one PV k-step, assembled from the probabilities of the S tiles.
Value Mainloop::Impl::pOperand(ArrayRef<Value> pTiles, int kstep) {
  auto laneBitSet = [&](int bit) {
    return icmp(arith::CmpIPredicate::ne, kb.andi(lane, 1 << bit), kb.idx(0));
  };
  auto choose = [&](Value tile, const LaneChoice &c) -> Value {
    Value first = extract(tile, c.elem[0]);
    if (c.laneBit < 0 || c.elem[0] == c.elem[1]) return first;
    return kb.select(laneBitSet(c.laneBit), extract(tile, c.elem[1]), first);
  };
  const std::vector<AccSource> &step = p.conversion[kstep];
  // Pairs of elements that one half-wave swap delivers, where the target has it.
  std::map<int, Value> swapped;
  if (t.hasHalfWaveSwap)
    for (const HalfSwapPair &pair : halfSwapPairs(step, t.waveSize)) {
      Value tile = pTiles[step[pair.lo].keyTile];
      std::tie(swapped[pair.lo], swapped[pair.hi]) =
          kb.swapWaveHalves(extract(tile, pair.a), extract(tile, pair.b));
    }
  // Shuffles are shared by the elements that need the same value from the partner.
  std::map<std::tuple<int, int, int, int, int>, Value> shuffled;
  SmallVector<Value> elems;
  for (auto [e, src] : llvm::enumerate(step)) {
    if (auto it = swapped.find(int(e)); it != swapped.end()) {
      elems.push_back(it->second);
      continue;
    }
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
    elems.push_back(value);
  }
  return pVector(elems);
}


SmallVector<Value> Mainloop::Impl::loadKV(Value n0, bool inBounds) {
  SmallVector<Value> regs = rows.loadKeys(n0, m.threads(), inBounds);
  kvSplit = regs.size();
  regs.append(rows.loadValues(n0, m.threads(), inBounds));
  return regs;
}

void Mainloop::Impl::storeKV(ArrayRef<Value> regs, ArrayRef<Value> vScales) {
  // A narrower cache format (fp8) widens exactly to the tiles' element type here, as late as
  // possible after its load; per-key V scales multiply V's rows in f32, rounded once.
  SmallVector<Value> wide;
  for (auto [i, r] : llvm::enumerate(regs)) {
    auto type = cast<VectorType>(r.getType());
    Type to = i < kvSplit ? elem : pvElem;
    Value x = type.getElementType() == to
                  ? r
                  : arith::ExtFOp::create(b, loc, type.clone(to), r).getResult();
    if (!vScales.empty() && i >= kvSplit) {
      auto f32 = type.clone(b.getF32Type());
      Value scale = vector::BroadcastOp::create(b, loc, f32, vScales[i - kvSplit]);
      x = arith::TruncFOp::create(
          b, loc, type.clone(to),
          kb.fmul(arith::ExtFOp::create(b, loc, f32, x).getResult(), scale));
    }
    wide.push_back(x);
  }
  ArrayRef<Value> all(wide);
  kb.storeLdsTile(all.take_front(kvSplit), curK, p.stepKeys(), p.headDim, /*transpose=*/false,
                  m.threads());
  kb.storeLdsTile(all.drop_front(kvSplit), curV, p.stepKeys(), p.headDim,
                  /*transpose=*/!p.vNatural(), m.threads());
}

void Mainloop::Impl::transposeValues(const LdsTile &staged) {
  // Each k-step's columns (pvKeyDim keys of one key wave) are one chunk, chunks dealt to the
  // waves in turn. Within a chunk lane l takes column group g = l % G (G = pvKeyDim / 4) and
  // the d groups l / G + (32 / G) i: one word of each of its 4 keys a d group, written as one
  // word of each of its 4 d rows, row (j ^ q) of the group at write j (q = l / G % 4), so that a
  // write's lanes cover 4 rows x G words: every bank. The upper half of the column groups takes
  // the rounds of d groups in another order (i ^ 1): their keys share the lower half's XOR
  // swizzle, and the reads of one round then cover every bank too.
  const int k = p.pvKeyDim(), groups = k / 4, rowsPerRound = t.waveSize / groups;
  assert(k % 4 == 0 && t.waveSize % groups == 0 && p.headDim % (4 * rowsPerRound) == 0 &&
         "V^T transposed in 4 x 4 blocks of whole k-steps");
  const std::vector<int> &order = p.pvKeyOrder;
  Value g = kb.remui(lane, groups), q = kb.divui(lane, groups);
  Value rot = kb.andi(q, 3);
  const int rounds = p.headDim / (4 * rowsPerRound);
  Value roundFlip = rounds % 2 == 0 && groups > 1 ? kb.divui(g, groups / 2) : kb.idx(0);
  // The step-relative key of this lane's column j of a chunk (V^T's column order).
  SmallVector<Value> keyOf;
  for (int j = 0; j < 4; ++j) {
    Value key = kb.add(kb.mul(g, 4), j);
    if (!order.empty()) {
      Value chosen = kb.idx(order[j]);
      for (int c = 1; c < groups; ++c)
        chosen = kb.select(kb.cmpEq(g, kb.idx(c)), kb.idx(order[4 * c + j]), chosen);
      key = chosen;
    }
    keyOf.push_back(key);
  }
  auto word = VectorType::get({4}, pvElem);
  const int chunks = p.stepKeys() / k, waves = p.waves;
  auto loop = scf::ForOp::create(b, loc, kb.waveId(), kb.idx(chunks), kb.idx(waves));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value chunk = loop.getInductionVar();
  Value firstKey = kb.mul(chunk, k);
  Value vRow0 = kb.mul(kb.divui(firstKey, p.blockN), p.headDim);
  Value col0 = kb.add(kb.remui(firstKey, p.blockN), kb.mul(g, 4));
  for (int round = 0; round < rounds; ++round) {
    Value d0 = kb.mul(kb.add(q, kb.mul(kb.xori(roundFlip, kb.idx(round)), rowsPerRound)), 4);
    SmallVector<Value> words; // key j's bytes of d0 .. d0 + 3
    for (int j = 0; j < 4; ++j) {
      Value at = kb.ldsOffset(staged, kb.add(firstKey, keyOf[j]), d0);
      words.push_back(vector::LoadOp::create(b, loc, word, staged.memref, ValueRange{at}, false,
                                             llvm::Align(4)));
    }
    Value all = kb.concat(words);
    SmallVector<Value> rows; // row i: (key 0..3 of d0 + i)
    for (int i = 0; i < 4; ++i)
      rows.push_back(vector::ShuffleOp::create(b, loc, all, all,
                                               ArrayRef<int64_t>{i, 4 + i, 8 + i, 12 + i}));
    for (int j = 0; j < 4; ++j) {
      Value r = kb.xori(rot, kb.idx(j));
      Value x = rows[0];
      for (int i = 1; i < 4; ++i)
        x = kb.select(kb.cmpEq(r, kb.idx(i)), rows[i], x);
      Value at = kb.ldsOffset(m.ldsV, kb.add(vRow0, kb.add(d0, r)), col0);
      vector::StoreOp::create(b, loc, x, m.ldsV.memref, ValueRange{at}, false, llvm::Align(4));
    }
  }
}

SmallVector<Value> Mainloop::Impl::loadScales(Value any, Value n0) {
  auto starts = scaleRows();
  SmallVector<Type> types(2 * starts.size(), b.getF32Type());
  auto ifOp = scf::IfOp::create(b, loc, types, any, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  SmallVector<Value> regs;
  for (auto [row, col] : starts) {
    AttnRows::KeyScaleSlot slot = rows.keyScaleSlot(n0, row);
    for (Value scales : {slot.kScales, slot.vScales}) {
      Value x = memref::LoadOp::create(b, loc, scales, ValueRange{slot.index});
      regs.push_back(kb.select(slot.valid, x, kb.f32(0)));
    }
  }
  scf::YieldOp::create(b, loc, regs);
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, loc, SmallVector<Value>(types.size(), kb.f32(0)));
  return SmallVector<Value>(ifOp.getResults());
}

void Mainloop::Impl::storeKeyScales(ArrayRef<Value> scales) {
  // One writer per row: the thread holding its first vector.
  for (auto [i, start] : llvm::enumerate(scaleRows())) {
    auto [row, col] = start;
    OpBuilder::InsertionGuard g(b);
    auto first = scf::IfOp::create(b, loc, kb.cmpEq(col, kb.idx(0)), false);
    b.setInsertionPointToStart(first.thenBlock());
    memref::StoreOp::create(b, loc, scales[2 * i], m.ldsScales.memref,
                            ValueRange{kb.ldsOffset(m.ldsScales, kb.idx(0), row)});
  }
}

void Mainloop::Impl::copyScalesAsync(Value n0, Value buffer) {
  // Thread t copies K's scale of row t, thread stepKeys + t V's; rows past the keys read as 0.
  const int keys = p.stepKeys();
  Value tid = kb.threadId();
  for (int first = 0; first < 2 * keys; first += m.threads()) {
    OpBuilder::InsertionGuard g(b);
    Value i = kb.add(tid, first);
    if (first + m.threads() > 2 * keys) kb.enterIf(kb.cmpLt(i, kb.idx(2 * keys)));
    Value part = kb.divui(i, keys), row = kb.remui(i, keys);
    AttnRows::KeyScaleSlot slot = rows.keyScaleSlot(n0, row);
    Value at = kb.ldsOffset(m.ldsScales, kb.add(kb.mul(buffer, 2), part), row);
    Value count = kb.select(slot.valid, kb.idx(1), kb.idx(0));
    Value ofV = kb.cmpEq(part, kb.idx(1));
    auto copy = scf::IfOp::create(b, loc, ofV, /*withElse=*/true);
    for (auto [block, scales] : {std::pair{copy.thenBlock(), slot.vScales},
                                 std::pair{copy.elseBlock(), slot.kScales}}) {
      b.setInsertionPointToStart(block);
      kb.asyncCopy(m.ldsScales.memref, at, scales, slot.index, 1, count);
    }
  }
}

SmallVector<Value> Mainloop::Impl::readValueScales(Value buffer) {
  SmallVector<Value> out;
  Value vRow = kb.add(kb.mul(buffer, 2), 1);
  for (auto [row, col] : kb.tileVectorStarts(p.stepKeys(), p.headDim, m.cacheElem, m.threads(),
                                             stagedVectorBytes()))
    out.push_back(memref::LoadOp::create(b, loc, m.ldsScales.memref,
                                         ValueRange{kb.ldsOffset(m.ldsScales, vRow, row)}));
  return out;
}

SmallVector<Value> Mainloop::Impl::readKeyScales(Value waveRow, Value kRow) {
  Value laneKey = sView.laneOffsets(kb, lane).second;
  auto type = cast<VectorType>(kb.accType(*p.qk));
  SmallVector<Value> out;
  for (int kt = 0; kt < p.keyTiles(); ++kt) {
    // Registers of the same key share one read.
    std::map<int, Value> byKey;
    SmallVector<Value> k(type.getNumElements());
    for (const AccElement &el : sView.elements()) {
      Value &scale = byKey[el.inner];
      if (!scale) {
        Value key = kb.add(kb.add(waveRow, laneKey), kt * p.keyDim() + el.inner);
        scale = memref::LoadOp::create(b, loc, m.ldsScales.memref,
                                       ValueRange{kb.ldsOffset(m.ldsScales, kRow, key)});
      }
      k[el.reg] = scale;
    }
    out.push_back(vector::FromElementsOp::create(b, loc, type, k));
  }
  return out;
}

SmallVector<Value> Mainloop::Impl::scaled(ArrayRef<Value> tiles, ArrayRef<Value> by) {
  SmallVector<Value> out(tiles.begin(), tiles.end());
  if (!by.empty())
    for (auto [x, s] : llvm::zip(out, by)) x = kb.fmul(x, s);
  return out;
}

Value Mainloop::Impl::rowMax(Value row) {
  Value max;
  for (int j = 0; j < p.queryVectorsPerRow(); ++j) {
    Value x = memref::LoadOp::create(
        b, loc, m.ldsQueryMax.memref, ValueRange{kb.ldsOffset(m.ldsQueryMax, row, kb.idx(j))});
    max = max ? arith::MaximumFOp::create(b, loc, max, x).getResult() : x;
  }
  return max;
}

std::pair<Value, Value> Mainloop::Impl::rowPowers(Value max) {
  // max = 2^(E - 127) x 1.m: 2^(126 + top - E) puts it in [2^(top - 1), 2^top), top the
  // exponent of the largest power of two of the tiles' type; at most 2^126, so that the
  // inverse is a normal f32. A zero, infinite or NaN row keeps its values (power 1).
  const int top = elemTypeTopExponent(p.elem);
  auto i32 = b.getI32Type();
  auto c = [&](int v) { return arith::ConstantIntOp::create(b, loc, i32, v).getResult(); };
  Value bits = arith::BitcastOp::create(b, loc, i32, max);
  Value biased = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bits, c(23)), c(255));
  Value e = arith::MinSIOp::create(b, loc, arith::SubIOp::create(b, loc, c(126 + top), biased), c(126));
  Value keep = arith::OrIOp::create(b, loc, kb.cmpEq(biased, c(255)), kb.cmpEq(bits, c(0)));
  e = arith::SelectOp::create(b, loc, keep, c(0), e);
  auto power = [&](Value exponent) {
    Value biasedExponent = arith::AddIOp::create(b, loc, exponent, c(127));
    Value field = arith::ShLIOp::create(b, loc, biasedExponent, c(23));
    return arith::BitcastOp::create(b, loc, b.getF32Type(), field).getResult();
  };
  return {power(e), power(arith::SubIOp::create(b, loc, c(0), e))};
}

SmallVector<Value> Mainloop::Impl::scaleQueries(ArrayRef<Value> vectors) {
  auto starts = kb.tileVectorStarts(p.blockM, p.headDim, m.queryElem, m.threads());
  const int vec = 128 / m.queryElem.getIntOrFloatBitWidth();
  auto f32 = [&](Value v) {
    auto type = cast<VectorType>(v.getType()).clone(b.getF32Type());
    return arith::ExtFOp::create(b, loc, type, v).getResult();
  };
  // Each vector's largest magnitude into its own slot (NaN kept: maximumf).
  for (auto [v, start] : llvm::zip(vectors, starts)) {
    auto [row, col] = start;
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(col, kb.idx(p.headDim)));
    Value x = f32(v);
    Value abs = arith::MaximumFOp::create(b, loc, x, arith::NegFOp::create(b, loc, x));
    Value max = vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXIMUMF, abs);
    memref::StoreOp::create(b, loc, max, m.ldsQueryMax.memref,
                            ValueRange{kb.ldsOffset(m.ldsQueryMax, row, kb.divui(col, vec))});
  }
  kb.barrier();
  SmallVector<Value> out;
  for (auto [v, start] : llvm::zip(vectors, starts)) {
    Value x = f32(v);
    Value power = rowPowers(rowMax(start.first)).first;
    Value scale = vector::BroadcastOp::create(b, loc, x.getType(), power);
    auto type = cast<VectorType>(v.getType()).clone(m.elem);
    out.push_back(arith::TruncFOp::create(b, loc, type, kb.fmul(x, scale)));
  }
  return out;
}

Value Mainloop::Impl::queryTileScale(Value ldsQueryRow) {
  Value laneQuery = sView.laneOffsets(kb, lane).first;
  SmallVector<Value> perSlot(slots());
  for (const attn::AccElement &el : sView.elements()) {
    Value &slot = perSlot[slotOf(el.reg)];
    if (slot) continue;
    Value row = kb.add(kb.add(ldsQueryRow, laneQuery), el.query);
    slot = kb.fmul(rowPowers(rowMax(row)).second, walk.scaleLog2);
  }
  return perElement(perSlot, /*outputs=*/false);
}

SmallVector<Value> Mainloop::Impl::computeScores(Value ldsQueryRow) {
  const MMAAtom &qk = *p.qk;
  SmallVector<Value> s(p.keyTiles(), kb.zero(kb.accType(qk)));
  SmallVector<Value> keyRows;
  for (int kt = 0; kt < p.keyTiles(); ++kt) keyRows.push_back(kb.idx(kt * p.keyDim()));
  for (int kk = 0; kk < p.headDim; kk += qk.k) {
    if (p.tightRegisters) kb.memoryScheduleFence();
    if (!p.transposed) { // K's fragments of adjacent key tiles two at a time (ldmatrix.x4)
      Value qFrag = kb.loadOperand(m.ldsQ, qk, Operand::A, lane, ldsQueryRow, kk);
      SmallVector<Value> kFrags = kb.loadOperands(waveK, qk, Operand::B, lane, keyRows, kk);
      for (int kt = 0; kt < p.keyTiles(); ++kt) s[kt] = kb.mma(qk, qFrag, kFrags[kt], s[kt]);
      continue;
    }
    for (int kt = 0; kt < p.keyTiles(); ++kt) {
      Value kFrag = kb.loadOperand(waveK, qk, Operand::A, lane, keyRows[kt], kk);
      Value qFrag = kb.loadOperand(m.ldsQ, qk, Operand::B, lane, ldsQueryRow, kk);
      s[kt] = kb.mma(qk, kFrag, qFrag, s[kt]);
    }
  }
  return s;
}

SmallVector<Value> Mainloop::Impl::scoreTiles(SmallVector<Value> s, Value needMask,
                                              Value rowBase, Value n0, Value scaleLog2,
                                              bool interior, const AlibiRows *alibi) {
  for (int kt = 0; kt < p.keyTiles(); ++kt) {
    Value sc = scaledScores(kb, s[kt], scaleLog2, interior ? Value() : walk.cap, p.scaleInExp);
    if (alibiSlope)
      sc = addAlibiBias(kb, *walk.visibility, sView, lane, sc, rows.queryOf(rowBase),
                        kb.add(n0, kt * p.keyDim()), alibiSlope);
    else if (alibi)
      sc = addAlibiBias(kb, *walk.visibility, sView, lane, sc, *alibi, kb.add(n0, kt * p.keyDim()));
    if (interior) {
      s[kt] = sc;
      continue;
    }
    s[kt] = maskScores(kb, *walk.visibility, sView, lane, sc, rowBase,
                       kb.add(n0, kt * p.keyDim()), needMask,
                       [&](Value row) { return rows.queryOf(row); });
  }
  return s;
}

RowState Mainloop::Impl::softmaxStep(ArrayRef<Value> s, RowState old, SmallVector<Value> &probs,
                                     SmallVector<Value> &alpha) {
  const int nSlots = slots();
  auto slotType = VectorType::get({nSlots}, b.getF32Type());
  SmallVector<Value> rowMax = reduceAcrossLanes(reduceInLane(s, CK::MAXNUMF), CK::MAXNUMF);
  SmallVector<Value> mNew, shift;
  alpha.clear();
  for (int sl = 0; sl < nSlots; ++sl) {
    Value mx = kb.fmax(extract(old.max, sl), rowMax[sl]);
    Value use = softmax.shiftFor(mx);
    mNew.push_back(mx);
    shift.push_back(use);
    alpha.push_back(softmax.rescaleFactor(extract(old.max, sl), mx));
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

void Mainloop::Impl::accumulatePV(MutableArrayRef<Value> out, ArrayRef<Value> probs,
                                  Value ldsQueryRow) {
  const MMAAtom &pv = *p.pv;
  if (!p.pInRegisters()) {
    // P through this wave's rows of the LDS P tile ([query][key]).
    auto [laneQuery, laneKey] = sView.laneOffsets(kb, lane);
    for (int kt = 0; kt < p.keyTiles(); ++kt)
      for (const AccElement &el : sView.elements()) {
        Value row = kb.add(kb.add(ldsQueryRow, laneQuery), el.query);
        Value col = kb.add(laneKey, kt * p.keyDim() + el.inner);
        memref::StoreOp::create(b, loc, pElement(extract(probs[kt], el.reg)),
                                m.ldsP.memref, ValueRange{kb.ldsOffset(m.ldsP, row, col)});
      }
    kb.barrier();
  }
  for (int ks = 0; ks < p.blockN / pv.k; ++ks) {
    Value pFrag = p.pInRegisters() ? pOperand(probs, ks)
                                   : kb.loadFragment(m.ldsP, p.pOperandLayout(), p.transposed,
                                                     lane, ldsQueryRow, ks * pv.k);
    if (!p.transposed) { // V's fragments of adjacent head tiles two at a time (ldmatrix.x4)
      for (int ht = 0; ht < p.headTiles(); ht += 2) {
        if (p.tightRegisters) kb.memoryScheduleFence();
        SmallVector<Value> rows{kb.idx(ht * pv.n)};
        if (ht + 1 < p.headTiles()) rows.push_back(kb.idx((ht + 1) * pv.n));
        SmallVector<Value> vFrags = kb.loadOperands(waveV, pv, Operand::B, lane, rows, ks * pv.k,
                                                    /*kAlongRows=*/p.vNatural());
        for (auto [i, vFrag] : llvm::enumerate(vFrags))
          out[ht + i] = kb.mma(pv, pFrag, vFrag, out[ht + i]);
      }
      continue;
    }
    for (int ht = 0; ht < p.headTiles(); ++ht) {
      if (p.tightRegisters) kb.memoryScheduleFence();
      Value vFrag = kb.loadOperand(waveV, pv, Operand::A, lane, kb.idx(ht * pv.m), ks * pv.k,
                                   /*kAlongRows=*/p.vNatural());
      out[ht] = kb.mma(pv, vFrag, pFrag, out[ht]);
    }
  }
}

void Mainloop::Impl::mergeKeyWaves(SmallVector<Value> &results) {
  // results: per query tile (max slots, sum slots), then the O accumulators.
  const int qTiles = p.queryTiles(), hTiles = p.headTiles(), nSlots = slots();
  auto floatsOf = [&](Value v) { return int(cast<VectorType>(v.getType()).getNumElements()); };
  auto at = [&](int wave, int index) { // wave >= 1's value `index` of this lane
    int offset = (wave - 1) * attnMergeFloats(p) / (p.keyWaves - 1) + index;
    return kb.ldsOffset(m.ldsMerge, kb.idx(offset), lane);
  };
  // Every wave is done with the last K/V tile; waves 1.. hand their state over.
  kb.barrier();
  for (int w = 1; w < p.keyWaves; ++w) {
    OpBuilder::InsertionGuard g(b);
    auto mine = scf::IfOp::create(b, loc, kb.cmpEq(keyWave, kb.idx(w)),
                                  false);
    b.setInsertionPointToStart(mine.thenBlock());
    int index = 0;
    for (Value v : results)
      for (int e = 0; e < floatsOf(v); ++e)
        memref::StoreOp::create(b, loc, extract(v, e), m.ldsMerge.memref,
                                ValueRange{at(w, index++)});
  }
  kb.barrier();
  // Wave 0 merges: M = max, each state scaled by exp2(m - M) (M of -inf rows taken as 0).
  auto first = scf::IfOp::create(b, loc, kb.cmpEq(keyWave, kb.idx(0)), false);
  b.setInsertionPointToStart(first.thenBlock());
  for (int w = 1; w < p.keyWaves; ++w) {
    SmallVector<Value> theirs;
    int index = 0;
    for (Value v : results) {
      SmallVector<Value> elems;
      for (int e = 0; e < floatsOf(v); ++e)
        elems.push_back(
            memref::LoadOp::create(b, loc, m.ldsMerge.memref, ValueRange{at(w, index++)}));
      theirs.push_back(vector::FromElementsOp::create(b, loc, v.getType(), elems));
    }
    for (int qt = 0; qt < qTiles; ++qt) {
      SmallVector<Value> mNew, lNew, scaleMine, scaleTheirs;
      for (int sl = 0; sl < nSlots; ++sl) {
        Value mine = extract(results[2 * qt], sl), other = extract(theirs[2 * qt], sl);
        Value mx = kb.fmax(mine, other);
        Value a = softmax.rescaleFactor(mine, mx), c = softmax.rescaleFactor(other, mx);
        mNew.push_back(mx);
        scaleMine.push_back(a), scaleTheirs.push_back(c);
        lNew.push_back(kb.fadd(kb.fmul(extract(results[2 * qt + 1], sl), a),
                               kb.fmul(extract(theirs[2 * qt + 1], sl), c)));
      }
      auto slotType = results[2 * qt].getType();
      results[2 * qt] = vector::FromElementsOp::create(b, loc, slotType, mNew);
      results[2 * qt + 1] = vector::FromElementsOp::create(b, loc, slotType, lNew);
      Value aO = perElement(scaleMine, /*outputs=*/true), cO = perElement(scaleTheirs, true);
      for (int ht = 0; ht < hTiles; ++ht) {
        Value &o = results[2 * qTiles + qt * hTiles + ht];
        o = kb.fadd(kb.fmul(o, aO), kb.fmul(theirs[2 * qTiles + qt * hTiles + ht], cO));
      }
    }
  }
}

void Mainloop::Impl::storeOutputs(ArrayRef<Value> out, RowState state, int qt,
                                  std::pair<Value, Value> oLane) {
  SmallVector<Value> lPart;
  for (int sl = 0; sl < slots(); ++sl) lPart.push_back(extract(state.sum, sl));
  SmallVector<Value> l = reduceAcrossLanes(lPart, CK::ADD);
  // Per slot: the factor O takes and, where it is written, the LSE.
  SmallVector<Value> inv, lse;
  Value rowBase = kb.add(waveQ0, qt * p.queryDim());
  Value laneQuery = sView.laneOffsets(kb, lane).first;
  const SmallVector<AccElement> sElements = sView.elements();
  for (auto [sl, sum] : llvm::enumerate(l)) {
    // The slot's row: that of any S element of the slot.
    const AccElement &first = *llvm::find_if(
        sElements, [&, sl = sl](const AccElement &el) { return slotOf(el.reg) == int(sl); });
    if (Value sink = rows.sinkLogit(kb.add(kb.add(rowBase, laneQuery), first.query))) {
      OnlineSoftmax::Finish f = softmax.finishWithSink(extract(state.max, sl), sum, sink);
      inv.push_back(f.outputFactor), lse.push_back(f.lse);
    } else {
      inv.push_back(softmax.inverseSum(sum));
      if (rows.wantsLse()) lse.push_back(softmax.logSumExp(extract(state.max, sl), sum));
    }
    if (int stretch = p.pStretch()) inv.back() = kb.fmul(inv.back(), kb.f32(1.0f / float(stretch)));
    if (drop) inv.back() = kb.fmul(inv.back(), drop->keepScale);
  }
  auto [outputLaneQuery, laneD] = oLane;
  const int headTile = p.transposed ? p.pv->m : p.pv->n;
  for (int ht = 0; ht < p.headTiles(); ++ht)
    for (const AccElement &el : oView.elements()) {
      Value row = kb.add(kb.add(rowBase, outputLaneQuery), el.query);
      Value col = kb.add(laneD, ht * headTile + el.inner);
      rows.storeOutput(row, col, kb.fmul(extract(out[ht], el.reg), inv[outputSlotOf(el.reg)]));
    }
  if (rows.wantsLse()) storeLse(lse, rowBase);
}

void Mainloop::Impl::storeLse(ArrayRef<Value> lse, Value rowBase) {
  // One writer per query: the lanes whose non-query lane bits are zero.
  Value laneQuery = sView.laneOffsets(kb, lane).first;
  Value writer = kb.cmpEq(kb.andi(lane, sView.nonQueryLaneBits()), kb.idx(0));
  for (const AccElement &el : sView.elements()) {
    if (el.inner != 0) continue; // one element per slot
    Value value = lse[slotOf(el.reg)];
    Value row = kb.add(kb.add(rowBase, laneQuery), el.query);
    auto write = scf::IfOp::create(b, loc, writer, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(write.thenBlock());
    rows.storeLse(row, value);
  }
}

void Mainloop::Impl::rescaleOutputs(MutableArrayRef<Value> o, ArrayRef<Value> alpha) {
  auto rescale = [&](MutableArrayRef<Value> accs) {
    Value alphaO = perElement(alpha, /*outputs=*/true);
    for (Value &acc : accs) acc = kb.fmul(acc, alphaO);
  };
  if (!p.rescaleOnNewMaxOnly) return rescale(o);
  Value moved = arith::ConstantIntOp::create(b, loc, 0, 1);
  for (Value a : alpha)
    moved = arith::OrIOp::create(
        b, loc, moved, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, a, kb.f32(1)));
  auto branch = scf::IfOp::create(b, loc, ValueRange(o).getTypes(), moved, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(branch.thenBlock());
    SmallVector<Value> scaledO(o);
    rescale(scaledO);
    scf::YieldOp::create(b, loc, scaledO);
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange(o));
  }
  llvm::copy(branch.getResults(), o.begin());
}

void Mainloop::Impl::emit() {
  lane = kb.laneId();
  alibiSlope = rows.alibiSlopeLog2();
  drop = rows.dropout();
  if (p.keyWaves > 1)
    waveQ0 = kb.idx(0), keyWave = kb.waveId();
  else
    waveQ0 = kb.mul(kb.waveId(), p.waveQueries());
  // The block's rows, staged once.
  SmallVector<Value> queries = rows.loadQueries(m.threads());
  if (p.scaledQueries()) queries = scaleQueries(queries);
  kb.storeLdsTile(queries, m.ldsQ, p.blockM, p.headDim, /*transpose=*/false, m.threads());

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

  // With two stages the next tile's global loads are in flight while this one computes; with two
  // K/V buffers its asynchronous copies.
  const size_t stateCount = init.size();
  const TileRange &tiles = walk.tiles;
  curK = m.ldsK, curV = m.ldsV;
  const bool staged = m.widensStaged();
  const bool transposesV = !staged && p.transposesStagedV();
  const LdsTile &asyncK = staged ? m.ldsK8 : m.ldsK, &asyncV = m.stagesV() ? m.ldsV8 : m.ldsV;
  const bool withScales = rows.hasKeyScales();
  assert(withScales == m.keyScales && "Mainloop(keyScales) and the rows must agree");
  // Per-key scales travel with their tiles when these are copied asynchronously.
  const bool asyncScales = withScales && p.kvBuffers > 1;
  // Tile `ahead` tiles past the first into its buffer, when there is one: one group of copies
  // (empty past the last tile) per tile, so that waiting for all but the newest kvBuffers - 2
  // groups means the oldest has landed.
  auto copyAsync = [&](Value ahead) {
    {
      OpBuilder::InsertionGuard g(b);
      Value tile = kb.add(tiles.lo, ahead);
      kb.enterIf(kb.cmpLt(tile, tiles.hi));
      Value n0 = kb.mul(tile, p.stepKeys()), which = kb.remui(ahead, p.kvBuffers);
      rows.copyKeysAsync(n0, kb.buffer(asyncK, p.kvBuffers, which), m.threads());
      rows.copyValuesAsync(n0, kb.buffer(asyncV, p.kvBuffers, which), m.threads());
      if (asyncScales) copyScalesAsync(n0, which);
    }
    kb.asyncCommit();
  };
  for (int ahead = 0; ahead + 1 < p.kvBuffers; ++ahead) copyAsync(kb.idx(ahead));
  if (withScales && !asyncScales)
    init.append(loadScales(kb.cmpLt(tiles.lo, tiles.hi), kb.mul(tiles.lo, p.stepKeys())));
  const size_t carried = init.size(); // the state and the scales
  if (p.stages > 1) init.append(loadKV(kb.mul(tiles.lo, p.stepKeys())));
  // The score scale per query tile: per element where the queries were scaled per row.
  SmallVector<Value> tileScales(qTiles, walk.scaleLog2);
  if (p.scaledQueries())
    for (int qt = 0; qt < qTiles; ++qt)
      tileScales[qt] = queryTileScale(kb.add(waveQ0, qt * p.queryDim()));
  // ALiBi of rows that are not consecutive queries: each element's slope and query, per tile.
  if (!alibiSlope && rows.alibiPerRow())
    for (int qt = 0; qt < qTiles; ++qt)
      alibiRowTerms.push_back(alibiRows(
          kb, *walk.visibility, sView, lane, kb.accType(*p.qk), kb.add(waveQ0, qt * p.queryDim()),
          [&](Value row) { return rows.alibiRowSlopeLog2(row); },
          [&](Value row) { return rows.queryOf(row); }));
  // One loop over the tiles [lo, hi) from the state `from`, of the given part of the walk:
  // Interior tiles need no mask, have every key valid (their prefetched successors too) and
  // softcap off; those before them all need the mask, those after from walk.unmasked.hi on.
  enum class Part { Whole, BeforeInterior, Interior, AfterInterior };
  auto walkTiles = [&](Value lo, Value hi, ValueRange from, Part part) {
    const bool interior = part == Part::Interior;
    auto loop = scf::ForOp::create(b, loc, lo, hi, kb.idx(1), from);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value tile = loop.getInductionVar();
    Value n0 = kb.mul(tile, p.stepKeys());
    Value which;
    if (p.kvBuffers > 1) {
      which = kb.remui(kb.sub(tile, tiles.lo), p.kvBuffers);
      if (!staged) curK = kb.buffer(m.ldsK, p.kvBuffers, which);
      if (!m.stagesV()) curV = kb.buffer(m.ldsV, p.kvBuffers, which);
      kb.asyncWait(p.kvBuffers - 2);
    }
    kb.barrier(); // previous step's K/V/P reads are done (and the staged rows written)
    SmallVector<Value> prefetched, scales, vScales, nextScales;
    if (withScales && !asyncScales) {
      auto iterArgs = loop.getRegionIterArgs();
      scales.assign(iterArgs.begin() + stateCount, iterArgs.begin() + carried);
      for (size_t i = 1; i < scales.size(); i += 2) vScales.push_back(scales[i]);
      storeKeyScales(scales);
      Value next = kb.add(tile, 1);
      nextScales = loadScales(kb.cmpLt(next, tiles.hi), kb.mul(next, p.stepKeys()));
    }
    if (p.kvBuffers > 1) {
      // Into the buffer the previous step read (the barrier above).
      copyAsync(kb.add(kb.sub(tile, tiles.lo), p.kvBuffers - 1));
      if (staged) { // this step's narrow tiles widened into the K and V tiles
        const int bytes = stagedVectorBytes();
        SmallVector<Value> narrow = kb.loadLdsTile(kb.buffer(asyncK, p.kvBuffers, which),
                                                   p.stepKeys(), p.headDim, m.threads(), bytes);
        kvSplit = narrow.size();
        narrow.append(kb.loadLdsTile(kb.buffer(asyncV, p.kvBuffers, which), p.stepKeys(),
                                     p.headDim, m.threads(), bytes));
        storeKV(narrow, asyncScales ? readValueScales(which) : SmallVector<Value>());
        kb.barrier();
      } else {
        assert(!withScales && "per-key scales come with a narrower cache: widened, V scaled");
        if (transposesV) {
          transposeValues(kb.buffer(asyncV, p.kvBuffers, which));
          kb.barrier();
        }
      }
    } else if (p.stages > 1) {
      storeKV(SmallVector<Value>(loop.getRegionIterArgs().drop_front(carried)), vScales);
      kb.barrier();
      prefetched = loadKV(kb.add(n0, p.stepKeys()), interior);
    } else {
      storeKV(loadKV(n0, interior), vScales);
      kb.barrier();
    }
    Value needMask; // uniform
    switch (part) {
    case Part::Whole: needMask = isEdgeTile(kb, tile, walk.unmasked); break;
    case Part::BeforeInterior: needMask = arith::ConstantIntOp::create(b, loc, 1, 1); break;
    case Part::Interior: break;
    case Part::AfterInterior: needMask = kb.cmpLe(walk.unmasked.hi, tile); break;
    }
    waveK = curK, waveV = curV;
    Value waveN0 = n0;
    if (keyWave) {
      waveK = kb.buffer(curK, p.keyWaves, keyWave);
      // V^T ([d][key]): its keys' columns, or its rows when transposed per key wave.
      waveV = p.vNatural() || p.transposesStagedV() ? kb.buffer(curV, p.keyWaves, keyWave)
                                                     : kb.columns(curV, p.keyWaves, keyWave);
      waveN0 = kb.add(n0, kb.mul(keyWave, p.blockN));
    }
    SmallVector<Value> kScales;
    if (withScales)
      kScales = readKeyScales(kb.sub(waveN0, n0), asyncScales ? kb.mul(which, 2) : kb.idx(0));

    auto iter = loop.getRegionIterArgs().take_front(stateCount);
    SmallVector<Value> next;
    SmallVector<Value> oNext(iter.begin() + 2 * qTiles, iter.end());
    for (int qt = 0; qt < qTiles; ++qt) {
      Value ldsQueryRow = kb.add(waveQ0, qt * p.queryDim());
      SmallVector<Value> s = scoreTiles(scaled(computeScores(ldsQueryRow), kScales), needMask,
                                        ldsQueryRow, waveN0, tileScales[qt], interior,
                                        alibiRowTerms.empty() ? nullptr : &alibiRowTerms[qt]);
      SmallVector<Value> probs, alpha;
      RowState state = softmaxStep(s, {iter[2 * qt], iter[2 * qt + 1]}, probs, alpha);
      next.push_back(state.max);
      next.push_back(state.sum);
      // Rescale this query tile's output accumulators: element -> its query's slot.
      MutableArrayRef<Value> outs(oNext.data() + qt * hTiles, hTiles);
      rescaleOutputs(outs, alpha);
      // Dropout after the row sums (which keep every probability): P V takes the kept ones,
      // their factor applied with 1 / l at the end.
      if (drop)
        for (int kt = 0; kt < p.keyTiles(); ++kt)
          probs[kt] = applyDropout(kb, probs[kt],
                                   dropoutKeep(kb, *drop, sView, lane, rows.queryOf(ldsQueryRow),
                                               waveN0, 0, kt * p.keyDim()));
      accumulatePV(outs, probs, ldsQueryRow);
    }
    next.append(oNext.begin(), oNext.end());
    next.append(nextScales);
    next.append(prefetched);
    scf::YieldOp::create(b, loc, next);
    return SmallVector<Value>(loop.getResults());
  };
  // Where the rows allow it, the interior tiles get a loop of their own, free of every edge
  // branch (masks, bounds-checked loads, softcap); the edge tiles before and after it take the
  // general one. A wave-split step covers keyWaves tiles of the walk, so none is interior.
  const bool interiorLoop = p.headDim <= t.attnInteriorLoopMaxHeadDim && p.keyWaves == 1;
  Value inBounds = interiorLoop ? rows.inBoundsLoads() : Value();
  SmallVector<Value> state;
  if (!inBounds) {
    state = walkTiles(tiles.lo, tiles.hi, init, Part::Whole);
  } else {
    if (walk.cap) // softcap off: not cap > 0
      inBounds = kb.andb(inBounds, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ULE,
                                                         walk.cap, kb.f32(0)));
    // A prefetching step loads its successor, which must be interior too.
    Value lo = kb.minsi(kb.maxsi(walk.unmasked.lo, tiles.lo), tiles.hi);
    Value last = kb.sub(walk.unmasked.hi, kb.idx(p.stages > 1 ? 1 : 0));
    Value hi = kb.maxsi(kb.minsi(last, tiles.hi), lo);
    hi = kb.select(inBounds, hi, lo);
    state = walkTiles(tiles.lo, lo, init, Part::BeforeInterior);
    state = walkTiles(lo, hi, state, Part::Interior);
    state = walkTiles(hi, tiles.hi, state, Part::AfterInterior);
  }

  // Epilogue: total row sums, O / l (0 for rows that saw nothing), LSE.
  SmallVector<Value> results(ArrayRef<Value>(state).take_front(stateCount));
  OpBuilder::InsertionGuard g(b);
  if (keyWave) mergeKeyWaves(results);
  std::pair<Value, Value> oLane = oView.laneOffsets(kb, lane);
  for (int qt = 0; qt < qTiles; ++qt) {
    SmallVector<Value> out(results.begin() + 2 * qTiles + qt * hTiles,
                           results.begin() + 2 * qTiles + (qt + 1) * hTiles);
    storeOutputs(out, {results[2 * qt], results[2 * qt + 1]}, qt, oLane);
  }
}

} // namespace tessera::attn

// The portable flash_attn planner (FlashAttnPlan.h): candidates filtered by named constraints.
#include "tessera/Codegen/FlashAttnPlan.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace tessera {

bool AttnPlan::pShuffles() const {
  for (const auto &step : conversion)
    for (const AccSource &src : step)
      if (src.xorMask) return true;
  return false;
}

namespace {

// Query / key coordinates of an accumulator position in the plan's orientation.
int queryOf(const AttnPlan &p, Coord c) { return p.transposed ? c.col : c.row; }
int keyOf(const AttnPlan &p, Coord c) { return p.transposed ? c.row : c.col; }

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

} // namespace

namespace {

/// The order of V^T's columns that gives every lane, for each query, P's operand columns as the
/// keys it holds in S (both ascending), if one order does so for every lane.
std::optional<std::vector<int>> ownKeyOrder(const AttnPlan &p) {
  const OperandLayout &op = p.pOperandLayout(), &acc = p.qk->c;
  const int k = p.pvKeyDim();
  if (k % p.keyDim()) return std::nullopt;
  // (lane, query) -> operand columns / S keys of one k-step.
  std::map<std::pair<int, int>, std::vector<int>> cols, keys;
  for (int lane = 0; lane < op.lanes(); ++lane) {
    for (int e = 0; e < op.elementsPerLane(); ++e) {
      Coord c = op.at(lane, e);
      cols[{lane, queryOf(p, c)}].push_back(keyOf(p, c));
    }
    for (int tile = 0; tile < k / p.keyDim(); ++tile)
      for (int e = 0; e < acc.elementsPerLane(); ++e) {
        Coord c = acc.at(lane, e);
        keys[{lane, queryOf(p, c)}].push_back(tile * p.keyDim() + keyOf(p, c));
      }
  }
  std::vector<int> order(k, -1);
  for (auto &[at, c] : cols) {
    std::vector<int> &s = keys[at];
    if (s.size() != c.size()) return std::nullopt;
    std::sort(c.begin(), c.end());
    std::sort(s.begin(), s.end());
    for (size_t i = 0; i < c.size(); ++i) {
      if (order[c[i]] >= 0 && order[c[i]] != s[i]) return std::nullopt;
      order[c[i]] = s[i];
    }
  }
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < k; ++i)
    if (sorted[i] != i) return std::nullopt;
  return order;
}

bool planConversion(AttnPlan &p);

} // namespace

bool planRegisterConversion(AttnPlan &p) {
  p.pvKeyOrder.clear();
  if (planConversion(p)) return true;
  // Reordered keys: S = Q K^T only (V^T's columns are keys there; MFMA and WMMA find an order
  // without).
  if (!p.transposesStagedV() || p.transposed) return false;
  std::optional<std::vector<int>> order = ownKeyOrder(p);
  if (!order) return false;
  p.pvKeyOrder = std::move(*order);
  if (planConversion(p)) return true;
  p.pvKeyOrder.clear();
  return false;
}

namespace {

bool planConversion(AttnPlan &p) {
  const OperandLayout &op = p.pOperandLayout();
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
        int query = queryOf(p, want);
        int col = keyOf(p, want);
        int key = (p.pvKeyOrder.empty() ? col : p.pvKeyOrder[col]) + ks * p.pvKeyDim();
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

} // namespace

std::vector<HalfSwapPair> halfSwapPairs(const std::vector<AccSource> &step, int waveSize) {
  const int half = waveSize / 2, halfBit = llvm::Log2_32(half);
  // c's value on the lower (side 0) or upper half-wave, -1 where it varies within the half.
  auto onHalf = [&](const LaneChoice &c, int side) {
    if (c.laneBit < 0 || c.elem[0] == c.elem[1]) return c.elem[0];
    return c.laneBit == halfBit ? c.elem[side] : -1;
  };
  // Own on half `side` only, receiving from the other half.
  auto ownsHalf = [&](const AccSource &s, int side) {
    return s.xorMask == half && onHalf(s.own, side) == 1 && onHalf(s.own, 1 - side) == 0;
  };
  std::vector<HalfSwapPair> pairs;
  std::vector<bool> used(step.size(), false);
  for (size_t lo = 0; lo < step.size(); ++lo) {
    if (used[lo] || !ownsHalf(step[lo], 0)) continue;
    // Lower half owns a, the upper receives b from the lower half.
    int a = onHalf(step[lo].ownElem, 0), b = onHalf(step[lo].sendElem, 0);
    if (a < 0 || b < 0) continue;
    for (size_t hi = 0; hi < step.size(); ++hi) {
      const AccSource &s = step[hi];
      if (used[hi] || hi == lo || s.keyTile != step[lo].keyTile || !ownsHalf(s, 1) ||
          onHalf(s.ownElem, 1) != b || onHalf(s.sendElem, 1) != a)
        continue;
      pairs.push_back({int(lo), int(hi), a, b});
      used[lo] = used[hi] = true;
      break;
    }
  }
  return pairs;
}

bool sameQueryLanes(const AttnPlan &p) {
  const OperandLayout &s = p.qk->c, &o = p.pv->c;
  // O has the orientation of S: queries along its columns when transposed.
  for (size_t bit = 0; bit < s.laneBases.size(); ++bit)
    if (queryOf(p, s.laneBases[bit]) != queryOf(p, o.laneBases[bit])) return false;
  for (int e = 0; e < o.elementsPerLane(); ++e) {
    bool found = false;
    for (int e2 = 0; e2 < s.elementsPerLane(); ++e2)
      found |= queryOf(p, s.at(0, e2)) == queryOf(p, o.at(0, e));
    if (!found) return false;
  }
  return true;
}

int attnMergeFloats(const AttnPlan &p) {
  if (p.keyWaves == 1) return 0;
  auto perLane = [](const MMAAtom &a) { return a.c.elementsPerLane(); };
  return (p.keyWaves - 1) * p.queryTiles() * (2 * perLane(*p.qk) + p.headTiles() * perLane(*p.pv));
}

int attnLdsBytes(const AttnPlan &p, const TargetInfo &t, std::optional<ElemType> cacheElem) {
  auto tile = [&](int rows, int cols) { return ldsTileBytes(t, p.elem, rows, cols); };
  auto kvTiles = [&](ElemType e) {
    return ldsTileBytes(t, e, p.stepKeys(), p.headDim) +
           ldsTileBytes(t, e, p.headDim, p.stepKeys());
  };
  // Key-splitting waves merge in the K/V tiles' LDS, after the last tile.
  int kv = cacheElem && p.kvBuffers > 1 ? kvTiles(p.elem) + p.kvBuffers * kvTiles(*cacheElem)
                                        : p.kvBuffers * kvTiles(p.elem);
  if (p.transposesStagedV() && !cacheElem)
    kv += ldsTileBytes(t, p.pvElem, p.keyWaves * p.headDim, p.blockN);
  int merge = 4 * attnMergeFloats(p) * ldsRowStride(t, 32, t.waveSize);
  int queryMax =
      p.scaledQueries() ? ldsTileBytes(t, ElemType::F32, p.blockM, p.queryVectorsPerRow()) : 0;
  return tile(p.blockM, p.headDim) + std::max(kv, merge) +
         (p.pInRegisters() ? 0 : tile(p.blockM, p.blockN)) + queryMax;
}

namespace {

/// The constraints in the order they are checked; a later one means a closer candidate.
enum class Check { AtomShape, Layouts, PRoute, Lds, Registers, Fits };

struct Verdict {
  Check failed = Check::Fits;
  std::string why;
};

std::string describe(const AttnPlan &p) {
  std::ostringstream s;
  s << p.qk->name << (p.qk == p.pv ? "" : " / " + p.pv->name) << (p.transposed ? " (S^T)" : "")
    << " with " << p.blockM << " queries x " << p.blockN << " keys, " << p.waves << " waves";
  return s.str();
}

/// Checks one candidate, completing it (P route, register fencing, stages) when it fits.
Verdict check(AttnPlan &p, const AttnRequest &r, const TargetInfo &target, PRoute wanted) {
  auto fail = [&](Check c, const std::string &why) { return Verdict{c, describe(p) + ": " + why}; };
  const MMAAtom &qk = *p.qk, &pv = *p.pv;
  int pvQueries = p.transposed ? pv.n : pv.m;
  int pvHead = p.transposed ? pv.m : pv.n;
  if (pvQueries != p.queryDim())
    return fail(Check::AtomShape, "the P V atom takes " + std::to_string(pvQueries) +
                                      " queries, the S atom " + std::to_string(p.queryDim()));
  if (p.blockM % (p.waves / p.keyWaves) || p.waveQueries() % p.queryDim())
    return fail(Check::AtomShape, "the queries do not split into the waves' atom tiles");
  if (p.blockN % p.keyDim() || p.blockN % pv.k)
    return fail(Check::AtomShape, "the keys per step are not a multiple of the atoms' " +
                                      std::to_string(p.keyDim()) + " and " + std::to_string(pv.k));
  if (p.headDim % qk.k || p.headDim % pvHead)
    return fail(Check::AtomShape, "head_dim " + std::to_string(p.headDim) +
                                      " is not a multiple of the atoms' " + std::to_string(qk.k) +
                                      " and " + std::to_string(pvHead));
  if (!sameQueryLanes(p))
    return fail(Check::Layouts, "the S and O accumulators hold different queries per lane");
  p.pRoute = planRegisterConversion(p) ? PRoute::Registers : PRoute::Lds;
  if (p.keyWaves > 1 && !p.pInRegisters())
    return fail(Check::PRoute, "key-splitting waves keep P in registers");
  if (p.pRoute != wanted)
    return fail(Check::PRoute, wanted == PRoute::Registers ? "P cannot stay in registers"
                                                           : "P stays in registers");
  if (int bytes = attnLdsBytes(p, target); bytes > target.ldsBytes)
    return fail(Check::Lds, "needs " + std::to_string(bytes) + " bytes of LDS, " + target.chip +
                                " has " + std::to_string(target.ldsBytes));
  // Keep the accumulators (O and S) within 40% of the register file (30% when P goes through
  // shuffles or LDS, which keep more values live) so the unrolled fragment loads do not spill;
  // window and softcap code keeps more values live: 5% less for each (bench/NOTES.md).
  int accRegs = p.waveQueries() * (p.headDim + p.blockN) / target.waveSize;
  int budgetPercent = r.accBudgetPercent ? r.accBudgetPercent
                                         : (p.pInRegisters() && !p.pShuffles() ? 40 : 30) -
                                               5 * r.slidingWindow - 5 * r.softcap;
  p.tightRegisters = accRegs * 100 > target.maxVgprsPerWave * budgetPercent;
  // Past the budget fewer keys per step are tried, down to the fewest the P V atom takes.
  if (!r.tile && p.tightRegisters && p.blockN > std::max(16, pv.k))
    return fail(Check::Registers, std::to_string(accRegs) +
                                      " accumulator registers per lane, over " +
                                      std::to_string(budgetPercent) + "% of " +
                                      std::to_string(target.maxVgprsPerWave));
  // Register prefetch of the next K/V tile (stages = 2) holds the tile in registers across the
  // step: without a tile, only while it and the accumulators take at most 35% of the file (more
  // spilled on gfx1100, bench/NOTES.md).
  p.stages = r.tile ? r.tile->stages : r.stages;
  const int tileRegs =
      2 * p.stepKeys() * p.headDim * elemTypeBits(p.elem) / (32 * p.waves * target.waveSize);
  if (!r.tile && 100 * (accRegs + tileRegs) > 35 * target.maxVgprsPerWave) p.stages = 1;
  return {};
}

} // namespace

AttnPlanResult planAttention(const AttnRequest &r, const TargetInfo &target) {
  const ElemType qkElem = r.qkElem.value_or(r.elem), pvElem = r.pvElem.value_or(r.elem);
  AtomChoice choice = chooseAtoms(target, qkElem);
  const std::vector<const MMAAtom *> &atoms = choice.atoms;
  AtomChoice pvChoice = pvElem == qkElem ? choice : chooseAtoms(target, pvElem);
  if (!pvChoice) choice.failure = pvChoice.failure;
  Verdict closest{Check::AtomShape, "none: " + choice.failure};
  bool seen = false;
  for (PRoute wanted : {PRoute::Registers, PRoute::Lds})
    for (const MMAAtom *qk : atoms)
      for (const MMAAtom *pv : pvChoice.atoms)
        for (bool transposed : {true, false})
          for (int waves : r.waves)
            for (int blockN : {64, 32, 16}) {
              if (blockN > r.maxKeysPerStep) continue;
              AttnPlan p;
              p.qk = qk, p.pv = pv, p.transposed = transposed;
              p.elem = qkElem, p.pvElem = pvElem, p.queryElem = r.elem;
              p.rescaleOnNewMaxOnly = r.rescaleOnNewMaxOnly;
              p.kvBuffers = r.kvBuffers;
              p.transposingLoads = target.transposingLoads(*pv);
              p.scaleInExp = r.scaleInExp && !p.scaledQueries();
              p.headDim = r.headDim;
              p.waves = r.tile ? r.tile->waves : waves;
              p.blockN = r.tile ? r.tile->n : blockN;
              p.blockM = r.tile ? r.tile->m : p.waves * p.queryDim();
              if (r.splitKeysAcrossWaves && !r.tile) p.keyWaves = p.waves, p.blockM = p.queryDim();
              Verdict v = check(p, r, target, wanted);
              if (v.failed == Check::Fits) return {std::move(p), {}};
              // The P route only orders the search: it is no reason.
              if (v.failed != Check::PRoute && (!seen || v.failed > closest.failed))
                closest = v, seen = true;
            }
  std::ostringstream why;
  why << "no tile configuration of " << target.chip << " atoms fits head_dim " << r.headDim
      << (r.tile ? " with the given tile" : "") << "; the closest, " << closest.why;
  return {std::nullopt, why.str()};
}

} // namespace tessera

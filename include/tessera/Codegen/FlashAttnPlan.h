// The portable flash_attn kernel's plan as plain data: which atoms compute S and P V, in which
// orientation, how P reaches the P V atom (registers or LDS), and the tile; chosen from the
// target's atoms with one named reason per rejected constraint. No MLIR: unit-tested alone.
#ifndef TESSERA_CODEGEN_FLASHATTNPLAN_H
#define TESSERA_CODEGEN_FLASHATTNPLAN_H

#include "tessera/Codegen/LdsLayout.h"
#include "tessera/Codegen/MMAAtom.h"
#include "tessera/Target/TargetInfo.h"

#include <optional>
#include <string>
#include <vector>

namespace tessera {

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

/// How P (the probabilities) reaches the P V atom.
enum class PRoute {
  Registers, ///< from the S accumulators, at most one shuffle away (AttnPlan::conversion)
  Lds,       ///< through an LDS tile
};

struct AttnPlan {
  const MMAAtom *qk = nullptr, *pv = nullptr;
  /// S^T = K Q^T: accumulator rows are keys and columns queries (queries along columns); else
  /// S = Q K^T.
  bool transposed = false;
  PRoute pRoute = PRoute::Lds;
  /// conversion[kstep][elem]: the source of each element of the P operand per PV k-step.
  std::vector<std::vector<AccSource>> conversion;
  int blockM = 0, blockN = 0, waves = 0, headDim = 0;
  bool tightRegisters = false; ///< accumulators near the budget: fence fragment loads per k-step
  int stages = 1;              ///< 2: the next K/V tile is loaded into registers during compute
  /// n > 1: K and V staged [key][d] in n LDS buffers each, the next n - 1 tiles copied
  /// asynchronously during compute (targets with async copies, a recipe that gathers
  /// asynchronously).
  int kvBuffers = 1;
  /// With V^T staged by the mainloop's own copy (transposesStagedV): the order of its columns
  /// within each P V k-step, operand column c holding key pvKeyOrder[c], so that every element
  /// of P's operand is one the lane holds in S (mma.sync's 8-bit operands, whose 4 consecutive
  /// keys a lane are 2 + 2 of S's). Empty: in key order.
  std::vector<int> pvKeyOrder;
  /// Waves that split each step's keys instead of the queries (decode: a KV head's group has
  /// few query rows): all waves hold the same blockM queries, wave w the keys [w * blockN,
  /// (w + 1) * blockN) of the step's stepKeys(); their softmax states merge after the loop.
  int keyWaves = 1;
  /// O is rescaled only in the steps where one of the lane's rows found a new max (its factor is
  /// exactly 1 otherwise: no bit changes). The forward and decode ask for it: a row's max rarely
  /// moves after the first tiles, and the rescale is a multiply per O element a step.
  bool rescaleOnNewMaxOnly = false;
  /// The scores stay raw (the max over raw scores) and the score scale is applied inside each
  /// exp2 as one fma with the shift, FlashAttention-2's order: a multiply less per score. Not
  /// with scaled queries, whose scale differs per row; under a soft cap (at run time) the capped
  /// scores are in the log2 domain and their scale is 1.
  bool scaleInExp = false;
  /// The target loads PV's atom operands with transposing matrix loads
  /// (TargetInfo::transposingLoads).
  bool transposingLoads = false;
  ElemType elem = ElemType::F16;      ///< Q's and K's in the QK product
  ElemType pvElem = ElemType::F16;    ///< P's and V's in the PV product
  ElemType queryElem = ElemType::F16; ///< the queries' own

  bool pInRegisters() const { return pRoute == PRoute::Registers; }
  /// V staged [key][d], read by transposing matrix loads; else V^T, [d][key].
  bool vNatural() const { return transposingLoads; }
  /// K/V buffers copied asynchronously where V^T is needed: V lands [key][d] in staging buffers
  /// and the mainloop transposes each step's tile into V^T, one [d][key] block per key wave.
  bool transposesStagedV() const { return kvBuffers > 1 && !vNatural(); }
  int queryDim() const { return transposed ? qk->n : qk->m; }  // queries per S tile
  int keyDim() const { return transposed ? qk->m : qk->n; }    // keys per S tile
  int waveQueries() const { return blockM / (waves / keyWaves); }
  int stepKeys() const { return blockN * keyWaves; } // keys staged per step
  int queryTiles() const { return waveQueries() / queryDim(); }
  int keyTiles() const { return blockN / keyDim(); }
  int headTiles() const { return headDim / (transposed ? pv->m : pv->n); }
  int pvKeyDim() const { return pv->k; }
  /// The P operand layout of the PV atom: B = P^T (keys x queries) when transposed, else
  /// A = P (queries x keys).
  const OperandLayout &pOperandLayout() const { return transposed ? pv->b : pv->a; }
  /// P needs cross-lane shuffles on its way to the PV atom.
  bool pShuffles() const;
  /// The queries enter the QK product in another type (bf16 queries on f16 with an fp8 cache,
  /// or on the cache's fp8 with fp8 products): each row scaled by a power of two into that
  /// type's range, the scores scaled back.
  bool scaledQueries() const { return queryElem != elem; }
  /// P on fp8 matrix instructions: the probabilities (at most 1) times this power of two, the
  /// largest the format holds, before they are rounded, so that they use its normal range
  /// rather than its subnormals; O is divided by it with the row sum. 0 otherwise.
  int pStretch() const {
    return elemTypeBits(pvElem) == 8 ? 1 << elemTypeTopExponent(pvElem) : 0;
  }
  /// The 16-byte vectors of a query row (the row maxima of scaled queries are reduced over them).
  int queryVectorsPerRow() const { return headDim * elemTypeBits(queryElem) / 128; }
};

/// What a flash_attn directive asks of the plan.
struct AttnRequest {
  int headDim = 0;
  ElemType elem = ElemType::F16;
  /// The products' input types where they differ from the queries' (an fp8 cache with bf16
  /// queries: K and V widen to f16 in one conversion, to bf16 in four on NVIDIA).
  std::optional<ElemType> qkElem, pvElem;
  bool slidingWindow = false, softcap = false;
  /// Wave counts to try, in order: each wave owns one atom tile of queries per step (decode
  /// asks for fewer: a KV head's group has few query rows).
  std::vector<int> waves = {4, 2};
  int maxKeysPerStep = 64;
  int stages = 1; ///< without a tile: 2 loads the next K/V tile into registers during compute
  /// The share of a wave's registers the O and S accumulators may take, in percent; 0: the
  /// forward's rule (40, 30 when P leaves registers, 5 less for a window and for a soft cap).
  int accBudgetPercent = 0;
  /// Waves split each step's keys (AttnPlan::keyWaves) where the atoms allow, with one atom
  /// tile of queries; else they split the queries.
  bool splitKeysAcrossWaves = false;
  /// AttnPlan::rescaleOnNewMaxOnly.
  bool rescaleOnNewMaxOnly = false;
  /// AttnPlan::kvBuffers (a recipe that copies K/V asynchronously).
  int kvBuffers = 1;
  /// AttnPlan::scaleInExp, where the queries are not scaled.
  bool scaleInExp = false;
  struct Tile {
    int m, n, waves, stages;
  };
  std::optional<Tile> tile; ///< an explicit tile (the directive's `tile`), else the planner picks
};

/// A plan, or why none fits: the constraint the closest candidate failed (the atoms' shapes, the
/// accumulator layouts, LDS, registers), naming the values involved.
struct AttnPlanResult {
  std::optional<AttnPlan> plan;
  std::string whyNot;
};

/// The first candidate (P in registers first, then the target's atom order, S^T before S, the
/// request's wave counts in order, then 64, 32, 16 keys per step) that passes every constraint.
AttnPlanResult planAttention(const AttnRequest &request, const TargetInfo &target);

/// Plans how every element of the P operand of each PV k-step is taken from the S accumulators
/// without LDS (p.conversion): from the same lane, or from one partner lane (a fixed XOR of the
/// lane id, one shuffle) with per-lane choices decided by single lane bits; where that fails and
/// the mainloop stages V^T itself, with V^T's columns reordered so that every element is the
/// lane's own (p.pvKeyOrder). False otherwise.
bool planRegisterConversion(AttnPlan &p);

/// Two elements of a P operand k-step that one half-wave swap delivers together
/// (KernelBuilder::swapWaveHalves of the accumulator elements `a` and `b` of their key tile):
/// element `lo` takes the swap's lower halves (its lower half-wave owns `a`, its upper receives
/// `b`), element `hi` the upper ones (its lower half-wave receives `a`, its upper owns `b`).
struct HalfSwapPair {
  int lo, hi; ///< elements of the k-step
  int a, b;   ///< elements of the key tile's accumulator
};

/// The pairs of `step`'s elements that exchange across the half-waves of `waveSize` lanes in
/// the pattern of one half-wave swap, each element in at most one pair.
std::vector<HalfSwapPair> halfSwapPairs(const std::vector<AccSource> &step, int waveSize);

/// The output accumulators hold, per lane, queries the S statistics hold (their slots).
bool sameQueryLanes(const AttnPlan &p);

/// LDS bytes of the plan's staged tiles: Q, K, V (or V^T), P when it goes through LDS, and the
/// merge of key-splitting waves. With `cacheElem` (a narrower cache, kvBuffers > 1) its tiles
/// land in kvBuffers staging buffers of that type and widen into one K and one V tile.
int attnLdsBytes(const AttnPlan &p, const TargetInfo &target,
                 std::optional<ElemType> cacheElem = std::nullopt);
/// Rows of stepKeys() f32 per-key scales the mainloop keeps in LDS: with K/V buffers in LDS
/// (kvBuffers > 1) K's and V's of each buffer's tile (row 2 b: K's, 2 b + 1: V's), else the
/// step's K scales.
inline int attnKeyScaleRows(const AttnPlan &p) { return p.kvBuffers > 1 ? 2 * p.kvBuffers : 1; }
/// f32 values per lane that the waves past the first hand over when the plan's waves split the
/// keys (AttnPlan::keyWaves): per query tile the S slots' max and sum (at most an S accumulator's
/// elements each) and the O accumulators.
int attnMergeFloats(const AttnPlan &p);

} // namespace tessera

#endif // TESSERA_CODEGEN_FLASHATTNPLAN_H

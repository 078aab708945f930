// The portable flash_attn planner: the plans it picks per target, its named rejections, and the
// register conversion of P checked lane by lane against the accumulator layouts.
#include "tessera/Codegen/FlashAttnPlan.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

using namespace tessera;

namespace {

AttnRequest request(int headDim, ElemType elem) {
  AttnRequest r;
  r.headDim = headDim;
  r.elem = elem;
  return r;
}

const TargetInfo &target(const char *chip) { return *lookupTarget(chip); }

/// Replays p.conversion on every lane as the kernel does (pOperand): the value each lane
/// assembles for P operand element e of k-step ks is the S accumulator element holding the
/// (query, key) that element's operand position needs.
void expectConversionDeliversP(const AttnPlan &p) {
  const OperandLayout &op = p.pOperandLayout(), &acc = p.qk->c;
  auto queryOf = [&](Coord c) { return p.transposed ? c.col : c.row; };
  auto keyOf = [&](Coord c) { return p.transposed ? c.row : c.col; };
  auto choose = [](const LaneChoice &c, int lane) {
    return c.laneBit < 0 ? c.elem[0] : c.elem[(lane >> c.laneBit) & 1];
  };
  ASSERT_EQ(int(p.conversion.size()), p.blockN / p.pvKeyDim());
  for (int ks = 0; ks < int(p.conversion.size()); ++ks)
    for (int e = 0; e < op.elementsPerLane(); ++e) {
      const AccSource &src = p.conversion[ks][e];
      for (int lane = 0; lane < op.lanes(); ++lane) {
        // The (lane, element) of the S tile the kernel reads for this lane.
        int fromLane = lane, fromElem = choose(src.ownElem, lane);
        if (src.xorMask && !choose(src.own, lane)) {
          fromLane = lane ^ src.xorMask;
          fromElem = choose(src.sendElem, fromLane); // what the partner sends
        }
        Coord want = op.at(lane, e), have = acc.at(fromLane, fromElem);
        const int col = keyOf(want); // V^T's column: the key pvKeyOrder puts there
        int wantKey = (p.pvKeyOrder.empty() ? col : p.pvKeyOrder[col]) + ks * p.pvKeyDim();
        EXPECT_EQ(queryOf(have), queryOf(want)) << p.qk->name << " ks " << ks << " e " << e;
        EXPECT_EQ(src.keyTile * p.keyDim() + keyOf(have), wantKey)
            << p.qk->name << " ks " << ks << " e " << e << " lane " << lane;
      }
    }
}

TEST(FlashAttnPlan, PicksTheMeasuredPlanPerTarget) {
  struct Want {
    const char *chip;
    int headDim;
    bool transposed;
    PRoute route;
    int blockM, blockN, waves;
  };
  // The plans the default bundles ship (LDS 53760 B at gfx942 D128: docs/amd-report.md): MFMA
  // and WMMA compute S^T with P in registers (WMMA and gfx950's MFMA a shuffle away), mma.sync S.
  for (const Want &w : {Want{"gfx942", 128, true, PRoute::Registers, 128, 32, 4},
                        Want{"gfx942", 64, true, PRoute::Registers, 128, 64, 4},
                        Want{"gfx950", 128, true, PRoute::Registers, 128, 64, 4},
                        Want{"gfx1100", 128, true, PRoute::Registers, 64, 16, 4},
                        Want{"sm_90", 128, false, PRoute::Registers, 64, 64, 4}}) {
    AttnPlanResult r = planAttention(request(w.headDim, ElemType::BF16), target(w.chip));
    ASSERT_TRUE(r.plan) << w.chip << ": " << r.whyNot;
    const AttnPlan &p = *r.plan;
    EXPECT_EQ(p.transposed, w.transposed) << w.chip;
    EXPECT_EQ(p.pRoute, w.route) << w.chip;
    EXPECT_EQ(p.blockM, w.blockM) << w.chip;
    EXPECT_EQ(p.blockN, w.blockN) << w.chip;
    EXPECT_EQ(p.waves, w.waves) << w.chip;
    EXPECT_LE(attnLdsBytes(p, target(w.chip)), target(w.chip).ldsBytes) << w.chip;
  }
  AttnPlanResult gfx942 = planAttention(request(128, ElemType::BF16), target("gfx942"));
  EXPECT_EQ(attnLdsBytes(*gfx942.plan, target("gfx942")), 53760);
  EXPECT_FALSE(gfx942.plan->pShuffles());
  AttnPlanResult gfx950 = planAttention(request(128, ElemType::BF16), target("gfx950"));
  EXPECT_TRUE(gfx950.plan->pShuffles());
}

TEST(FlashAttnPlan, EveryShippedVariantHasAPlanThatFits) {
  for (const char *chip : {"gfx942", "gfx950", "gfx1100", "gfx1151", "sm_90"})
    for (ElemType elem : {ElemType::F16, ElemType::BF16})
      for (int headDim : {32, 64, 96, 128, 256})
        for (bool extras : {false, true}) {
          AttnRequest r = request(headDim, elem);
          r.slidingWindow = r.softcap = extras;
          AttnPlanResult result = planAttention(r, target(chip));
          ASSERT_TRUE(result.plan) << chip << " D" << headDim << ": " << result.whyNot;
          const AttnPlan &p = *result.plan;
          EXPECT_EQ(p.elem, elem);
          EXPECT_EQ(p.qk->inputType, elem);
          EXPECT_EQ(p.blockM % (p.waves * p.queryDim()), 0);
          EXPECT_EQ(headDim % p.qk->k, 0);
          EXPECT_LE(attnLdsBytes(p, target(chip)), target(chip).ldsBytes);
          EXPECT_TRUE(sameQueryLanes(p));
          if (p.pInRegisters()) expectConversionDeliversP(p);
        }
}

TEST(FlashAttnPlan, RegisterConversionOnEveryAtomPair) {
  // Every same-target atom pair and orientation: a conversion the planner accepts delivers P.
  int accepted = 0;
  for (const char *chip : {"gfx942", "gfx950", "gfx1100", "sm_90"})
    for (MMAIntrinsic qkId : target(chip).atoms)
      for (MMAIntrinsic pvId : target(chip).atoms) {
        const MMAAtom *qk = &getAtom(qkId), *pv = &getAtom(pvId);
        if (qk->inputType != pv->inputType) continue;
        for (bool transposed : {true, false}) {
          AttnPlan p;
          p.qk = qk, p.pv = pv, p.transposed = transposed, p.blockN = 64, p.headDim = 128;
          if (planRegisterConversion(p)) {
            ++accepted;
            expectConversionDeliversP(p);
          }
        }
      }
  EXPECT_GT(accepted, 4);
}

/// Replays the half-wave swaps of every k-step lane by lane: each paired element gets, on every
/// lane, the (lane, accumulator element) the conversion names. Returns the elements paired.
int expectHalfSwapsDeliverP(const AttnPlan &p) {
  const OperandLayout &op = p.pOperandLayout();
  const int lanes = op.lanes(), half = lanes / 2;
  auto choose = [](const LaneChoice &c, int lane) {
    return c.laneBit < 0 ? c.elem[0] : c.elem[(lane >> c.laneBit) & 1];
  };
  int paired = 0;
  for (const std::vector<AccSource> &step : p.conversion)
    for (const HalfSwapPair &pair : halfSwapPairs(step, lanes)) {
      paired += 2;
      EXPECT_EQ(step[pair.lo].keyTile, step[pair.hi].keyTile);
      for (int lane = 0; lane < lanes; ++lane)
        for (bool lo : {true, false}) {
          const AccSource &src = step[lo ? pair.lo : pair.hi];
          // The conversion's source of this lane's element ...
          int fromLane = lane, fromElem = choose(src.ownElem, lane);
          if (src.xorMask && !choose(src.own, lane)) {
            fromLane = lane ^ src.xorMask;
            fromElem = choose(src.sendElem, fromLane);
          }
          // ... and the swap's: lo = a's lower halves then b's, hi = a's upper then b's.
          int swapLane = lane < half ? (lo ? lane : lane + half) : (lo ? lane - half : lane);
          int swapElem = lane < half ? pair.a : pair.b;
          EXPECT_EQ(swapLane, fromLane) << p.qk->name << " lane " << lane << (lo ? " lo" : " hi");
          EXPECT_EQ(swapElem, fromElem) << p.qk->name << " lane " << lane << (lo ? " lo" : " hi");
        }
    }
  return paired;
}

TEST(FlashAttnPlan, HalfWaveSwapsDeliverP) {
  // Every accepted conversion: the swaps found deliver what its shuffles would.
  for (const char *chip : {"gfx942", "gfx950", "gfx1100", "sm_90"})
    for (MMAIntrinsic qkId : target(chip).atoms)
      for (MMAIntrinsic pvId : target(chip).atoms) {
        const MMAAtom *qk = &getAtom(qkId), *pv = &getAtom(pvId);
        if (qk->inputType != pv->inputType) continue;
        for (bool transposed : {true, false}) {
          AttnPlan p;
          p.qk = qk, p.pv = pv, p.transposed = transposed, p.blockN = 64, p.headDim = 128;
          if (planRegisterConversion(p)) expectHalfSwapsDeliverP(p);
        }
      }
  // gfx950's plans (32x32x16, P^T from across the half-waves): every element by a swap.
  for (ElemType elem : {ElemType::F16, ElemType::BF16})
    for (int headDim : {64, 128}) {
      AttnPlanResult r = planAttention(request(headDim, elem), target("gfx950"));
      ASSERT_TRUE(r.plan) << r.whyNot;
      ASSERT_TRUE(r.plan->pShuffles());
      int elements = 0;
      for (const std::vector<AccSource> &step : r.plan->conversion) elements += int(step.size());
      EXPECT_EQ(expectHalfSwapsDeliverP(*r.plan), elements) << "head_dim " << headDim;
    }
}

TEST(FlashAttnPlan, RejectionNamesTheLimitThatFailed) {
  AttnRequest lds = request(256, ElemType::BF16);
  lds.tile = AttnRequest::Tile{256, 128, 4, 1};
  AttnPlanResult r = planAttention(lds, target("gfx942"));
  ASSERT_FALSE(r.plan);
  EXPECT_NE(r.whyNot.find("no tile configuration of gfx942 atoms fits head_dim 256 with the given "
                          "tile"),
            std::string::npos)
      << r.whyNot;
  EXPECT_NE(r.whyNot.find("bytes of LDS, gfx942 has 65536"), std::string::npos) << r.whyNot;

  AttnRequest shape = request(128, ElemType::F16);
  shape.tile = AttnRequest::Tile{48, 64, 4, 1}; // 12 queries per wave: no atom tile
  r = planAttention(shape, target("gfx942"));
  ASSERT_FALSE(r.plan);
  EXPECT_NE(r.whyNot.find("do not split into the waves' atom tiles"), std::string::npos)
      << r.whyNot;

  AttnRequest fp8 = request(128, ElemType::FP8E4M3FN);
  r = planAttention(fp8, target("gfx1100"));
  ASSERT_FALSE(r.plan);
  EXPECT_NE(r.whyNot.find("gfx1100"), std::string::npos) << r.whyNot;
  EXPECT_NE(r.whyNot.find("fp8"), std::string::npos) << r.whyNot;
}

TEST(FlashAttnPlan, LdsBytesFollowTheTargetsTileLayout) {
  // Padding targets add one 16-byte chunk per row; swizzling ones none.
  EXPECT_EQ(ldsTileBytes(target("gfx942"), ElemType::BF16, 64, 128), 64 * (128 + 8) * 2);
  EXPECT_EQ(ldsTileBytes(target("gfx942"), ElemType::FP8E4M3FNUZ, 64, 128), 64 * (128 + 16));
  const TargetInfo &sm90 = target("sm_90");
  int pad = sm90.ldsSwizzle == LdsSwizzle::Pad ? 8 : 0;
  EXPECT_EQ(ldsTileBytes(sm90, ElemType::F16, 64, 128), 64 * (128 + pad) * 2);
}

} // namespace

namespace {

TEST(FlashAttnPlan, Fp8ProductsQuantiseQueriesAndStretchP) {
  // fp8 products (decode's fp8_products): both atoms read the chip's own e4m3, the queries are
  // scaled into it, and P is stretched by the largest power of two the format holds.
  for (auto [chip, fp8, stretch] : {std::tuple{"gfx942", ElemType::FP8E4M3FNUZ, 128},
                                    std::tuple{"gfx950", ElemType::FP8E4M3FN, 256}}) {
    AttnRequest r = request(128, ElemType::BF16);
    r.qkElem = r.pvElem = fp8;
    AttnPlanResult result = planAttention(r, target(chip));
    ASSERT_TRUE(result.plan) << chip << ": " << result.whyNot;
    const AttnPlan &p = *result.plan;
    EXPECT_EQ(p.qk->inputType, fp8) << chip;
    EXPECT_EQ(p.pv->inputType, fp8) << chip;
    EXPECT_TRUE(p.scaledQueries()) << chip;
    EXPECT_EQ(p.pStretch(), stretch) << chip;
    if (p.pInRegisters()) expectConversionDeliversP(p);
  }
  AttnRequest half = request(128, ElemType::F16);
  AttnPlanResult r = planAttention(half, target("gfx942"));
  ASSERT_TRUE(r.plan);
  EXPECT_EQ(r.plan->pStretch(), 0); // a half-precision P is rounded as it is
  EXPECT_EQ(elemTypeTopExponent(ElemType::F16), 15);
  EXPECT_EQ(elemTypeTopExponent(ElemType::FP8E4M3FN), 8);
  EXPECT_EQ(elemTypeTopExponent(ElemType::FP8E4M3FNUZ), 7);
}

TEST(FlashAttnPlan, Fp8ProductsOnMmaSyncReorderVTransposedColumns) {
  // sm_90's e4m3 mma.sync: a lane's 4 consecutive keys of P's operand are 2 + 2 of S's
  // accumulators 8 keys apart, so P reaches the PV atom only through V^T columns in another
  // order (16 b + 4 t + i holds key 16 b + 8 (i / 2) + 2 t + i % 2), which the mainloop's own
  // transposing copy of V can give (K/V buffers) and ldmatrix.trans could not.
  AttnRequest r = request(128, ElemType::BF16);
  r.qkElem = r.pvElem = ElemType::FP8E4M3FN;
  r.splitKeysAcrossWaves = true;
  r.waves = {2};
  r.kvBuffers = 2;
  AttnPlanResult result = planAttention(r, target("sm_90"));
  ASSERT_TRUE(result.plan) << result.whyNot;
  const AttnPlan &p = *result.plan;
  EXPECT_EQ(p.pv->intrinsic, MMAIntrinsic::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN);
  EXPECT_FALSE(p.transposed);
  EXPECT_TRUE(p.transposesStagedV());
  ASSERT_TRUE(p.pInRegisters());
  EXPECT_FALSE(p.pShuffles()); // every element the lane's own
  std::vector<int> order;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < 4; ++i) order.push_back(16 * b + 8 * (i / 2) + 2 * t + i % 2);
  EXPECT_EQ(p.pvKeyOrder, order);
  expectConversionDeliversP(p);
  // Without a copy of its own to reorder V^T (registers staging), P goes through LDS.
  r.kvBuffers = 1;
  result = planAttention(r, target("sm_90"));
  EXPECT_FALSE(result.plan && result.plan->pInRegisters() && !result.plan->pvKeyOrder.empty());
  // 16-bit mma.sync keeps V [key][d] (ldmatrix.trans) and its keys in order.
  AttnRequest half = request(128, ElemType::BF16);
  half.kvBuffers = 2;
  half.splitKeysAcrossWaves = true;
  result = planAttention(half, target("sm_90"));
  ASSERT_TRUE(result.plan);
  EXPECT_TRUE(result.plan->vNatural());
  EXPECT_TRUE(result.plan->pvKeyOrder.empty());
}

} // namespace

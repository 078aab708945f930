// The portable flash_attn_bwd planner: a plan for every head_dim and element type on every target,
// whose tiles fit the target and the atom, and its named rejections of a given tile.
#include "tessera/Codegen/FlashAttnBwdPlan.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace tessera;

namespace {

const TargetInfo &target(const char *chip) { return *lookupTarget(chip); }

void expectTiles(const WaveTiles &w, const MMAAtom &atom) {
  EXPECT_EQ(w.rows % atom.m, 0);
  EXPECT_EQ(w.cols % atom.n, 0);
  // The wave grid covers the tiles exactly, within the workgroup.
  EXPECT_LE(w.activeWaves(), w.waves);
  EXPECT_EQ(w.blockRows() * w.waveRows, w.tilesDown());
  EXPECT_EQ(w.blockCols() * w.waveCols, w.tilesAcross());
}

TEST(FlashAttnBwdPlan, EveryTargetHeadDimAndTypeHasAPlanThatFits) {
  for (const char *chip : {"gfx942", "gfx950", "gfx1100", "gfx1151", "sm_80", "sm_90", "sm_90a"})
    for (ElemType elem : {ElemType::F16, ElemType::BF16})
      for (int d : {32, 64, 96, 128, 256}) {
        SCOPED_TRACE(std::string(chip) + " D" + std::to_string(d));
        const TargetInfo &t = target(chip);
        AttnBwdPlanResult r = planAttentionBwd(d, elem, t);
        ASSERT_TRUE(r.plan) << r.whyNot;
        const AttnBwdPlan &p = *r.plan;
        EXPECT_EQ(p.atom->m, 16);
        EXPECT_EQ(p.atom->inputType, elem);
        EXPECT_EQ(p.threads(), 256);
        int lds = std::max(attnBwdMainLdsBytes(p, t), attnBwdDqLdsBytes(p, t));
        EXPECT_LE(lds, attnBwdLdsLimit(t));
        EXPECT_EQ(p.dynamicLds, lds > t.ldsBytes); // only Hopper opts in beyond the static limit
        if (p.dynamicLds) {
          EXPECT_EQ(t.arch, "Hopper");
        }
        for (const WaveTiles &w : {p.scores(), p.keyGrads(), p.queryGrads(), p.dqScores(), p.dqGrads()})
          expectTiles(w, *p.atom);
        // Each product's reduction is whole k-steps.
        for (int depth : {p.headDim, p.blockM, p.blockN, p.dqBlockN})
          EXPECT_EQ(depth % p.atom->k, 0) << depth;
      }
}

TEST(FlashAttnBwdPlan, PrefersLargeKeyBlocks) {
  AttnBwdPlanResult r = planAttentionBwd(64, ElemType::BF16, target("gfx942"));
  ASSERT_TRUE(r.plan);
  EXPECT_EQ(r.plan->blockN, 64);
  EXPECT_EQ(r.plan->waves, 4);
  EXPECT_FALSE(r.plan->dynamicLds);
  // sm_90: past the 48 KiB of static shared memory into the opt-in dynamic kind.
  r = planAttentionBwd(128, ElemType::BF16, target("sm_90"));
  ASSERT_TRUE(r.plan);
  EXPECT_EQ(r.plan->waves, 8);
  EXPECT_EQ(r.plan->blockN, 128); // FlashAttention-2's 128 keys x 64 queries
  EXPECT_EQ(r.plan->blockM, 64);
  EXPECT_TRUE(r.plan->dynamicLds);
}

TEST(FlashAttnBwdPlan, StreamsAreDoubleBufferedWhereTheTargetCopiesAsynchronously) {
  // One buffer without asynchronous copies; two where LDS allows (Hopper's 227 KiB: up to D128
  // for both kernels), else the same tile with one (Ampere's 48 KiB of static shared memory).
  for (const char *chip : {"gfx942", "gfx950", "gfx1100", "sm_80", "sm_90", "sm_90a"})
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE(std::string(chip) + " D" + std::to_string(d));
      const TargetInfo &t = target(chip);
      AttnBwdPlanResult r = planAttentionBwd(d, ElemType::BF16, t);
      ASSERT_TRUE(r.plan) << r.whyNot;
      const int most = t.hasAsyncCopy ? 2 : 1;
      EXPECT_TRUE(r.plan->queryBuffers >= 1 && r.plan->queryBuffers <= most);
      EXPECT_TRUE(r.plan->keyBuffers >= 1 && r.plan->keyBuffers <= most);
      if (t.arch == "Hopper" && d <= 128) {
        EXPECT_EQ(r.plan->queryBuffers, 2);
        EXPECT_EQ(r.plan->keyBuffers, 2);
      }
    }
  // The second buffers count in the LDS: sm_90 D128's main kernel holds two Q and dO blocks.
  AttnBwdPlan p = *planAttentionBwd(128, ElemType::BF16, target("sm_90")).plan;
  int two = attnBwdMainLdsBytes(p, target("sm_90"));
  p.queryBuffers = 1;
  EXPECT_EQ(two - attnBwdMainLdsBytes(p, target("sm_90")),
            2 * p.blockM * p.headDim * 2 + 2 * 4 * p.blockM);
  // Where two do not fit a tile, it keeps the tile with one buffer (sm_80: 48 KiB, static).
  AttnBwdPlan ampere = *planAttentionBwd(128, ElemType::BF16, target("sm_80")).plan;
  EXPECT_LE(attnBwdMainLdsBytes(ampere, target("sm_80")), 48 * 1024);
}

TEST(FlashAttnBwdPlan, RejectsAGivenTileWithTheLimitItFails) {
  const TargetInfo &gfx942 = target("gfx942");
  AttnBwdPlanResult lds = planAttentionBwd(128, ElemType::BF16, gfx942, AttnBwdTile{48, 64, 4});
  EXPECT_FALSE(lds.plan);
  EXPECT_NE(lds.whyNot.find("bytes of LDS, gfx942 has 65536"), std::string::npos) << lds.whyNot;
  AttnBwdPlanResult shape = planAttentionBwd(64, ElemType::F16, gfx942, AttnBwdTile{24, 64, 4});
  EXPECT_FALSE(shape.plan);
  EXPECT_NE(shape.whyNot.find("does not tile with v_mfma_f32_16x16x16_f16"), std::string::npos)
      << shape.whyNot;
  AttnBwdPlanResult regs = planAttentionBwd(128, ElemType::F16, gfx942, AttnBwdTile{16, 32, 1});
  EXPECT_FALSE(regs.plan);
  EXPECT_NE(regs.whyNot.find("registers per lane"), std::string::npos) << regs.whyNot;
  AttnBwdPlanResult waves = planAttentionBwd(64, ElemType::F16, gfx942, AttnBwdTile{32, 64, 32});
  EXPECT_FALSE(waves.plan);
  EXPECT_NE(waves.whyNot.find("outside 1 to 1024 threads"), std::string::npos) << waves.whyNot;
}

TEST(FlashAttnBwdPlan, WavesOwnBlocksThatReadTheLeastLds) {
  // dK of 64 x 128 in m16n8 tiles over 8 waves: 2 x 4 blocks (32 rows + 32 columns of fragments
  // per k-step), not strips of 1 x 8 (16 + 64) or 4 x 2 (64 + 16).
  WaveTiles w = dealTiles(64, 128, 16, 8, 8);
  EXPECT_EQ(w.activeWaves(), 8);
  EXPECT_EQ(w.blockRows(), 2);
  EXPECT_EQ(w.blockCols(), 4);
  EXPECT_EQ(w.perWave(), 8);
  // 2 x 6 tiles of 16 x 16: at most 6 of 8 waves busy, one block of two tiles each.
  WaveTiles six = dealTiles(32, 96, 16, 16, 8);
  EXPECT_EQ(six.activeWaves(), 6);
  EXPECT_EQ(six.perWave(), 2);
  // A single tile: one wave, the others idle.
  WaveTiles one = dealTiles(16, 16, 16, 16, 4);
  EXPECT_EQ(one.activeWaves(), 1);
  EXPECT_EQ(one.perWave(), 1);
}

TEST(FlashAttnBwdPlan, MmaSyncBlocksSpanPairsOfColumnTiles) {
  // dQ of 64 queries x head_dim 96 in m16n8 tiles over 8 waves: 2 x 3 blocks read the least LDS,
  // but an odd count of 8-column tiles leaves one unpaired (an ldmatrix.x2; on Hopper its dQ
  // partials added element by element): 1 x 6 blocks, all 8 waves still busy.
  EXPECT_EQ(dealTiles(64, 96, 16, 8, 8).blockCols(), 3);
  WaveTiles paired = dealTiles(64, 96, 16, 8, 8, /*colGroup=*/2);
  EXPECT_EQ(paired.activeWaves(), 8);
  EXPECT_EQ(paired.blockRows(), 1);
  EXPECT_EQ(paired.blockCols(), 6);
  // Pairs never cost busy waves: 3 column tiles cannot pair, so they are dealt as before.
  EXPECT_EQ(dealTiles(64, 24, 16, 8, 8, 2).activeWaves(), dealTiles(64, 24, 16, 8, 8).activeWaves());
  AttnBwdPlanResult r = planAttentionBwd(96, ElemType::BF16, target("sm_90"));
  ASSERT_TRUE(r.plan);
  for (const WaveTiles &w : {r.plan->scores(), r.plan->keyGrads(), r.plan->queryGrads(),
                             r.plan->dqScores(), r.plan->dqGrads()})
    EXPECT_EQ(w.blockCols() % 2, 0);
}

TEST(FlashAttnBwdPlan, MmaSyncDqKernelAboveHeadDim128UsesSixtyFourRows) {
  // FlashAttention-2's 64 x 64 at head_dim 256 (its 128 x 64 spilled under ptxas; bench/NOTES.md);
  // 128 query rows up to head_dim 128 on Hopper (Ampere's 48 KiB of static shared memory takes less).
  for (const char *chip : {"sm_90", "sm_90a"})
    for (int d : {64, 128, 256}) {
      AttnBwdPlanResult r = planAttentionBwd(d, ElemType::BF16, target(chip));
      ASSERT_TRUE(r.plan);
      EXPECT_EQ(r.plan->dqBlockM, d > 128 ? 64 : 128) << chip << " D" << d;
    }
  AttnBwdPlanResult r = planAttentionBwd(256, ElemType::BF16, target("sm_90"));
  EXPECT_EQ(r.plan->dqBlockN, 64);
}

TEST(FlashAttnBwdPlan, FragmentsPrefetchedWhereMeasuredFaster) {
  // mma.sync at head_dim 96 and 128 only (bench/NOTES.md); never on AMD's atoms.
  for (const char *chip : {"sm_80", "sm_90", "sm_90a", "gfx942", "gfx950", "gfx1100"})
    for (int d : {32, 64, 96, 128, 256}) {
      AttnBwdPlanResult r = planAttentionBwd(d, ElemType::BF16, target(chip));
      ASSERT_TRUE(r.plan);
      EXPECT_EQ(r.plan->prefetchFragments,
                (d == 96 || d == 128) && target(chip).vendor == Vendor::NVIDIA)
          << chip << " D" << d;
    }
}

} // namespace

// Unit tests of the target table: lookup, wave sizes, atoms per chip, fp8 flavour and occupancy.
#include "tessera/Target/TargetInfo.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace {
using namespace tessera;

// Each chip Tessera must know, with the wave size its matrix atoms are written for.
const std::vector<std::pair<std::string, int>> kChipWaveSizes = {
    {"gfx942", 64}, {"gfx950", 64}, {"gfx1100", 32}, {"gfx1151", 32}, {"sm_90", 32}};

const TargetInfo &target(const std::string &chip) {
  if (const TargetInfo *t = lookupTarget(chip)) return *t;
  throw std::invalid_argument("no target " + chip);
}

// gfx950's double-K 16-bit MFMAs: 16x16x32 and 32x32x16 (gfx942 has these shapes for fp8 only).
bool hasDoubleK16BitAtom(const TargetInfo &t) {
  for (MMAIntrinsic i : t.atoms) {
    const MMAAtom &a = getAtom(i);
    if (elemTypeBits(a.inputType) == 16 && ((a.m == 16 && a.k == 32) || (a.m == 32 && a.k == 16))) return true;
  }
  return false;
}

std::vector<MMAIntrinsic> chosen(const TargetInfo &t, ElemType input, std::optional<AtomShape> shape = std::nullopt) {
  std::vector<MMAIntrinsic> out;
  for (const MMAAtom *a : chooseAtoms(t, input, shape).atoms) out.push_back(a->intrinsic);
  return out;
}

TEST(TargetInfo, LooksUpKnownChipsOnly) {
  for (const auto &[chip, wave] : kChipWaveSizes) EXPECT_NE(lookupTarget(chip), nullptr) << chip;
  EXPECT_EQ(lookupTarget("gfx9000"), nullptr);
  EXPECT_EQ(lookupTarget(""), nullptr);
}

TEST(TargetInfo, WaveSizes) {
  for (const auto &[chip, wave] : kChipWaveSizes) EXPECT_EQ(target(chip).waveSize, wave) << chip;
}

TEST(TargetInfo, EveryListedAtomResolvesWithTheTargetsWaveSize) {
  for (const TargetInfo &t : allTargets()) {
    EXPECT_FALSE(t.atoms.empty()) << t.chip;
    for (MMAIntrinsic i : t.atoms) EXPECT_EQ(getAtom(i).waveSize, t.waveSize) << t.chip << ": " << getAtom(i).name;
  }
}

TEST(TargetInfo, PreferredAtomHasTheRequestedInputType) {
  for (const auto &[chip, wave] : kChipWaveSizes)
    for (ElemType input : {ElemType::F16, ElemType::BF16}) {
      const MMAAtom *atom = target(chip).preferredAtom(input);
      ASSERT_NE(atom, nullptr) << chip << " " << elemTypeName(input);
      EXPECT_EQ(atom->inputType, input) << chip << ": " << atom->name;
    }
}

TEST(TargetInfo, DoubleKAtomsOnlyOnGfx950) {
  EXPECT_FALSE(hasDoubleK16BitAtom(target("gfx942")));
  EXPECT_TRUE(hasDoubleK16BitAtom(target("gfx950")));
}

// Transposing matrix loads: ldmatrix .trans for mma.sync's 16-bit atoms; ds_read_b64_tr_b16 for every
// 16-bit MFMA on gfx950 (each fragment is runs of 4 k in lane quads at consecutive rows/columns);
// never for 8-bit elements, WMMA or gfx942.
TEST(TargetInfo, TransposingLoads) {
  for (const std::string chip : {"gfx942", "gfx950", "gfx1100", "sm_90"}) {
    const TargetInfo &t = target(chip);
    for (MMAIntrinsic i : t.atoms) {
      const MMAAtom &a = getAtom(i);
      SCOPED_TRACE(chip + " " + a.name);
      const bool sixteen = elemTypeBits(a.inputType) == 16;
      const bool expected = sixteen && (a.kind == AtomKind::MMASync || (chip == "gfx950" && a.kind == AtomKind::MFMA));
      EXPECT_EQ(t.transposingLoads(a), expected);
      if (a.kind == AtomKind::MFMA && sixteen) {
        EXPECT_TRUE(a.a.transposeReadsFit(/*isB=*/false));
        EXPECT_TRUE(a.b.transposeReadsFit(/*isB=*/true));
        // Read along the wrong dimension the runs are not along K.
        EXPECT_FALSE(a.b.transposeReadsFit(/*isB=*/false));
      }
    }
  }
}

TEST(ChooseAtoms, Fp8MfmaInEachChipsOwnFormat) {
  using I = MMAIntrinsic;
  EXPECT_EQ(chosen(target("gfx942"), ElemType::FP8E4M3FNUZ),
            (std::vector<I>{I::MFMA_F32_32x32x16_F8E4M3FNUZ, I::MFMA_F32_16x16x32_F8E4M3FNUZ}));
  EXPECT_EQ(chosen(target("gfx950"), ElemType::FP8E4M3FN),
            (std::vector<I>{I::MFMA_F32_32x32x16_F8E4M3FN, I::MFMA_F32_16x16x32_F8E4M3FN}));
  // Every listed fp8 atom reads the target's own e4m3 flavour.
  for (const TargetInfo &t : allTargets())
    for (MMAIntrinsic i : t.atoms) {
      const ElemType input = getAtom(i).inputType;
      EXPECT_TRUE(elemTypeBits(input) != 8 || t.fp8 == input) << t.chip << ": " << stringifyMMAIntrinsic(i);
    }
}

TEST(ChooseAtoms, Fp8WhereTheTargetHasNoneFailsWithTheReason) {
  AtomChoice wrongFormat = chooseAtoms(target("gfx942"), ElemType::FP8E4M3FN);
  EXPECT_FALSE(wrongFormat);
  EXPECT_EQ(wrongFormat.failure,
            "gfx942 has no matrix instruction for f8E4M3FN inputs: its fp8 e4m3 format is f8E4M3FNUZ");
  EXPECT_EQ(chooseAtoms(target("gfx950"), ElemType::FP8E4M3FNUZ).failure,
            "gfx950 has no matrix instruction for f8E4M3FNUZ inputs: its fp8 e4m3 format is f8E4M3FN");
  EXPECT_EQ(chooseAtoms(target("gfx1100"), ElemType::FP8E4M3FNUZ).failure,
            "gfx1100 has no matrix instruction for f8E4M3FNUZ inputs: RDNA3 has no fp8 matrix instructions");
  EXPECT_EQ(chooseAtoms(target("sm_90"), ElemType::FP8E4M3FNUZ).failure,
            "sm_90 has no matrix instruction for f8E4M3FNUZ inputs: its fp8 e4m3 format is f8E4M3FN");
  // Hopper's mma.sync reads OCP e4m3 (m16n8k32); Ampere and RDNA3 read no fp8.
  for (const char *chip : {"sm_90", "sm_90a"})
    EXPECT_EQ(chooseAtoms(target(chip), ElemType::FP8E4M3FN).atoms,
              std::vector<const MMAAtom *>{&getAtom(MMAIntrinsic::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN)})
        << chip;
  for (const char *chip : {"gfx1100", "gfx1151", "sm_80"})
    for (MMAIntrinsic i : target(chip).atoms) EXPECT_NE(elemTypeBits(getAtom(i).inputType), 8) << chip;
}

TEST(ChooseAtoms, ByShape) {
  using I = MMAIntrinsic;
  EXPECT_EQ(chosen(target("gfx950"), ElemType::BF16, AtomShape{16, 16, 0}),
            (std::vector<I>{I::MFMA_F32_16x16x32_BF16, I::MFMA_F32_16x16x16_BF16}));
  EXPECT_EQ(chosen(target("gfx950"), ElemType::F16, AtomShape{32, 32, 8}), (std::vector<I>{I::MFMA_F32_32x32x8_F16}));
  AtomChoice none = chooseAtoms(target("gfx942"), ElemType::F16, AtomShape{32, 32, 16});
  EXPECT_FALSE(none);
  EXPECT_EQ(none.failure, "gfx942 has no f16 matrix instruction of shape 32x32x16; it has v_mfma_f32_32x32x8_f16 "
                          "(32x32x8), v_mfma_f32_16x16x16_f16 (16x16x16)");
  EXPECT_EQ(chooseAtoms(target("sm_90"), ElemType::BF16, AtomShape{16, 16, 0}).failure,
            "sm_90 has no bf16 matrix instruction of shape 16x16x?; it has "
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (16x8x16)");
}

TEST(ChooseAtoms, PreferredAtomIsTheFirstChoice) {
  for (const TargetInfo &t : allTargets())
    for (ElemType input : {ElemType::F16, ElemType::BF16, ElemType::FP8E4M3FNUZ, ElemType::FP8E4M3FN}) {
      AtomChoice choice = chooseAtoms(t, input);
      EXPECT_EQ(t.preferredAtom(input), choice ? choice.atoms.front() : nullptr) << t.chip;
      EXPECT_EQ(choice.failure.empty(), bool(choice)) << t.chip;
    }
}

TEST(TargetInfo, Fp8Flavour) {
  EXPECT_EQ(target("gfx942").fp8, ElemType::FP8E4M3FNUZ);
  EXPECT_EQ(target("gfx950").fp8, ElemType::FP8E4M3FN);
  EXPECT_EQ(target("sm_90").fp8, ElemType::FP8E4M3FN);
  EXPECT_EQ(target("gfx1100").fp8, std::nullopt);
}

TEST(TargetInfo, OccupancyLimitedByRegisters) {
  const TargetInfo &gfx942 = target("gfx942");
  EXPECT_EQ(gfx942.occupancy(128, 0, 4), 4);
  EXPECT_EQ(gfx942.occupancy(256, 0, 4), 2);
  EXPECT_EQ(gfx942.occupancy(512, 0, 4), 1);
  // Registers are allocated in granules of 8: 85 takes 88, so 5 waves fit in 512, not 6.
  EXPECT_EQ(gfx942.occupancy(85, 0, 4), 5);
  // Few registers: capped by the SIMD's wave slots.
  EXPECT_EQ(gfx942.occupancy(32, 0, 4), 8);
}

TEST(TargetInfo, OccupancyLimitedByLds) {
  // One 4-wave workgroup fills gfx942's 64 KiB, so each of the 4 SIMDs gets one wave despite few registers.
  EXPECT_EQ(target("gfx942").occupancy(64, 64 * 1024, 4), 1);
}

TEST(TargetInfo, KnownTargetNamesListsEveryChip) {
  const std::string names = knownTargetNames();
  for (const auto &[chip, wave] : kChipWaveSizes) EXPECT_NE(names.find(chip), std::string::npos) << chip;
}

} // namespace

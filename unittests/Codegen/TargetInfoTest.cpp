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

// gfx950's double-K MFMAs: 16x16x32 and 32x32x16.
bool hasDoubleKAtom(const TargetInfo &t) {
  for (const std::string &name : t.atoms)
    if (const MMAAtom *a = findAtom(name); a && ((a->m == 16 && a->k == 32) || (a->m == 32 && a->k == 16))) return true;
  return false;
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
    for (const std::string &name : t.atoms) {
      const MMAAtom *atom = findAtom(name);
      ASSERT_NE(atom, nullptr) << t.chip << " lists unknown atom " << name;
      EXPECT_EQ(atom->waveSize, t.waveSize) << t.chip << ": " << name;
    }
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
  EXPECT_FALSE(hasDoubleKAtom(target("gfx942")));
  EXPECT_TRUE(hasDoubleKAtom(target("gfx950")));
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

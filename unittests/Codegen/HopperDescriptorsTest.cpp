// Pins the wgmma descriptor encodings that ran correctly on the H200 (bit layout, K-major and
// MN-major geometry, k-step advance); swapping LBO and SBO gave wrong results on the device.
#include "tessera/Codegen/Hopper/Descriptors.h"

#include <gtest/gtest.h>

using namespace tessera::hopper;

namespace {

// Field by field, independent of descriptor(): address >> 4 in bits 0-13, LBO >> 4 in 16-29,
// SBO >> 4 in 32-45, 128-byte swizzle (1) in bits 62-63.
constexpr uint64_t fields(uint64_t address, uint64_t lbo, uint64_t sbo) {
  return (address >> 4) + (lbo >> 4) * 0x10000ull + (sbo >> 4) * 0x100000000ull + 0x4000000000000000ull;
}

TEST(HopperDescriptors, BitLayout) {
  EXPECT_EQ(descriptor(0, 0, 0), 0x4000000000000000ull);
  EXPECT_EQ(descriptor(0x3FFF0, 16, 1024), 0x4000004000013FFFull);
  // Only 18 address bits are kept: the shared window is below 256 KiB.
  EXPECT_EQ(descriptor(0x40010, 16, 1024), descriptor(0x10, 16, 1024));
}

TEST(HopperDescriptors, KMajorStepsInsideAndAcrossPanels) {
  // Q / K tiles: k16 steps of 32 bytes inside a 128-byte swizzled row, 4 per 64-column panel;
  // the next panel starts rows * 128 bytes further. LBO 16 (unused), SBO one 8-row atom.
  EXPECT_EQ(kMajor(128).panelBytes, 16384u);
  EXPECT_EQ(kMajorDescriptor(0, 64, 0), fields(0, 16, 1024));
  EXPECT_EQ(kMajorDescriptor(0, 64, 3), fields(96, 16, 1024));
  EXPECT_EQ(kMajorDescriptor(0, 64, 4), fields(8192, 16, 1024));
  EXPECT_EQ(kMajorDescriptor(32768, 128, 7), fields(32768 + 16384 + 96, 16, 1024));
}

TEST(HopperDescriptors, MnMajorVUsesThePanelStrideAsLbo) {
  // V [key][d] with d = 128 in two 64-column panels of 128 keys: LBO = 128 * 128 bytes,
  // SBO 1024, one k16 step = 16 rows = 2048 bytes.
  EXPECT_EQ(mnMajorDescriptor(98304, 128, 128, 0), fields(98304, 16384, 1024));
  EXPECT_EQ(mnMajorDescriptor(98304, 128, 128, 5), fields(98304 + 5 * 2048, 16384, 1024));
  // d = 64: one panel, LBO unused (16).
  EXPECT_EQ(mnMajorDescriptor(0, 128, 64, 1), fields(2048, 16, 1024));
  EXPECT_NE(mnMajorDescriptor(0, 128, 128, 0), fields(0, 1024, 16384)); // not swapped
}

} // namespace

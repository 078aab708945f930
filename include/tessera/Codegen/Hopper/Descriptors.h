// wgmma shared-memory matrix descriptors for 128-byte-swizzled tiles (PTX ISA, "Matrix
// Descriptor Format"): plain data, no MLIR. The encodings were validated on the H200
// (../shared/toolchain/examples/hopper-fa/README.md) and are pinned by unit tests.
#ifndef TESSERA_CODEGEN_HOPPER_DESCRIPTORS_H
#define TESSERA_CODEGEN_HOPPER_DESCRIPTORS_H

#include <cstdint>

namespace tessera::hopper {

/// Bytes of one 128-byte-swizzled row: 64 16-bit elements. Tiles are stored as panels of
/// 64 columns, each panel `rows` x 128 bytes, 8-row swizzle atoms of 1024 bytes.
constexpr int kSwizzleBytes = 128;
constexpr int kSwizzleAtomBytes = 8 * kSwizzleBytes;
constexpr int kPanelElems = 64;

/// The 64-bit descriptor: bits [0,14) start address >> 4, [16,30) leading byte offset >> 4,
/// [32,46) stride byte offset >> 4, [62,64) layout (1 = 128-byte swizzle). The address field
/// holds 18 address bits, so shared addresses stay below 256 KiB.
constexpr uint64_t descriptor(uint32_t addressBytes, uint32_t leadingBytes, uint32_t strideBytes) {
  return ((uint64_t(addressBytes) & 0x3FFFF) >> 4) | (uint64_t(leadingBytes >> 4) << 16) |
         (uint64_t(strideBytes >> 4) << 32) | (uint64_t(1) << 62);
}

/// How one operand tile, stored as 128-byte-swizzled panels, is described to wgmma, and how the
/// descriptor advances per 16-deep k step.
struct OperandGeometry {
  uint32_t leadingBytes;  ///< LBO
  uint32_t strideBytes;   ///< SBO: the next 8-row (or 8-column) group
  uint32_t kStepBytes;    ///< added per k16 step inside a panel
  uint32_t panelBytes;    ///< the next 64-wide panel of the k dimension (K-major only)
};

/// K-major operand (rows = M or N, k contiguous): A = Q and B = K in S = Q K^T. One k16 step
/// is 32 bytes inside the 128-byte row; every 4 steps move to the next panel.
constexpr OperandGeometry kMajor(int rows) {
  return {16, kSwizzleAtomBytes, 32, uint32_t(rows) * kSwizzleBytes};
}
/// MN-major operand (k rows, N contiguous), such as V in O = P V with V stored [key][d]:
/// LBO = the panel stride (the next 64 columns of N), SBO = one 8-row swizzle atom, and a k16
/// step is 16 rows = 2048 bytes. With a single panel (N = 64) LBO is unused.
constexpr OperandGeometry mnMajor(int kRows, int nCols) {
  return {nCols > kPanelElems ? uint32_t(kRows) * kSwizzleBytes : 16u, kSwizzleAtomBytes,
          16 * kSwizzleBytes, 0};
}

/// The descriptor for k step `k` of a K-major operand whose panel 0 starts at `tileBytes`.
constexpr uint64_t kMajorDescriptor(uint32_t tileBytes, int rows, int k) {
  OperandGeometry g = kMajor(rows);
  return descriptor(tileBytes + (k / 4) * g.panelBytes + (k % 4) * g.kStepBytes, g.leadingBytes,
                    g.strideBytes);
}
/// The descriptor for k step `k` of an MN-major operand of `kRows` x `nCols` at `tileBytes`.
constexpr uint64_t mnMajorDescriptor(uint32_t tileBytes, int kRows, int nCols, int k) {
  OperandGeometry g = mnMajor(kRows, nCols);
  return descriptor(tileBytes + k * g.kStepBytes, g.leadingBytes, g.strideBytes);
}

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_DESCRIPTORS_H

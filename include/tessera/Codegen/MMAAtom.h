// Matrix-core instructions ("atoms") as data: shape, element types and per-operand lane layouts.
#ifndef TESSERA_CODEGEN_MMAATOM_H
#define TESSERA_CODEGEN_MMAATOM_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

/// Element types the matrix atoms consume or produce (no MLIR dependency here).
enum class ElemType { F16, BF16, F32, FP8E4M3FNUZ, FP8E4M3FN };

const char *elemTypeName(ElemType t);
int elemTypeBits(ElemType t);
/// The exponent of the largest power of two of `t`'s finite range: 15 for f16 (65504), 127 for
/// bf16 and f32, 8 for OCP e4m3 (448), 7 for FNUZ e4m3 (240).
int elemTypeTopExponent(ElemType t);

/// A (row, col) position inside an operand fragment.
struct Coord {
  int row = 0, col = 0;
  bool operator==(const Coord &o) const { return row == o.row && col == o.col; }
};

/// A run of lane-id bits [lowBit, lowBit + bits) whose bases step `step`, 2 * step, ... along
/// one dimension: it contributes ((lane >> lowBit) & (2^bits - 1)) * step to that coordinate.
struct LaneField {
  int lowBit, bits;
  bool alongRows;
  int step;
};

/// Where each element of one operand lives: a linear layout over GF(2) in the style of
/// Triton's LinearLayout. Element `e` of lane `l` holds matrix position
///   XOR over set bits b of e of regBases[b]  XOR  XOR over set bits b of l of laneBases[b].
/// A lane basis of (0, 0) means the lanes differing in that bit hold the same data
/// (WMMA on gfx11 replicates A and B across the two half-waves).
struct OperandLayout {
  int rows = 0, cols = 0;
  std::vector<Coord> regBases;  ///< one per bit of the element index within the lane
  std::vector<Coord> laneBases; ///< one per bit of the lane id (log2(wave size) entries)

  int elementsPerLane() const { return 1 << regBases.size(); }
  int lanes() const { return 1 << laneBases.size(); }
  /// The matrix position of element `elem` held by lane `lane`.
  Coord at(int lane, int elem) const;
  /// The element of lane 0 at `pos`, if lane 0 holds it (element e of lane l is then at
  /// pos XOR at(l, 0)).
  std::optional<int> elementAt(Coord pos) const;
  /// The lane-dependent part of a position as runs of lane bits, lowest bit first: the sum of
  /// the fields along a dimension is at(lane, 0) along it (each basis is one bit, so XOR is +).
  std::vector<LaneField> laneFields() const;
  /// XOR masks of the lane-id bits that move along columns only (same row): the shuffle
  /// offsets of a row reduction.
  std::vector<int> rowReductionLaneMasks() const;
  /// XOR masks of the lane-id bits that move along rows only (same column).
  std::vector<int> colReductionLaneMasks() const;
  /// The number of consecutive elements of one lane that are contiguous along `col`
  /// (starting at element 0): the widest vector a fragment load or store may use.
  int contiguousAlongCols() const;
  /// Same, contiguous along rows.
  int contiguousAlongRows() const;
  /// True when the fragment can come from a tile stored with K along its rows through gfx950's
  /// 16-bit transposing LDS read (ds_read_b64_tr_b16: in each group of 16 lanes, lane l
  /// receives element l % 4 of the 4-element rows read by lanes 4n + (l / 4) % 4, n = 0..3):
  /// each lane's elements are runs of 4 consecutive k, and lanes 4j .. 4j + 3 hold consecutive
  /// outer positions at the same k. `isB`: K runs along rows (B), else along columns (A).
  bool transposeReadsFit(bool isB) const;
};

enum class AtomKind { MFMA, WMMA, MMASync };

/// Every matrix instruction Tessera emits, named as IREE's MMAIntrinsic:
/// `<kind>_<C elem>_<M>x<N>x<K>_<A elem>`. The value indexes the atom table (getAtom).
/// gfx942 and gfx950 share the fp8 mnemonics (v_mfma_f32_16x16x32_fp8_fp8) but read the
/// bytes as e4m3 FNUZ and OCP e4m3fn respectively: two intrinsics, one per format.
enum class MMAIntrinsic {
  MFMA_F32_32x32x8_F16,
  MFMA_F32_32x32x8_BF16,
  MFMA_F32_16x16x16_F16,
  MFMA_F32_16x16x16_BF16,
  MFMA_F32_32x32x16_F16,
  MFMA_F32_32x32x16_BF16,
  MFMA_F32_16x16x32_F16,
  MFMA_F32_16x16x32_BF16,
  MFMA_F32_32x32x16_F8E4M3FNUZ,
  MFMA_F32_16x16x32_F8E4M3FNUZ,
  MFMA_F32_32x32x16_F8E4M3FN,
  MFMA_F32_16x16x32_F8E4M3FN,
  WMMAR3_F32_16x16x16_F16,
  WMMAR3_F32_16x16x16_BF16,
  NV_MMA_SYNC_F32_16x8x16_F16,
  NV_MMA_SYNC_F32_16x8x16_BF16,
  /// sm_89+ (PTX ISA 8.4): both operands K-contiguous bytes (a V operand is transposed in LDS).
  NV_MMA_SYNC_F32_16x8x32_F8E4M3FN,
};
/// LLVM's intrinsic for NV_MMA_SYNC_F32_16x8x32_F8E4M3FN (an `llvm.call_intrinsic` in kernel IR).
inline constexpr const char *kMmaSyncE4M3Intrinsic = "llvm.nvvm.mma.m16n8k32.row.col.f32.e4m3.e4m3.f32";
/// The number of MMAIntrinsic values (the last one plus one).
constexpr int kNumMMAIntrinsics = int(MMAIntrinsic::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN) + 1;

/// One matrix instruction: D[m x n] (f32) = A[m x k] * B[k x n] + C.
struct MMAAtom {
  MMAIntrinsic intrinsic;
  std::string name;      ///< vendor mnemonic, for printing only: "v_mfma_f32_32x32x8_f16"
  AtomKind kind;
  int m, n, k;
  int waveSize;
  ElemType inputType;    ///< A and B element type
  ElemType accType;      ///< C and D element type
  OperandLayout a, b, c; ///< a: rows = m, cols = k; b: rows = k, cols = n; c: rows = m, cols = n

  /// Floating-point operations per instruction and wave: 2 * m * n * k (a multiply-add is two).
  int64_t flops() const { return int64_t(2) * m * n * k; }
};

/// Every atom Tessera knows, across all targets, indexed by MMAIntrinsic.
const std::vector<MMAAtom> &allAtoms();

/// The atom of `intrinsic` (O(1): the table is indexed by the enum).
const MMAAtom &getAtom(MMAIntrinsic intrinsic);

/// The enum spelling of `intrinsic`, "MFMA_F32_16x16x32_F8E4M3FNUZ": unique, unlike the
/// vendor mnemonic.
std::string stringifyMMAIntrinsic(MMAIntrinsic intrinsic);

/// The f32 accumulator (D) of Hopper's wgmma.mma_async m64nNk16 as the 128 threads of a
/// warpgroup hold it (7 lane bits, N / 2 registers): the mma.sync m16n8 C layout of each warp,
/// warp w on rows 16w.., repeated every 8 columns. `n` is a power of two from 8 to 256 (the
/// kernels use 64, 128 and 256); nullopt otherwise, since other N (wgmma allows any multiple
/// of 8) have no power-of-two register count. Registers [0, N / 2) of a wider layout are the
/// layout of N, so a prefix serves every N.
std::optional<OperandLayout> wgmmaAccumulatorLayout(int n);

} // namespace tessera

#endif // TESSERA_CODEGEN_MMAATOM_H

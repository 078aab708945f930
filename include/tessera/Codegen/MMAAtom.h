// Matrix-core instructions ("atoms") as data: shape, element types and per-operand lane layouts.
#ifndef TESSERA_CODEGEN_MMAATOM_H
#define TESSERA_CODEGEN_MMAATOM_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

/// Element types the matrix atoms consume or produce (no MLIR dependency here).
enum class ElemType { F16, BF16, F32, FP8E4M3FNUZ, FP8E4M3FN };

const char *elemTypeName(ElemType t);
int elemTypeBits(ElemType t);

/// A (row, col) position inside an operand fragment.
struct Coord {
  int row = 0, col = 0;
  bool operator==(const Coord &o) const { return row == o.row && col == o.col; }
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
};

enum class AtomKind { MFMA, WMMA, MMASync };

/// One matrix instruction: D[m x n] (f32) = A[m x k] * B[k x n] + C.
struct MMAAtom {
  std::string name;      ///< vendor mnemonic, e.g. "v_mfma_f32_32x32x8_f16"
  AtomKind kind;
  int m, n, k;
  int waveSize;
  ElemType inputType;    ///< A and B element type
  ElemType accType;      ///< C and D element type
  OperandLayout a, b, c; ///< a: rows = m, cols = k; b: rows = k, cols = n; c: rows = m, cols = n

  /// Multiply-accumulate operations per instruction and wave (for FLOP accounting).
  int64_t flops() const { return int64_t(2) * m * n * k; }
};

/// Every atom Tessera knows, across all targets.
const std::vector<MMAAtom> &allAtoms();

/// The atom named `name` with input type `input`, or nullptr.
const MMAAtom *findAtom(const std::string &name);

} // namespace tessera

#endif // TESSERA_CODEGEN_MMAATOM_H

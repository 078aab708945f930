// Matrix-core instructions as the vendors define them: which lane and register hold which element, and D = A * B + C.
//
// Written from AMD's CDNA3/CDNA4/RDNA3 ISA layouts (as printed by AMD's matrix instruction
// calculator) and the PTX ISA fragment formulas, independently of the compiler's atom table
// (include/tessera/Codegen/MMAAtom.h): the simulator exists to catch a wrong layout there.
#ifndef TESSERA_SIM_MATRIXOPS_H
#define TESSERA_SIM_MATRIXOPS_H

#include "tessera/Sim/Numerics.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>

namespace tessera::sim {

/// A position in an operand matrix; row -1 marks a register that holds no element of it
/// (the unused halves of gfx11's f16-output WMMA).
struct MatrixPos {
  int row = -1, col = -1;
};

enum class MatrixFamily { MFMA, WMMA, MMASync };

/// One instruction's shape and operand layouts: D (m x n) = A (m x k) * B (k x n) + C.
struct MatrixLayout {
  MatrixFamily family;
  int m, n, k;
  int waveSize;
  int aPerLane, bPerLane, cPerLane; ///< elements each lane holds
  MatrixPos (*a)(int lane, int elem);
  MatrixPos (*b)(int lane, int elem);
  MatrixPos (*c)(int lane, int elem); ///< C and D share it
};

/// The layout of a `family` instruction of shape m x n x k whose lanes hold `aPerLane`
/// elements of A and `cPerLane` of C; `subword` selects the half an f16-output WMMA writes.
/// Null when no such instruction is modelled.
const MatrixLayout *findMatrixLayout(MatrixFamily family, int m, int n, int k, int aPerLane, int cPerLane,
                                     int subword = 0);

/// The vendor mnemonic of `layout` with inputs `in` and accumulator `acc`:
/// "v_mfma_f32_32x32x8_f16", "v_wmma_f32_16x16x16_bf16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32".
std::string matrixMnemonic(const MatrixLayout &layout, ElemKind in, ElemKind acc);

/// One wave's operands, read and written through the caller's storage.
struct MatrixFragments {
  llvm::function_ref<double(int lane, int elem)> a, b, c;
  llvm::function_ref<void(int lane, int elem, double value)> d;
};

/// D = A * B + C for one wave. Every D element is C's value in f32, then one fused
/// multiply-add per k in ascending order (products of f16/bf16/fp8 inputs are exact in f32).
/// Registers with no element (row -1) pass C through to D. Lanes that hold the same element
/// (WMMA's replicated half-waves) must agree bit for bit: returns a message naming the first
/// disagreement (the result is then undefined), or an empty string.
std::string executeMatrix(const MatrixLayout &layout, const MatrixFragments &frags);

} // namespace tessera::sim

#endif // TESSERA_SIM_MATRIXOPS_H

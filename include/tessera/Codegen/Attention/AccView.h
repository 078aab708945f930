// A matrix-core accumulator seen along attention's axes: which query and which key (or head-dim
// column) each register of a lane holds, and which lanes share a query. Every mask, store and row
// reduction of an attention kernel walks its accumulators through this view.
#ifndef TESSERA_CODEGEN_ATTENTION_ACCVIEW_H
#define TESSERA_CODEGEN_ATTENTION_ACCVIEW_H

#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Codegen/MMAAtom.h"

#include "llvm/ADT/SmallVector.h"

namespace tessera::attn {

/// Where queries run in an accumulator: along its rows (S = Q K^T, O = P V) or along its columns
/// (the transposed products S^T = K Q^T and O^T = V^T P^T).
enum class QueryAxis { Rows, Cols };

/// One register of a lane: `reg` holds (query, inner) of the atom tile for lane 0; other lanes add
/// their laneOffsets. `inner` is the key for scores, the head-dim column for outputs.
struct AccElement {
  int reg = 0;
  int query = 0;
  int inner = 0;
};

class AccView {
public:
  AccView(const OperandLayout &layout, QueryAxis axis) : layout(&layout), axis(axis) {}

  int query(Coord c) const { return axis == QueryAxis::Rows ? c.row : c.col; }
  int inner(Coord c) const { return axis == QueryAxis::Rows ? c.col : c.row; }

  /// Every register of a lane, in register order.
  llvm::SmallVector<AccElement> elements() const {
    llvm::SmallVector<AccElement> out;
    for (int e = 0; e < layout->elementsPerLane(); ++e) {
      Coord c = layout->at(0, e);
      out.push_back({e, query(c), inner(c)});
    }
    return out;
  }
  /// The lane-dependent (query, inner) offsets of `lane` (lane bits and register bits of a
  /// layout never overlap, so offsets add).
  std::pair<mlir::Value, mlir::Value> laneOffsets(KernelBuilder &kb, mlir::Value lane) const {
    auto [row, col] = kb.laneCoord(*layout, lane);
    return axis == QueryAxis::Rows ? std::pair{row, col} : std::pair{col, row};
  }
  /// XOR masks of the lane bits that move along the inner axis only: the lanes holding the same
  /// queries, whose values a row reduction combines (KernelBuilder::laneAllReduce).
  std::vector<int> queryLaneMasks() const {
    return axis == QueryAxis::Rows ? layout->rowReductionLaneMasks()
                                   : layout->colReductionLaneMasks();
  }
  /// The lane bits that do not move along queries: clear on one lane per query (a writer).
  int nonQueryLaneBits() const {
    int bits = 0;
    for (size_t bit = 0; bit < layout->laneBases.size(); ++bit)
      if (query(layout->laneBases[bit]) == 0) bits |= 1 << bit;
    return bits;
  }
  /// Lane bit `bit` moves along queries.
  bool laneBitMovesQuery(size_t bit) const { return query(layout->laneBases[bit]) != 0; }
  /// Register bit `bit` moves along queries.
  bool regBitMovesQuery(size_t bit) const { return query(layout->regBases[bit]) != 0; }

  const OperandLayout &operandLayout() const { return *layout; }
  QueryAxis queryAxis() const { return axis; }

private:
  const OperandLayout *layout;
  QueryAxis axis;
};

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_ACCVIEW_H

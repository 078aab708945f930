// The merge of attention results computed over parts of the keys (split-KV, context
// parallelism): paged_decode's combine kernel and the attn_combine directive share it
// (Generators/AttnCombine.cpp, docs/decode.md).
#ifndef TESSERA_CODEGEN_ATTENTION_COMBINE_H
#define TESSERA_CODEGEN_ATTENTION_COMBINE_H

#include "tessera/Codegen/KernelBuilder.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <functional>

namespace tessera::attn {

/// The waves of a combine workgroup, which merges one output row.
constexpr int kCombineWaves = 4;

/// Where one output row's parts live and where its result goes. Part s's LSE (natural log, f32)
/// is lsePartials[lseAt(s)]; its f32 output row, head_dim contiguous elements, starts at
/// partials[partialRow(s)]. sink (optional): a logit that joins the denominator once.
/// storeLse (optional): where the merged LSE goes.
struct CombineRow {
  mlir::Value partials, lsePartials, numSplits, sink;
  std::function<mlir::Value(mlir::Value split)> partialRow, lseAt;
  std::function<void(mlir::Value col, mlir::Value value)> storeOutput;
  std::function<void(mlir::Value lse)> storeLse;
};

/// Emits, at kb's insertion point of `func` (kCombineWaves waves), the merge of `row`'s parts:
/// M = max LSE_s (0 when every part is empty), w_s = exp(LSE_s - M), O = sum w_s O_s / sum w_s
/// (0 when the sum is 0; a part of weight 0 is never read) and LSE = M + ln sum w_s. The sums are
/// added in a fixed order: the same bits whichever wave finishes first.
void emitCombine(KernelBuilder &kb, mlir::gpu::GPUFuncOp func, int64_t headDim,
                 const CombineRow &row);

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_COMBINE_H

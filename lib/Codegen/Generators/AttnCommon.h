// What every flash_attn kernel shares, whatever its matrix-core path: which keys a query sees,
// which key tiles a query block visits, which of them need masking, and the scaled (optionally
// soft-capped) scores in the log2 domain.
#ifndef TESSERA_CODEGEN_GENERATORS_ATTNCOMMON_H
#define TESSERA_CODEGEN_GENERATORS_ATTNCOMMON_H

#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

namespace tessera {

/// The visibility rule of docs/flash_attn-abi.md for one (batch, head): key j is visible from
/// query i when j < Sk, and (causal) j <= i + off, and (window) i + off - left <= j <=
/// i + off + right, bounds of -1 switched off.
class AttnVisibility {
public:
  /// `windowLeft` / `windowRight` only when the directive has a sliding window.
  AttnVisibility(tessera::FlashAttnOp op, KernelBuilder &kb, mlir::Value seqQ, mlir::Value seqK,
                 mlir::Value windowLeft = {}, mlir::Value windowRight = {});

  mlir::Value diagonalOffset() const { return diagOffset; }
  /// The keys query `query` sees are one interval [first, last] (empty when first > last).
  std::pair<mlir::Value, mlir::Value> keyInterval(mlir::Value query);
  /// i1: key `key` is visible from query `query`.
  mlir::Value visible(mlir::Value query, mlir::Value key);
  /// The key tiles [lo, hi) of `blockN` keys the queries [q0, lastQuery] can see; hi >= lo.
  std::pair<mlir::Value, mlir::Value> keyTileRange(mlir::Value q0, mlir::Value lastQuery,
                                                   int blockN);
  /// The key tiles [lo, hi) every query of [q0, lastQuery] sees entirely: they need no mask
  /// (the sequence end, the causal diagonal and window edges fall in the others). Computed once
  /// per query block, so the key loop tests its tile index against two values.
  std::pair<mlir::Value, mlir::Value> unmaskedTileRange(mlir::Value q0, mlir::Value lastQuery,
                                                        int blockN);

private:
  tessera::FlashAttnOp op;
  KernelBuilder &kb;
  mlir::Value seqK, diagOffset, windowLeft, windowRight;
};

/// Scores in the log2 domain: s * scale * log2(e), or with a soft cap (cap > 0 at run time)
/// cap * tanh(s * scale / cap) * log2(e), tanh from exp2 (no device library). `acc` is a
/// vector of f32 scores; `cap` is null when the directive has no softcap.
mlir::Value attnScores(KernelBuilder &kb, mlir::Value acc, mlir::Value scaleLog2, mlir::Value cap);

/// The kernel ABI of docs/flash_attn-abi.md: q, k, v, o (lse, cu_seqlens), sizes, strides,
/// scale and the feature parameters, launched on [ceil_div(Sq, blockM), Hq, B].
KernelSignature flashAttnSignature(tessera::FlashAttnOp op, int blockM, int blockThreads);

} // namespace tessera

#endif // TESSERA_CODEGEN_GENERATORS_ATTNCOMMON_H

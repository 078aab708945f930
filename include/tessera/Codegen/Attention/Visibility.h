// Which keys a query sees, and the tile ranges that follow: the mask rules of every attention
// directive (causal top-left / bottom-right, runtime sliding window) and the sequence lengths of a
// batch item (dense or varlen), shared by the forward, backward and decode generators.
#ifndef TESSERA_CODEGEN_ATTENTION_VISIBILITY_H
#define TESSERA_CODEGEN_ATTENTION_VISIBILITY_H

#include "tessera/Codegen/Attention/AccView.h"
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

namespace tessera::attn {

/// The mask rules a directive's kernels support: its causal mask kind and whether they take a
/// runtime window.
struct MaskSpec {
  tessera::MaskKind mask = tessera::MaskKind::None;
  bool slidingWindow = false;

  static MaskSpec of(tessera::AttentionDirective op) {
    return {op.getMask(), op.getSlidingWindow()};
  }
  bool causal() const { return mask != tessera::MaskKind::None; }
};

/// A half-open range [lo, hi) of tile indices (index values, hi >= lo).
struct TileRange {
  mlir::Value lo, hi;
};

/// The visibility rule of docs/flash_attn-abi.md for one (batch, head) of `seqQ` queries and `seqK`
/// keys: key j is visible from query i when 0 <= j < Sk, and (causal) j <= i + off, and (window)
/// i + off - left <= j <= i + off + right, a bound of -1 switched off, and (chunk C > 0) j is in
/// the chunk of C keys that holds i + off (FlashAttention-3's attention_chunk, Llama 4's chunked
/// local attention); off = Sk - Sq (bottom-right alignment and no causal mask) or 0 (top-left). Key
/// intervals only move right as the query grows, which every range below relies on.
class Visibility {
public:
  /// `windowLeft` / `windowRight` only when the spec has a sliding window; `chunk` only where the
  /// kernel takes one (0 at runtime: no chunks).
  Visibility(const MaskSpec &spec, KernelBuilder &kb, mlir::Value seqQ, mlir::Value seqK,
             mlir::Value windowLeft = {}, mlir::Value windowRight = {}, mlir::Value chunk = {});

  mlir::Value diagonalOffset() const { return diagOffset; }
  bool causal() const { return spec.causal(); }
  /// The keys query `query` sees: one interval [first, last] (empty when first > last).
  std::pair<mlir::Value, mlir::Value> keyInterval(mlir::Value query);
  /// The queries in [0, Sq) that see key `key`: one interval [first, last] (empty when
  /// first > last, e.g. for a key at or past Sk).
  std::pair<mlir::Value, mlir::Value> queryInterval(mlir::Value key);
  /// i1: key `key` is visible from query `query`.
  mlir::Value visible(mlir::Value query, mlir::Value key);
  /// The rule for the tile whose first query is `query0` and first key `key0`, relative to it:
  /// key key0 + kl is visible from query query0 + ql exactly when lo <= kl - ql <= hi and
  /// kl <= lastKey. i32 (a tile's offsets are small, so the bounds are clamped to +-2^20): an
  /// element's test then needs no 64-bit positions. `lo`/`hi` null where no rule bounds them.
  struct TileBounds {
    mlir::Value lo, hi, lastKey;
  };
  TileBounds tileBounds(mlir::Value query0, mlir::Value key0);
  /// With a chunk: the keys of query `query`'s chunk, [lo, hi] relative to `key0` as i32 (clamped
  /// like tileBounds; unbounded when the chunk is 0 at runtime). Null without one: a chunk bound
  /// is per query, not of kl - ql, so it comes on top of tileBounds.
  std::pair<mlir::Value, mlir::Value> chunkBounds(mlir::Value query, mlir::Value key0);

  /// The key tiles of `blockN` keys the queries [q0, lastQuery] can see (forward, decode).
  TileRange keyTiles(mlir::Value q0, mlir::Value lastQuery, int blockN);
  /// The key tiles every query of [q0, lastQuery] sees entirely: they need no mask (the sequence
  /// end, the causal diagonal and the window edges fall in the others).
  TileRange unmaskedKeyTiles(mlir::Value q0, mlir::Value lastQuery, int blockN);
  /// The query tiles of `blockM` queries in which some query sees a key of [k0, lastKey]
  /// (the backward walks these per key block).
  TileRange queryTiles(mlir::Value k0, mlir::Value lastKey, int blockM);
  /// The query tiles whose queries are all in [0, Sq) and all see every key of [k0, lastKey]
  /// (lastKey < Sk): the backward's tiles without a mask.
  TileRange unmaskedQueryTiles(mlir::Value k0, mlir::Value lastKey, int blockM);

private:
  /// The first key of the chunk holding position `pos` (a key, or a query plus off), and the
  /// chunk's last key.
  std::pair<mlir::Value, mlir::Value> chunkOf(mlir::Value pos);
  mlir::Value chunkOn();

  MaskSpec spec;
  KernelBuilder &kb;
  mlir::Value seqQ, seqK, diagOffset, windowLeft, windowRight, chunk;
};

/// `scores` (an accumulator of lane `lane` seen through `view`, whose tile starts at query
/// `query0` and key `key0`) with every invisible (query, key) set to -inf when `needMask`
/// (uniform: an edge tile; null: always), else as it is. `queryOf`, when given, maps the tile's
/// row index (query0 + the element's query offset) to the query Visibility knows (packed rows: a
/// row's token). The tile starts `queryOffset` / `keyOffset` past query0 / key0 (constants: the
/// tiles of one wave block share query0, key0 and the bounds made of them).
mlir::Value maskScores(KernelBuilder &kb, Visibility &visibility, const AccView &view,
                       mlir::Value lane, mlir::Value scores, mlir::Value query0, mlir::Value key0,
                       mlir::Value needMask,
                       llvm::function_ref<mlir::Value(mlir::Value)> queryOf = nullptr,
                       int queryOffset = 0, int keyOffset = 0);

/// ALiBi: `scores` (log2 domain, the tile of maskScores' arguments) plus -slopeLog2 * |i + off - j|
/// per element (query i, key j; off the diagonal offset). Queries are consecutive rows here.
mlir::Value addAlibiBias(KernelBuilder &kb, Visibility &visibility, const AccView &view,
                         mlir::Value lane, mlir::Value scores, mlir::Value query0,
                         mlir::Value key0, mlir::Value slopeLog2, int queryOffset = 0,
                         int keyOffset = 0);

/// ALiBi's per-element terms for rows that are not consecutive queries (decode's (head, token)
/// rows): each element's slope (log2 domain) and its row's query plus the diagonal offset, as f32
/// vectors of the score tile's shape; made once, before the key loop.
struct AlibiRows {
  mlir::Value slopes, queries;
};
AlibiRows alibiRows(KernelBuilder &kb, Visibility &visibility, const AccView &view,
                    mlir::Value lane, mlir::Type scoreType, mlir::Value row0,
                    llvm::function_ref<mlir::Value(mlir::Value)> slopeOf,
                    llvm::function_ref<mlir::Value(mlir::Value)> queryOf);
/// addAlibiBias with AlibiRows' per-element slopes and queries.
mlir::Value addAlibiBias(KernelBuilder &kb, Visibility &visibility, const AccView &view,
                         mlir::Value lane, mlir::Value scores, const AlibiRows &rows,
                         mlir::Value key0);

/// i1: tile `tile` is outside `unmasked` (one of the ranges above), so it needs the mask.
mlir::Value isEdgeTile(KernelBuilder &kb, mlir::Value tile, const TileRange &unmasked);

/// Part `part` of `numParts` of `range` (split-KV): consecutive parts of ceil(n / numParts)
/// tiles, the last ones possibly short or empty (lo == hi), all within `range`.
TileRange splitTiles(KernelBuilder &kb, const TileRange &range, mlir::Value part,
                     mlir::Value numParts);

/// The lengths and first packed rows of one batch item, decoded once: dense batches (every item
/// Sq x Sk, rows from 0, a batch stride) or varlen ones (offsets from cu_seqlens, no batch
/// stride).
struct SeqInfo {
  mlir::Value seqQ, seqK;   ///< this item's query and key counts
  mlir::Value rowQ0, rowK0; ///< its first row in the packed q/o and k/v (0 when dense)
  bool varlen = false;

  static SeqInfo dense(KernelBuilder &kb, mlir::Value sq, mlir::Value sk);
  /// Item `batch` of cu_seqlens_q/k (int32, B + 1 offsets); its lengths seqUsedQ/K[batch]
  /// (int32 (B,)) where given, else the offsets' differences.
  static SeqInfo packed(KernelBuilder &kb, mlir::Value cuSeqlensQ, mlir::Value cuSeqlensK,
                        mlir::Value batch, mlir::Value seqUsedQ = {}, mlir::Value seqUsedK = {});
};

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_VISIBILITY_H

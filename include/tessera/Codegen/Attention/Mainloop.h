// FlashAttention-2's forward mainloop on the portable atoms (FlashAttnPlan), shared by the
// generators that stream K/V tiles past a staged block of query rows (flash_attn, paged_decode):
// S on the matrix cores, scaled, capped and masked (edge tiles only), the online softmax, P V, and
// the epilogue's row sums. A recipe (AttnRows) says where the rows and the tiles come from and
// where each output element and row LSE goes.
#ifndef TESSERA_CODEGEN_ATTENTION_MAINLOOP_H
#define TESSERA_CODEGEN_ATTENTION_MAINLOOP_H

#include "tessera/Codegen/Attention/AccView.h"
#include "tessera/Codegen/Attention/Dropout.h"
#include "tessera/Codegen/Attention/Softmax.h"
#include "tessera/Codegen/Attention/Visibility.h"
#include "tessera/Codegen/FlashAttnPlan.h"
#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::attn {

/// Where a kernel's query rows and key tiles come from and where its outputs go. Rows are the
/// block's blockM rows, tiles blockN keys; loads return this thread's 16-byte vectors in
/// KernelBuilder::loadGlobalTile's order, zero past the valid rows.
class AttnRows {
public:
  virtual ~AttnRows() = default;
  virtual llvm::SmallVector<mlir::Value> loadQueries(int threads) = 0;
  /// This thread's vectors of the K (V) tile from key n0. `inBounds`: every key of the tile is
  /// valid and inBoundsLoads() holds, so plain vector loads do.
  virtual llvm::SmallVector<mlir::Value> loadKeys(mlir::Value n0, int threads, bool inBounds) = 0;
  virtual llvm::SmallVector<mlir::Value> loadValues(mlir::Value n0, int threads,
                                                    bool inBounds) = 0;
  /// i1, uniform: K and V tiles wholly inside the keys may be loaded `inBounds` (their rows keep
  /// 16-byte alignment); null where they never may.
  virtual mlir::Value inBoundsLoads() { return {}; }
  /// With AttnPlan::kvBuffers > 1: the K (V) tile from key n0 copied asynchronously into `dst`
  /// (KernelBuilder::copyGlobalRowsToLdsAsync), landing at the mainloop's asyncWait.
  virtual void copyKeysAsync(mlir::Value n0, const LdsTile &dst, int threads);
  virtual void copyValuesAsync(mlir::Value n0, const LdsTile &dst, int threads);
  /// Block row `row`'s sink logit (natural log domain), which joins its softmax denominator;
  /// null without sinks. -inf: no sink for this row.
  virtual mlir::Value sinkLogit(mlir::Value row) { return {}; }
  /// The block's ALiBi slope times log2(e) (uniform), null without ALiBi. Rows with one are
  /// consecutive queries: queryOf(row) is the first row's query plus row.
  virtual mlir::Value alibiSlopeLog2() { return {}; }
  /// ALiBi for rows that are not consecutive queries (decode's (head, token) rows): block row
  /// `row`'s slope times log2(e), each row's query from queryOf. Only when alibiPerRow().
  virtual bool alibiPerRow() const { return false; }
  virtual mlir::Value alibiRowSlopeLog2(mlir::Value row) { return {}; }
  /// Dropout on P for the block's (sequence, query head), whose rows are consecutive queries;
  /// none by default.
  virtual std::optional<Dropout> dropout() { return std::nullopt; }
  /// The query Visibility knows for block row `row`.
  virtual mlir::Value queryOf(mlir::Value row) = 0;
  /// Output element (row, col) in f32, divided by the row's sum (0 for a row that saw no key).
  virtual void storeOutput(mlir::Value row, mlir::Value col, mlir::Value value) = 0;
  /// The row's natural-log LSE (-inf for a row that saw no key), once per row; only when
  /// wantsLse().
  virtual void storeLse(mlir::Value row, mlir::Value lse) = 0;
  virtual bool wantsLse() const = 0;
  /// Keys with their own dequantisation scales (fp8 caches with per-token scales): K's
  /// multiplies the key's scores, V's its row of V. Only when hasKeyScales().
  virtual bool hasKeyScales() const { return false; }
  /// Where the scales of row `row` of the tile from key `n0` are: K's and V's memrefs, one
  /// element index into both that is in bounds even for rows past the keys, and whether the row
  /// is a key (the scales of the others count as 0).
  struct KeyScaleSlot {
    mlir::Value kScales, vScales, index, valid;
  };
  virtual KeyScaleSlot keyScaleSlot(mlir::Value n0, mlir::Value row);
};

/// What the loop walks: the key tiles, those of them that need no mask, the rule the others are
/// masked by, and the score scale (log2(e) folded in) and soft cap (null: none).
struct KeyWalk {
  Visibility *visibility = nullptr;
  TileRange tiles, unmasked;
  mlir::Value scaleLog2, cap;
};

class Mainloop {
public:
  /// `queryElem`: the queries' type; the tiles' are the plan's (elem for Q and K, pvElem for P
  /// and V; AttnPlan::scaledQueries). `cacheElem`: K's and V's in memory when narrower (fp8
  /// caches), widened exactly on the way to the K and V tiles.
  /// `keyScales`: the rows will have per-key scales (AttnRows::hasKeyScales), staged in LDS.
  Mainloop(const AttnPlan &p, const TargetInfo &t, mlir::OpBuilder &b, mlir::Location loc,
           mlir::gpu::GPUFuncOp func, mlir::Type queryElem, mlir::Type cacheElem = {},
           bool keyScales = false);
  ~Mainloop();
  /// Allocates the LDS tiles: first in the kernel (they are workgroup attributions).
  void allocate();
  /// Emits the staging of the rows, the loop over walk.tiles and the epilogue at the builder's
  /// insertion point.
  void emit(AttnRows &rows, const KeyWalk &walk);
  int threads() const { return p.waves * t.waveSize; }

private:
  class Impl;
  const AttnPlan &p;
  const TargetInfo &t;
  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::gpu::GPUFuncOp func;
  /// Two K/V buffers of a narrower cache: its tiles are copied asynchronously into staging
  /// buffers (ldsK8, ldsV8) and widened into one K and one V tile each step.
  bool widensStaged() const { return p.kvBuffers > 1 && cacheElem != elem; }
  /// V copied asynchronously into the staging buffers ldsV8: to be widened, or transposed into
  /// V^T (AttnPlan::transposesStagedV).
  bool stagesV() const { return widensStaged() || p.transposesStagedV(); }
  mlir::Type queryElem, elem, cacheElem, pvElem;
  bool keyScales;
  /// ldsScales (per-key scales): attnKeyScaleRows rows, copied asynchronously with the K/V
  /// tiles where these are. ldsQueryMax (scaled queries): each query vector's largest magnitude.
  LdsTile ldsQ, ldsK, ldsV, ldsP, ldsK8, ldsV8, ldsMerge, ldsScales, ldsQueryMax;
};

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_MAINLOOP_H

// The softmax of attention, once: scores in the log2 domain (scale and soft cap), the online
// softmax's running max, rescale factor and row sum, its finalisation to 1/l and to the LSE, and
// the backward's probabilities recomputed from a stored LSE.
#ifndef TESSERA_CODEGEN_ATTENTION_SOFTMAX_H
#define TESSERA_CODEGEN_ATTENTION_SOFTMAX_H

#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::attn {

/// Scores in the log2 domain: s * scale * log2(e), or with a soft cap (cap > 0 at run time)
/// cap * tanh(s * scale / cap) * log2(e), tanh from exp2 (no device library). `acc` is a vector
/// of f32 scores; `scaleLog2` a scalar or one per score (queries scaled per row); `cap` is null
/// when the directive has no softcap. `scaleInExp` (AttnPlan::scaleInExp): uncapped scores stay
/// raw, for an OnlineSoftmax whose score scale is expScale's.
mlir::Value scaledScores(KernelBuilder &kb, mlir::Value acc, mlir::Value scaleLog2,
                         mlir::Value cap, bool scaleInExp = false);
/// The score scale an OnlineSoftmax applies to scaledScores(..., scaleInExp = true): scaleLog2,
/// or 1 under the soft cap (its scores are already in the log2 domain).
mlir::Value expScale(KernelBuilder &kb, mlir::Value scaleLog2, mlir::Value cap);

/// body(masked, capped) in uniform branches on `needMask` (an edge tile) and, when `cap` is
/// given, on whether the soft cap is on at run time. Each variant is branch-free across all the
/// tiles it handles: a branch per tile keeps the scheduler from overlapping one tile's
/// exponentials and reads with the next's.
void scoreVariants(KernelBuilder &kb, mlir::Value needMask, mlir::Value cap,
                   llvm::function_ref<void(bool masked, bool capped)> body);

/// Whether the soft cap is on: cap > 0 at run time.
mlir::Value softcapOn(KernelBuilder &kb, mlir::Value cap);

/// Scores under the soft cap (cap > 0), from the uncapped log2-domain scores `scaled`:
/// cap * tanh(x / cap) * log2(e), x the natural-domain logit, and for the backward the
/// derivative of the capped logit, 1 - tanh(x / cap)^2.
struct CappedScores {
  mlir::Value scores, slope;
};
CappedScores capScores(KernelBuilder &kb, mlir::Value scaled, mlir::Value cap);

/// FlashAttention's online softmax in the log2 domain, one row at a time (f32 scalars or
/// vectors, elementwise). A step over new scores s of a row with running max m and sum l:
///   m' = max(m, max_j s_j);  shift = guard(m');  alpha = exp2(m - shift);
///   p_j = exp2(s_j - shift);  l' = l * alpha + sum_j p_j;  O' = O * alpha + P V,
/// and at the end O / l and LSE = (m + log2 l) * ln 2 (natural log). guard(m) is 0 for a row whose
/// max is still -inf (nothing visible), so its exp2 terms are exp2(-inf) = 0, never NaN; such a
/// row ends with l = 0, O = 0 and LSE = -inf.
///
/// Scores enter either already in the log2 domain (`scoreScale` null) or raw, with `scoreScale`
/// (scale * log2(e)) applied inside each exp2 as one fma: shift and max are then raw too, and the
/// LSE multiplies m by it.
class OnlineSoftmax {
public:
  explicit OnlineSoftmax(KernelBuilder &kb, mlir::Value scoreScale = {})
      : kb(kb), scoreScale(scoreScale) {}

  /// What exp2Shifted subtracts for a row whose running max is `rowMax`: -inf rows shift by 0.
  mlir::Value shiftFor(mlir::Value rowMax);
  /// exp2(x - shift) in the log2 domain (with a score scale, exp2(x * scale + shift), one fma):
  /// a probability (x a score). `shift` is shiftFor's value, possibly gathered into a vector.
  mlir::Value exp2Shifted(mlir::Value x, mlir::Value shift);
  /// The rescale factor alpha of a row whose max moved from `oldMax` to `newMax`: exactly 1 when
  /// it did not move, 0 from a max of -inf.
  mlir::Value rescaleFactor(mlir::Value oldMax, mlir::Value newMax);
  /// The running sum after a step: l * alpha + rowSum.
  mlir::Value nextSum(mlir::Value sum, mlir::Value alpha, mlir::Value rowSum);
  /// 1 / l, or 0 for a row that saw nothing (l = 0): the output is O * this.
  mlir::Value inverseSum(mlir::Value sum);
  /// The row's LSE in the natural log, -inf for a row that saw nothing.
  mlir::Value logSumExp(mlir::Value rowMax, mlir::Value sum);
  /// The end of a row whose denominator also holds exp(sink) (a sink logit, natural log domain):
  /// the factor O's accumulator takes and the row's LSE. Both are taken relative to the larger of
  /// the row's shift and the sink, so neither term overflows; a row that saw no key gets O = 0 and
  /// LSE = sink.
  struct Finish {
    mlir::Value outputFactor, lse;
  };
  Finish finishWithSink(mlir::Value rowMax, mlir::Value sum, mlir::Value sink);

  /// The backward's LSE operand from the forward's natural-log LSE: lse * log2(e), the row's
  /// shift in the log2 domain of probabilityFromLse; -inf (a row that saw nothing) becomes
  /// +inf, so every recomputed probability of that row is exp2(-inf) = 0 exactly.
  mlir::Value lseToShift(mlir::Value lse);
  /// P = exp2(s - shift) recomputed from lseToShift's value (a score scaled as above).
  mlir::Value probabilityFromLse(mlir::Value score, mlir::Value lseShift) {
    return exp2Shifted(score, lseShift);
  }

private:
  KernelBuilder &kb;
  mlir::Value scoreScale;
};

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_SOFTMAX_H

// The lowering pipelines' fp8 e4m3 conversions (Fp8Conversions.cpp).
#ifndef TESSERA_TRANSFORMS_FP8CONVERSIONS_H
#define TESSERA_TRANSFORMS_FP8CONVERSIONS_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace tessera {
/// Rewrites arith.extf from and arith.truncf to f8E4M3FN / f8E4M3FNUZ into code LLVM lowers:
/// with `nvvm`, OCP widening of even-length vectors on cvt.rn.f16x2.e4m3x2 (sm_89+); everything
/// else in exact integer code.
std::unique_ptr<mlir::Pass> createFp8ConversionsPass(bool nvvm);
} // namespace tessera

#endif // TESSERA_TRANSFORMS_FP8CONVERSIONS_H

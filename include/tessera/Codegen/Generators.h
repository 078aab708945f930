// One generator per directive: each builds its kernel (or kernel set) from the shared builders.
//
// A directive that needs several kernels launched together returns a KernelSet
// (KernelBuilder.h) in launch order, and tessera-generate-kernels records it with
// recordKernelSet; a single kernel is a set of one.
#ifndef TESSERA_CODEGEN_GENERATORS_H
#define TESSERA_CODEGEN_GENERATORS_H

#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Target/TargetInfo.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <string>

namespace tessera {

/// Builds the GEMM kernel of `op` for `target` before `op`. Emits a diagnostic on `op` and
/// fails when the (target, dtype, tile) combination is unsupported.
mlir::FailureOr<mlir::gpu::GPUFuncOp> generateWmmaGemm(tessera::WmmaGemmOp op,
                                                       const TargetInfo &target);

/// Builds the FlashAttention-2 forward kernel of `op` for `target` before `op`. Emits a
/// diagnostic on `op` and fails when the combination is unsupported.
mlir::FailureOr<mlir::gpu::GPUFuncOp> generateFlashAttn(tessera::FlashAttnOp op,
                                                        const TargetInfo &target);

/// Builds the backward kernel set of `op` for `target` before `op`: pre, main, then dq
/// (deterministic) or dq_convert, sharing the call's workspaces (Generators/FlashAttnBwd.cpp).
mlir::FailureOr<KernelSet> generateFlashAttnBwd(tessera::FlashAttnBwdOp op,
                                                const TargetInfo &target);
/// Builds the decode kernel set of `op` for `target` before `op`: decode, then with split_kv
/// combine (Generators/PagedDecode.cpp, docs/decode.md).
mlir::FailureOr<KernelSet> generatePagedDecode(tessera::PagedDecodeOp op,
                                               const TargetInfo &target);
/// Builds the kernel of `op` for `target` before `op`: merges attention results computed over
/// parts of the keys (Generators/AttnCombine.cpp, docs/decode.md).
mlir::FailureOr<mlir::gpu::GPUFuncOp> generateAttnCombine(tessera::AttnCombineOp op,
                                                          const TargetInfo &target);
/// Why `op` cannot take the sm_90a wgmma/TMA kernel; empty when it can.
std::string sm90FlashAttnUnsupported(tessera::FlashAttnOp op);
/// Builds the FlashAttention-3-style warp-specialised kernel of `op` for an sm_90a target.
mlir::FailureOr<mlir::gpu::GPUFuncOp> generateFlashAttnSm90(tessera::FlashAttnOp op,
                                                            const TargetInfo &target);

} // namespace tessera

#endif // TESSERA_CODEGEN_GENERATORS_H

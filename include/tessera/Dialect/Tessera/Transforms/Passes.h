// Pass declarations of the tessera dialect and the functions they wrap.
#ifndef TESSERA_DIALECT_TESSERA_TRANSFORMS_PASSES_H
#define TESSERA_DIALECT_TESSERA_TRANSFORMS_PASSES_H

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace tessera {
struct TargetInfo;

/// Replaces every directive in `module` by its generated kernel for `target`. Emits a
/// diagnostic on the offending directive and fails when a directive cannot be generated.
mlir::LogicalResult generateKernels(mlir::ModuleOp module, const TargetInfo &target);

/// Adds the AMD lowering pipeline (to LLVM + ROCDL) for one gpu.module to `pm`.
void buildROCDLLoweringPipeline(mlir::OpPassManager &pm, const std::string &chip);

/// Lowers the kernel ops of the tessera dialect in a gpu.module: tessera.atomic_addf to one
/// vector reduction per op on NVIDIA sm_90 and later, one memref.atomic_rmw per element
/// elsewhere; tessera.swap_wave_halves to v_permlane32_swap where the target has it
/// (TargetInfo::hasHalfWaveSwap), two shuffles and two selects elsewhere. First in both
/// lowering pipelines.
std::unique_ptr<mlir::Pass> createLowerKernelOpsPass();

/// The chip of `module`'s NVVM target ("sm_90a"), or none for another vendor's module.
std::optional<std::string> nvvmChip(mlir::gpu::GPUModuleOp module);

/// Adds the NVIDIA lowering pipeline (to LLVM + NVVM) for one gpu.module to `pm`.
void buildNVVMLoweringPipeline(mlir::OpPassManager &pm);
} // namespace tessera

namespace tessera {
#define GEN_PASS_DECL
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
} // namespace tessera

#endif // TESSERA_DIALECT_TESSERA_TRANSFORMS_PASSES_H

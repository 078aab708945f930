// The compile flow: registration, AMD serialisation to ISA + hsaco, and bundle writing.
#ifndef TESSERA_COMPILE_COMPILE_H
#define TESSERA_COMPILE_COMPILE_H

#include "tessera/Target/TargetInfo.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"

#include <optional>
#include <string>

namespace tessera {

/// Registers every dialect, interface and LLVM IR translation the compiler uses.
void registerTesseraDialects(mlir::DialectRegistry &registry);

/// Registers the tessera passes and the upstream passes `tessera-opt` exposes.
void registerTesseraToolPasses();

/// Register and memory use of one compiled kernel; unknown values are empty.
struct KernelResources {
  std::optional<int> vgpr, agpr, sgpr, vgprSpills, sgprSpills, ldsBytes, scratchBytes;
};

/// Reads the resource figures of kernel `name` from the `.amdgpu_metadata` block of an
/// AMDGPU assembly text.
KernelResources parseAMDGPUMetadata(llvm::StringRef isa, llvm::StringRef name);

/// The lowered code of one kernel.
struct CompiledKernel {
  std::string isa;        ///< assembly text (AMD GCN, or PTX)
  std::string codeObject; ///< AMD: the relocatable object (linkHsaco makes the hsaco); PTX text
  KernelResources resources;
};

/// AMDHSA code object version of the hsaco Tessera writes (what the ROCm 6 HIP runtime loads).
constexpr int kCodeObjectVersion = 5;

/// Lowers one generated AMD gpu.module (kernel IR) to LLVM IR, runs the LLVM O3 pipeline and
/// emits its ISA and relocatable object. The module is lowered in place. Emits a diagnostic on
/// failure. Kernels may compile on several threads at once.
mlir::FailureOr<CompiledKernel> compileAMDGPUModule(mlir::gpu::GPUModuleOp module,
                                                    const TargetInfo &target);

/// Links a relocatable AMDGPU object into a shared code object (hsaco) with lld in-process.
/// One at a time, and not while kernels compile: lld resets the process's llvm::cl options.
mlir::FailureOr<std::string> linkHsaco(mlir::Location loc, llvm::StringRef object);

/// Lowers one generated NVIDIA gpu.module (kernel IR) to PTX with the NVPTX backend. When
/// ptxas is installed it reports registers and spills; it never produces the code object.
mlir::FailureOr<CompiledKernel> compileNVPTXModule(mlir::gpu::GPUModuleOp module,
                                                   const TargetInfo &target);

/// Reads registers, spills and shared memory from the output of `ptxas -v`.
KernelResources parsePtxasInfo(llvm::StringRef log);

/// Generates every directive of `module` for `target`, compiles each kernel and writes the
/// bundle directory `outDir` (manifest.json plus per-kernel code object, ISA and kernel IR).
/// The directory is replaced only when everything succeeded.
mlir::LogicalResult compileToBundle(mlir::ModuleOp module, const TargetInfo &target,
                                    llvm::StringRef outDir);

} // namespace tessera

#endif // TESSERA_COMPILE_COMPILE_H

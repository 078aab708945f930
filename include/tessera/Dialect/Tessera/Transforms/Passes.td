// Passes of the tessera dialect: kernel generation and lowering to the vendor dialects.
#ifndef TESSERA_PASSES_TD
#define TESSERA_PASSES_TD

include "mlir/Pass/PassBase.td"

def TesseraGenerateKernels : Pass<"tessera-generate-kernels", "::mlir::ModuleOp"> {
  let summary = "Expand each tessera directive into a gpu.module with one kernel";
  let description = [{
    Replaces every directive (`tessera.wmma_gemm`, `tessera.flash_attn`, ...) by a
    `gpu.module` of the same name holding one `gpu.func` kernel for `target`, built by that
    directive's generator from the shared builders. The kernel uses only the kernel-IR op
    subset (arith, math, scf, memref, vector, gpu, amdgpu, nvgpu/nvvm matrix ops) and records
    its argument names and roles, grid and directive attributes as `tessera.*` attributes.
    A directive the target cannot support is an error that names the combination.

    ```mlir
    // tessera-opt --tessera-generate-kernels=target=gfx942
    tessera.wmma_gemm @gemm {dtype = f16, out_type = f32}
    // becomes
    gpu.module @gemm [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
      gpu.func @gemm(%a: memref<?xf16>, %b: memref<?xf16>, %c: memref<?xf32>, %M: index, ...)
          workgroup(%lds_a: memref<5120xf16, #gpu.address_space<workgroup>>, ...) kernel {
        ... amdgpu.mfma 32x32x8 ...
      }
    }
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "the chip to generate for: gfx942, gfx950, gfx1100, gfx1151 or sm_90">,
  ];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::amdgpu::AMDGPUDialect", "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect", "::mlir::ROCDL::ROCDLDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect", "::mlir::LLVM::LLVMDialect"
  ];
}

def TesseraLowerToROCDL : Pass<"tessera-lower-to-rocdl", "::mlir::ModuleOp"> {
  let summary = "Lower the AMD kernels of a module to the LLVM and ROCDL dialects";
  let description = [{
    Runs, on every `gpu.module` whose target is `#rocdl.target`: `math.exp2` (f32) to
    `rocdl.exp2` (a single `v_exp_f32`, no device libraries), `convert-scf-to-cf`,
    `convert-gpu-to-rocdl{chipset=<chip> runtime=HIP use-bare-ptr-memref-call-conv=true}`,
    canonicalization and CSE. `chip` must match the modules' targets when given.

    ```mlir
    // tessera-opt --tessera-generate-kernels=target=gfx942 --tessera-lower-to-rocdl=chip=gfx942
    gpu.module @gemm [#rocdl.target<chip = "gfx942", ...>] {
      llvm.func @gemm(%arg0: !llvm.ptr, ...) attributes {gpu.kernel, rocdl.kernel, ...} {
        ... rocdl.mfma.f32.32x32x8f16 ...
      }
    }
    ```
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"\"",
           "the AMD chip; empty takes it from each gpu.module's #rocdl.target">,
  ];
  let dependentDialects = ["::mlir::ROCDL::ROCDLDialect", "::mlir::LLVM::LLVMDialect"];
}

def TesseraLowerToNVVM : Pass<"tessera-lower-to-nvvm", "::mlir::ModuleOp"> {
  let summary = "Lower the NVIDIA kernels of a module to the LLVM and NVVM dialects";
  let description = [{
    Runs, on every `gpu.module` whose target is `#nvvm.target`: `convert-scf-to-cf`,
    `convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true}` (`math.exp2` becomes
    `ex2.approx.ftz.f32`), `convert-nvvm-to-llvm`, `reconcile-unrealized-casts`, canonicalization
    and CSE. `chip` must match the modules' targets when given.

    ```mlir
    // tessera-opt --tessera-generate-kernels=target=sm_90 --tessera-lower-to-nvvm=chip=sm_90
    gpu.module @gemm [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">] {
      llvm.func @gemm(%arg0: !llvm.ptr, ...) attributes {gpu.kernel, nvvm.kernel, ...} {
        ... nvvm.mma.sync ...
      }
    }
    ```
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"\"",
           "the NVIDIA chip; empty takes it from each gpu.module's #nvvm.target">,
  ];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect", "::mlir::LLVM::LLVMDialect"];
}

def TesseraStaticKernelArgs : Pass<"tessera-static-kernel-args", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Give the kernels' memref<?xT> buffer arguments a static nominal extent";
  let description = [{
    Kernel IR passes buffers as `memref<?xT>` so the simulator checks every access against
    the real buffer size. The bare-pointer calling convention of the GPU lowerings needs
    static shapes; a 1-D identity memref's size never enters address arithmetic, so each
    buffer argument becomes `memref<1099511627776xT>` right before lowering.

    ```mlir
    gpu.func @k(%a: memref<?xf16>) kernel   // becomes
    gpu.func @k(%a: memref<1099511627776xf16>) kernel
    ```
  }];
}

#endif // TESSERA_PASSES_TD

// The AMD lowering leaves no gpu/scf/vector/amdgpu op behind: ROCDL MFMA intrinsics and LDS
// in address space 3, bare-pointer kernel arguments.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 --tessera-lower-to-rocdl=chip=gfx942 | FileCheck %s --implicit-check-not=amdgpu.mfma --implicit-check-not=scf. --implicit-check-not=gpu.barrier
// RUN: not tessera-opt %s --tessera-generate-kernels=target=gfx942 --tessera-lower-to-rocdl=chip=gfx950 2>&1 | FileCheck %s --check-prefix=MISMATCH

// CHECK: gpu.module @gemm [#rocdl.target<O = 3, chip = "gfx942", abi = "500">]
// CHECK: llvm.mlir.global internal @__wg_gemm_0() {addr_space = 3 : i32} : !llvm.array<5120 x f16>
// CHECK: llvm.mlir.global internal @__wg_gemm_1() {addr_space = 3 : i32} : !llvm.array<5120 x f16>
// CHECK: llvm.func @gemm(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64,
// CHECK-SAME: gpu.kernel
// CHECK-SAME: rocdl.kernel
// CHECK: rocdl.barrier
// CHECK: rocdl.mfma.f32.32x32x8f16

// MISMATCH: error: gpu.module targets gfx942 but the lowering was asked for chip gfx950
tessera.wmma_gemm @gemm {dtype = f16, out_type = f32}

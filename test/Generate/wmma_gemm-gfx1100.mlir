// wmma_gemm on gfx1100 (wave32): WMMA 16x16x16 with 16 K elements per lane.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx1100 | FileCheck %s --implicit-check-not=tessera.wmma_gemm
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx1151 | FileCheck %s --check-prefix=GFX1151

// CHECK-LABEL: gpu.module @gemm_f16 [#rocdl.target<O = 3, chip = "gfx1100", abi = "500">]
// CHECK: known_block_size = array<i32: 256, 1, 1>
// CHECK: %[[LANE:.+]] = arith.remui %{{.+}}, %c32 : index
// CHECK-COUNT-16: amdgpu.wmma 16x16x16 {{.+}} : vector<16xf16>, vector<16xf16>, vector<8xf32>
// CHECK-NOT: amdgpu.mfma
tessera.wmma_gemm @gemm_f16 {dtype = f16, out_type = f32}

// GFX1151: #rocdl.target<O = 3, chip = "gfx1151", abi = "500">
// GFX1151: amdgpu.wmma 16x16x16

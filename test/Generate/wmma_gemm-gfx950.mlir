// wmma_gemm on gfx950: the double-K MFMA 32x32x16 and XOR-swizzled (unpadded) LDS tiles.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx950 | FileCheck %s --implicit-check-not=tessera.wmma_gemm

// CHECK-LABEL: gpu.module @gemm_bf16 [#rocdl.target<O = 3, chip = "gfx950", abi = "500">]
// CHECK: workgroup(%[[LDSA:.+]] : memref<4096xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<4096xbf16, #gpu.address_space<workgroup>>)
// CHECK: arith.xori
// CHECK: vector.load %[[LDSA]][%{{.+}}] {alignment = 16 : i64} : memref<4096xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK-COUNT-8: amdgpu.mfma 32x32x16 {{.+}} : vector<8xbf16>, vector<8xbf16>, vector<16xf32>
// CHECK-NOT: amdgpu.mfma 32x32x8
tessera.wmma_gemm @gemm_bf16 {dtype = bf16, out_type = f32}

// wmma_gemm on gfx942: LDS-staged tiles, MFMA 32x32x8, one gpu.module per directive.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s --implicit-check-not=tessera.wmma_gemm

// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: gpu.module @gemm_f16 [#rocdl.target<O = 3, chip = "gfx942", abi = "500">]
// CHECK: gpu.func @gemm_f16(%[[A:.+]]: memref<?xf16>, %[[B:.+]]: memref<?xf16>, %[[C:.+]]: memref<?xf32>, %[[M:.+]]: index, %[[N:.+]]: index, %[[K:.+]]: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index)
// CHECK-SAME: workgroup(%[[LDSA:.+]] : memref<5120xf16, #gpu.address_space<workgroup>>, %[[LDSB:.+]] : memref<5120xf16, #gpu.address_space<workgroup>>)
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: tessera.arg_names = ["a", "b", "c", "M", "N", "K", "lda", "ldb", "ldc"]
// CHECK-SAME: tessera.directive = "wmma_gemm"
// CHECK: scf.for
// CHECK: gpu.barrier
// 16-byte global loads staged into LDS
// CHECK: vector.load %[[A]][%{{.+}}] {alignment = 16 : i64} : memref<?xf16>, vector<8xf16>
// CHECK: vector.store %{{.+}}, %[[LDSA]][%{{.+}}] {alignment = 16 : i64} : memref<5120xf16, #gpu.address_space<workgroup>>, vector<8xf16>
// CHECK: gpu.barrier
// fragments from LDS, 4 consecutive K per lane
// CHECK: vector.load %[[LDSA]][%{{.+}}] {alignment = 8 : i64} : memref<5120xf16, #gpu.address_space<workgroup>>, vector<4xf16>
// CHECK-COUNT-16: amdgpu.mfma 32x32x8 {{.+}} : vector<4xf16>, vector<4xf16>, vector<16xf32>
// CHECK: scf.yield
// tail-masked accumulator stores
// CHECK: scf.if
// CHECK: memref.store %{{.+}}, %[[C]][%{{.+}}] : memref<?xf32>
tessera.wmma_gemm @gemm_f16 {dtype = f16, out_type = f32}

// Second directive: its own module and kernel symbol; bf16 in, bf16 out, B given as N x K.
// CHECK-LABEL: gpu.module @gemm_bf16_tb
// CHECK: gpu.func @gemm_bf16_tb({{.+}}: memref<?xbf16>, {{.+}}: memref<?xbf16>, %[[C2:.+]]: memref<?xbf16>,
// CHECK-COUNT-16: amdgpu.mfma 32x32x8 {{.+}} : vector<4xbf16>, vector<4xbf16>, vector<16xf32>
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: memref.store %{{.+}}, %[[C2]]
tessera.wmma_gemm @gemm_bf16_tb {dtype = bf16, out_type = bf16, transpose_b}

// A smaller tile with two waves: 64 x 32 block, one 32 x 32 wave tile each.
// CHECK-LABEL: gpu.module @gemm_small
// CHECK: known_block_size = array<i32: 128, 1, 1>
// CHECK-COUNT-2: amdgpu.mfma 32x32x8
// CHECK-NOT: amdgpu.mfma
// CHECK: scf.yield
tessera.wmma_gemm @gemm_small {dtype = f16, out_type = f16, transpose_a,
                               tile = #tessera.tile<m = 64, n = 32, k = 16, waves = 2, stages = 1>}

// wmma_gemm on sm_90: the portable mma.sync m16n8k16 path, bf16 packed in i32 for nvvm.mma.sync.
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --implicit-check-not=tessera.wmma_gemm
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 --tessera-lower-to-nvvm=chip=sm_90 | FileCheck %s --check-prefix=NVVM

// CHECK-LABEL: gpu.module @gemm_f16 [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">]
// CHECK: known_block_size = array<i32: 256, 1, 1>
// 16-byte aligned global loads (NVPTX splits unaligned vector accesses)
// CHECK: vector.load %{{.+}} {alignment = 16 : i64} : memref<?xf16>, vector<8xf16>
// CHECK: nvvm.mma.sync A[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}]  B[%{{.+}}, %{{.+}}]  C[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}]  {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
tessera.wmma_gemm @gemm_f16 {dtype = f16, out_type = f32}

// CHECK-LABEL: gpu.module @gemm_bf16
// CHECK: vector.bitcast %{{.+}} : vector<2xbf16> to vector<1xi32>
// CHECK: nvvm.mma.sync {{.+}} multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>{{.+}} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
tessera.wmma_gemm @gemm_bf16 {dtype = bf16, out_type = bf16, transpose_b}

// NVVM: llvm.func @gemm_f16(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64,
// NVVM-SAME: nvvm.kernel
// NVVM: nvvm.mma.sync
// NVVM: llvm.func @gemm_bf16

// B stored K x N (not transposed) is staged as it is and read with ldmatrix.trans; A with
// ldmatrix x4.
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=LDM
// LDM-LABEL: gpu.module @gemm_f16
// LDM: nvgpu.ldmatrix %{{.+}} {numTiles = 4 : i32, transpose = false} : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
// LDM: nvgpu.ldmatrix %{{.+}} {numTiles = 2 : i32, transpose = true} : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
// LDM-LABEL: gpu.module @gemm_bf16
// LDM: nvgpu.ldmatrix %{{.+}} {numTiles = 2 : i32, transpose = false} : memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>> -> vector<2x2xbf16>

// sm_90 pipelines two K steps by default: the next A/B tiles are loaded into registers (loop
// results beyond the accumulators) while this step computes.
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=STAGES
// STAGES-LABEL: gpu.module @gemm_f16
// STAGES: scf.for {{.+}} -> (vector<4xf32>, {{.+}}, vector<8xf16>

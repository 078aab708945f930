// attn_combine: FlashAttention-3's combine as a plain kernel. Its arguments (any strides), grid
// (one workgroup per (head, token) of a batch item), four waves and their column sums in LDS; the max over the parts' LSEs
// (a loop over the parts, then a wave reduction), the weighted sums (exp2 of LSE - max, a part
// of weight 0 never read: its load feeds only the selected-away fma), the waves' sums in LDS
// after a barrier, the output rounded once to dtype and the LSE in f32.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=SM90

// CHECK-LABEL: gpu.func @combine_bf16_d128
// CHECK-SAME: %[[PART:arg0]]: memref<?xf32>, %[[LSEP:arg1]]: memref<?xf32>, %[[O:arg2]]: memref<?xbf16>, %[[LSE:arg3]]: memref<?xf32>, %[[SPLITS:arg4]]: index
// CHECK-SAME: workgroup(%[[SUMS:.+]] : memref<{{[0-9]+}}xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: tessera.arg_names = ["out_partial", "lse_partial", "o", "lse", "num_splits", "B", "S", "H", "out_partial_stride_split", "out_partial_stride_b", "out_partial_stride_s", "out_partial_stride_h", "lse_partial_stride_split", "lse_partial_stride_b", "lse_partial_stride_s", "lse_partial_stride_h", "o_stride_b", "o_stride_s", "o_stride_h", "lse_stride_b", "lse_stride_s", "lse_stride_h"]
// CHECK-SAME: tessera.directive = "attn_combine"
// CHECK-SAME: tessera.grid = "{{\[\[}}\22mul\22, \22H\22, \22S\22], \22B\22, 1]"
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[SPLITS]] step %c64
// CHECK: memref.load %[[LSEP]]
// CHECK: arith.maximumf
// CHECK: gpu.shuffle xor
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[SPLITS]] step %c16
// CHECK: math.exp2
// CHECK: %[[KEEP:.+]] = arith.cmpf ogt
// CHECK: memref.load %[[PART]]
// CHECK: %[[FMA:.+]] = math.fma
// CHECK: arith.select %[[KEEP]], %[[FMA]]
// CHECK: memref.store %{{.+}}, %[[SUMS]]
// CHECK: gpu.barrier
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: memref.store %{{.+}}, %[[O]]
// CHECK: math.log2
// CHECK: memref.store %{{.+}}, %[[LSE]]
tessera.attn_combine @combine_bf16_d128 {dtype = bf16, head_dim = 128}

// An f32 output is stored as computed; wave 32 (sm_90): 128 threads.
// SM90-LABEL: gpu.func @combine_f32_d40
// SM90-SAME: workgroup(%{{.+}} : memref<{{[0-9]+}}xf32, #gpu.address_space<workgroup>>)
// SM90-SAME: known_block_size = array<i32: 128, 1, 1>
// SM90-NOT: arith.truncf
// SM90: gpu.return
tessera.attn_combine @combine_f32_d40 {dtype = f32, head_dim = 40}

// paged_decode with sinks: each row's sink is its query head's (rows are (head, token) pairs of
// one KV head's group), joined in the decode kernel's epilogue only when the keys are not split
// (-inf otherwise: none), and once in the combine: in the maximum and in the sum of weights.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @pd_decode(
// CHECK-SAME: tessera.arg_names = ["q", "k_cache", "v_cache", "block_table", "cache_seqlens", "o", "lse", "sinks", "B",
// CHECK: %[[SINK:.+]] = memref.load %arg7[%{{.+}}] : memref<?xf32>
// CHECK-NEXT: %[[ONE:.+]] = arith.cmpi eq, %arg12, %c1 : index
// CHECK-NEXT: arith.select %[[ONE]], %[[SINK]], %cst{{.*}} : f32
// CHECK-LABEL: gpu.func @pd_combine(
// CHECK: %[[CSINK:.+]] = memref.load %arg7[%{{.+}}] : memref<?xf32>
// CHECK: arith.maxnumf %{{.+}}, %[[CSINK]]
// CHECK: scf.for
// CHECK: %[[D:.+]] = arith.subf %[[CSINK]], %{{.+}} : f32
// CHECK: %[[L2:.+]] = arith.mulf %[[D]], %cst{{.*}} : f32
// CHECK: %[[W:.+]] = math.exp2 %[[L2]] : f32
// CHECK: arith.addf %{{.+}}, %[[W]] : f32
tessera.paged_decode @pd {dtype = f16, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, return_lse, split_kv, sinks}

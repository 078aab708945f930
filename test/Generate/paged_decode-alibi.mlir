// ALiBi in paged_decode: the arguments it adds; each (head, token) row's slope (its own query
// head's, at batch * alibi_stride_b + head) and position (token + cache length - Sq) made once
// before the key loop; in the loop the distance key - position and one fma a score vector (a
// causal mask: no absolute value).
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @pd_alibi_decode
// CHECK-SAME: %[[SLOPES:arg6]]: memref<?xf32>
// CHECK-SAME: tessera.arg_names = ["q", "k_cache", "v_cache", "block_table", "cache_seqlens", "o", "alibi_slopes", "B", {{.*}} "block_table_stride", "alibi_stride_b", "scale"]
// CHECK: %[[SLOPE:.+]] = memref.load %[[SLOPES]][%{{.+}}] : memref<?xf32>
// CHECK: %[[SLOPE2:.+]] = arith.mulf %[[SLOPE]], %{{.+}} : f32
// CHECK: %[[SLOPEV:.+]] = vector.broadcast %[[SLOPE2]] : f32 to vector<16xf32>
// CHECK: %[[POSV:.+]] = vector.broadcast %{{.+}} : f32 to vector<16xf32>
// CHECK: scf.for
// CHECK: %[[D:.+]] = arith.subf %{{.+}}, %[[POSV]] : vector<16xf32>
// CHECK-NOT: arith.maxnumf
// CHECK: math.fma %[[SLOPEV]], %[[D]], %{{.+}} : vector<16xf32>
tessera.paged_decode @pd_alibi {dtype = f16, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, alibi}

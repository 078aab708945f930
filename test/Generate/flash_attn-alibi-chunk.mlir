// ALiBi and chunked local attention on flash_attn and flash_attn_bwd: the arguments each adds,
// the bias as one fma per score vector on the log2-domain scores (the scale applied before it,
// not in the exponent), -|d| only without a causal mask, and a chunk's bounds per query row by
// a runtime floor division, only on edge tiles.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @fa_alibi_causal
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "alibi_slopes", "B", {{.*}} "o_stride_h", "alibi_stride_b", "scale"]
// The slope of (batch, head), times log2(e).
// CHECK: %[[SLOPE:.+]] = memref.load %arg4[%{{.+}}] : memref<?xf32>
// CHECK: %[[SLOPE2:.+]] = arith.mulf %[[SLOPE]], %cst{{.*}} : f32
// CHECK: scf.for
// CHECK: amdgpu.mfma
// CHECK: %[[SCALED:.+]] = arith.mulf %{{.+}}, %{{.+}} : vector<16xf32>
// CHECK: %[[D:.+]] = arith.addf %{{.+}}, %cst{{.*}} : vector<16xf32>
// CHECK-NOT: arith.maxnumf
// CHECK: math.fma %{{.+}}, %[[D]], %[[SCALED]] : vector<16xf32>
// CHECK-LABEL: gpu.module @fa_alibi_none
// CHECK: %[[D2:.+]] = arith.addf %{{.+}}, %cst{{.*}} : vector<16xf32>
// CHECK: %[[NEG:.+]] = arith.negf %[[D2]] : vector<16xf32>
// CHECK: %[[ABS:.+]] = arith.maxnumf %[[D2]], %[[NEG]]
// CHECK: math.fma %{{.+}}, %[[ABS]], %{{.+}} : vector<16xf32>
tessera.flash_attn @fa_alibi_causal {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, alibi}
tessera.flash_attn @fa_alibi_none {dtype = f16, head_dim = 64, alibi}

// CHECK-LABEL: gpu.func @fa_chunk
// CHECK-SAME: "scale", "window_left", "window_right", "attention_chunk"]
// The key tiles start at the first query's chunk: chunk 0 (off) divides by 1.
// CHECK: %[[SIZE:.+]] = arith.maxsi %{{.+}}, %c1 : index
// CHECK: arith.floordivsi %{{.+}}, %[[SIZE]] : index
// CHECK: scf.for
// Edge tiles: each row's chunk, then the element tests against it.
// CHECK: scf.if %{{.+}} -> (vector<16xf32>)
// CHECK: arith.floordivsi %{{.+}}, %{{.+}} : index
// CHECK: arith.cmpi sle
tessera.flash_attn @fa_chunk {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, attention_chunk}

// The backward: every kernel of the set takes the arguments; the main kernel carries the
// slope of its next query head through its loop.
// CHECK-LABEL: gpu.func @bwd_main
// CHECK-SAME: "alibi_slopes"
// CHECK-SAME: "alibi_stride_b", "scale", "attention_chunk", "bwd_stats", "dq_accum"]
// CHECK: memref.load %{{.+}} : memref<?xf32>
// CHECK: scf.for {{.+}} iter_args({{.+}}, %{{.+}} = %{{.+}}) -> ({{.+}}, index, index, f32)
// CHECK: math.fma
tessera.flash_attn_bwd @bwd {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, alibi, attention_chunk}

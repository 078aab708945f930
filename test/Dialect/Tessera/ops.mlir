// Round trip of every tessera op: print, re-parse, print again.
// RUN: tessera-opt %s | tessera-opt | FileCheck %s

// CHECK-LABEL: tessera.wmma_gemm @gemm_default
// CHECK-SAME: dtype = f16, out_type = f32
tessera.wmma_gemm @gemm_default {dtype = f16, out_type = f32}

// CHECK-LABEL: tessera.wmma_gemm @gemm_full
// CHECK-SAME: dtype = bf16, out_type = bf16
// CHECK-SAME: tile = #tessera.tile<m = 64, n = 128, k = 32, waves = 4, stages = 1>
// CHECK-SAME: transpose_a, transpose_b
tessera.wmma_gemm @gemm_full {dtype = bf16, out_type = bf16, transpose_a, transpose_b,
                              tile = #tessera.tile<m = 64, n = 128, k = 32, waves = 4, stages = 1>}

// CHECK-LABEL: tessera.flash_attn @fa_min
// CHECK-SAME: dtype = f16, head_dim = 64 : i64
tessera.flash_attn @fa_min {dtype = f16, head_dim = 64}

// CHECK-LABEL: tessera.flash_attn @fa_full
// CHECK-SAME: mask = #tessera.mask<causal_bottom_right>
// CHECK-SAME: pack_gqa = 4 : i64, return_lse, sliding_window, softcap
// CHECK-SAME: tile = #tessera.tile<m = 128, n = 64, k = 64, waves = 4, stages = 2>
tessera.flash_attn @fa_full {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>,
                             sliding_window, softcap, return_lse, pack_gqa = 4,
                             tile = #tessera.tile<m = 128, n = 64, k = 64, waves = 4, stages = 2>}

// CHECK-LABEL: tessera.flash_attn @fa_varlen
// CHECK-SAME: mask = #tessera.mask<causal_top_left>
// CHECK-SAME: varlen
tessera.flash_attn @fa_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, varlen}

// CHECK-LABEL: tessera.flash_attn_bwd @bwd
// CHECK-SAME: deterministic
// CHECK-SAME: mask = #tessera.mask<causal_top_left>
// CHECK-SAME: sliding_window, softcap, varlen
tessera.flash_attn_bwd @bwd {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>,
                             sliding_window, softcap, varlen, deterministic}

// CHECK-LABEL: tessera.attn_combine @combine
// CHECK-SAME: dtype = bf16, head_dim = 512 : i64
tessera.attn_combine @combine {dtype = bf16, head_dim = 512}

// CHECK-LABEL: tessera.paged_decode @decode_bf16
// CHECK-SAME: block_size = 16 : i64, dtype = bf16, head_dim = 128 : i64
tessera.paged_decode @decode_bf16 {dtype = bf16, head_dim = 128, block_size = 16}

// CHECK-LABEL: tessera.paged_decode @decode_fp8
// CHECK-SAME: kv_dtype = f8E4M3FN
// CHECK-SAME: kv_scale = #tessera.kv_scale<per_token>
// CHECK-SAME: mask = #tessera.mask<causal_bottom_right>
// CHECK-SAME: pack_gqa = 8 : i64, return_lse, sliding_window, softcap, split_kv
tessera.paged_decode @decode_fp8 {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128, block_size = 256,
                                  kv_scale = #tessera.kv_scale<per_token>,
                                  mask = #tessera.mask<causal_bottom_right>, sliding_window,
                                  softcap, return_lse, split_kv, pack_gqa = 8}

// CHECK-LABEL: tessera.paged_decode @decode_fnuz
// CHECK-SAME: kv_dtype = f8E4M3FNUZ
// CHECK-SAME: kv_scale = #tessera.kv_scale<per_tensor>
tessera.paged_decode @decode_fnuz {dtype = f16, kv_dtype = f8E4M3FNUZ, head_dim = 64, block_size = 1,
                                   kv_scale = #tessera.kv_scale<per_tensor>}

// CHECK-LABEL: func.func @atomic_addf
// CHECK: tessera.atomic_addf %{{.*}}, %{{.*}}[%{{.*}}] : vector<4xf32>, memref<?xf32>
func.func @atomic_addf(%v: vector<4xf32>, %w: memref<?xf32>, %i: index) {
  tessera.atomic_addf %v, %w[%i] : vector<4xf32>, memref<?xf32>
  return
}

// CHECK-LABEL: func.func @swap_wave_halves
// CHECK: %{{.*}}, %{{.*}} = tessera.swap_wave_halves %{{.*}}, %{{.*}} : i32
func.func @swap_wave_halves(%a: i32, %b: i32) -> (i32, i32) {
  %lo, %hi = tessera.swap_wave_halves %a, %b : i32
  return %lo, %hi : i32, i32
}

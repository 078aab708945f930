// Every verifier branch of the tessera dialect, with its message.
// RUN: tessera-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{tile 'm' must be a positive multiple of 16, got 24}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 24, n = 64, k = 32, waves = 4, stages = 1>}

// -----

// expected-error @+1 {{tile 'k' must be a positive multiple of 16, got 0}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 64, n = 64, k = 0, waves = 4, stages = 1>}

// -----

// expected-error @+1 {{tile 'waves' must be 1, 2, 4 or 8, got 3}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 64, n = 64, k = 32, waves = 3, stages = 1>}

// -----

// expected-error @+1 {{tile 'stages' must be between 1 and 4, got 5}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 64, n = 64, k = 32, waves = 4, stages = 5>}

// -----

// expected-error @+1 {{'tessera.wmma_gemm' op 'dtype' must be f16 or bf16, got 'f32'}}
tessera.wmma_gemm @g {dtype = f32, out_type = f32}

// -----

// expected-error @+1 {{'tessera.wmma_gemm' op 'out_type' must be f16, bf16 or f32, got 'i8'}}
tessera.wmma_gemm @g {dtype = f16, out_type = i8}

// -----

// expected-error @+1 {{'tessera.wmma_gemm' op requires attribute 'out_type'}}
tessera.wmma_gemm @g {dtype = f16}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'dtype' must be f16 or bf16, got 'f8E4M3FN'}}
tessera.flash_attn @fa {dtype = f8E4M3FN, head_dim = 128}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'head_dim' must be a multiple of 8 from 8 to 256, got 84}}
tessera.flash_attn @fa {dtype = f16, head_dim = 84}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'head_dim' must be a multiple of 8 from 8 to 256, got 272}}
tessera.flash_attn @fa {dtype = f16, head_dim = 272}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'pack_gqa' must be a power of two between 1 and 16, got 3}}
tessera.flash_attn @fa {dtype = f16, head_dim = 64, pack_gqa = 3}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'pack_gqa' must be a power of two between 1 and 16, got 32}}
tessera.flash_attn @fa {dtype = f16, head_dim = 64, pack_gqa = 32}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'pack_gqa' = 2 is not supported together with 'varlen'}}
tessera.flash_attn @fa {dtype = f16, head_dim = 64, pack_gqa = 2, varlen}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'paged_kv' needs 'varlen' (cu_seqlens_k gives each sequence's key count)}}
tessera.flash_attn @fa {dtype = f16, head_dim = 64, paged_kv}

// -----

// expected-error @+1 {{'tessera.flash_attn' op requires attribute 'head_dim'}}
tessera.flash_attn @fa {dtype = f16}

// -----

// expected-error @+2 {{expected ::tessera::MaskKind to be one of: none, causal_top_left, causal_bottom_right}}
// expected-error @+1 {{failed to parse Tessera_MaskKindAttr parameter 'value'}}
tessera.flash_attn @fa {dtype = f16, head_dim = 64, mask = #tessera.mask<diagonal>}

// -----

// expected-error @+1 {{'tessera.flash_attn_bwd' op 'dtype' must be f16 or bf16, got 'f32'}}
tessera.flash_attn_bwd @bwd {dtype = f32, head_dim = 64}

// -----

// expected-error @+1 {{'tessera.flash_attn_bwd' op 'head_dim' must be a multiple of 8 from 8 to 256, got 512}}
tessera.flash_attn_bwd @bwd {dtype = bf16, head_dim = 512}

// -----

// expected-error @+1 {{'tessera.flash_attn_bwd' op 'head_dim' must be a multiple of 8 from 8 to 256, got 36}}
tessera.flash_attn_bwd @bwd {dtype = bf16, head_dim = 36}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'dtype' must be f16 or bf16, got 'f8E4M3FN'}}
tessera.paged_decode @d {dtype = f8E4M3FN, head_dim = 128, block_size = 16}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'head_dim' must be one of 32, 64, 96, 128, 256, got 100}}
tessera.paged_decode @d {dtype = f16, head_dim = 100, block_size = 16}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'pack_gqa' must be a power of two between 1 and 16, got 0}}
tessera.paged_decode @d {dtype = f16, head_dim = 128, block_size = 16, pack_gqa = 0}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'kv_dtype' must be f16, bf16, f8E4M3FNUZ or f8E4M3FN, got 'f8E5M2'}}
tessera.paged_decode @d {dtype = f16, kv_dtype = f8E5M2, head_dim = 128, block_size = 16}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'kv_dtype' 'f16' must equal 'dtype' 'bf16' unless it is fp8}}
tessera.paged_decode @d {dtype = bf16, kv_dtype = f16, head_dim = 128, block_size = 16}

// -----

// expected-error @+1 {{'tessera.paged_decode' op fp8 'kv_dtype' 'f8E4M3FN' requires 'kv_scale' (per_tensor or per_token)}}
tessera.paged_decode @d {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128, block_size = 16}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'kv_scale' applies only to an fp8 'kv_dtype', got 'bf16'}}
tessera.paged_decode @d {dtype = bf16, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'fp8_products' needs an fp8 'kv_dtype' with per_tensor 'kv_scale'}}
tessera.paged_decode @d {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_token>, fp8_products}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'fp8_products' needs an fp8 'kv_dtype' with per_tensor 'kv_scale'}}
tessera.paged_decode @d {dtype = bf16, head_dim = 128, block_size = 16, fp8_products}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'block_size' must be a power of two between 1 and 1024, got 48}}
tessera.paged_decode @d {dtype = f16, head_dim = 128, block_size = 48}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'block_size' must be a power of two between 1 and 1024, got 2048}}
tessera.paged_decode @d {dtype = f16, head_dim = 128, block_size = 2048}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'mask' causal_top_left is not meaningful for decoding against a cache; use causal_bottom_right}}
tessera.paged_decode @d {dtype = f16, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_top_left>}

// -----

func.func @f() {
  // expected-error @+1 {{'tessera.flash_attn' op expects parent op 'builtin.module'}}
  tessera.flash_attn @fa {dtype = f16, head_dim = 64}
  return
}

// -----

tessera.wmma_gemm @same {dtype = f16, out_type = f32}
// expected-error @+2 {{redefinition of symbol named 'same'}}
// expected-note @-2 {{see existing symbol definition here}}
tessera.wmma_gemm @same {dtype = bf16, out_type = f32}

// -----

func.func @atomic_addf_three(%v: vector<3xf32>, %w: memref<?xf32>, %i: index) {
  // expected-error @+1 {{operand #0 must be vector<2xf32> or vector<4xf32>}}
  tessera.atomic_addf %v, %w[%i] : vector<3xf32>, memref<?xf32>
  return
}

// -----

func.func @atomic_addf_f16(%v: vector<2xf16>, %w: memref<?xf16>, %i: index) {
  // expected-error @+1 {{operand #0 must be vector<2xf32> or vector<4xf32>}}
  tessera.atomic_addf %v, %w[%i] : vector<2xf16>, memref<?xf16>
  return
}

// -----

func.func @swap_wave_halves_f16(%a: f16, %b: f16) {
  // expected-error @+1 {{operand #0 must be 32-bit float or 32-bit signless integer}}
  %lo, %hi = tessera.swap_wave_halves %a, %b : f16
  return
}

// -----

// expected-error @+1 {{'tessera.flash_attn' op 'seqused' needs 'varlen' (it bounds each packed sequence)}}
tessera.flash_attn @fa_seqused {dtype = f16, head_dim = 64, seqused}

// -----

// expected-error @+1 {{'tessera.flash_attn_bwd' op 'seqused' needs 'varlen' (it bounds each packed sequence)}}
tessera.flash_attn_bwd @fa_bwd_seqused {dtype = f16, head_dim = 64, seqused}

// -----

// expected-error @+1 {{'dtype' (the output's) must be f16, bf16 or f32, got 'f64'}}
tessera.attn_combine @c {dtype = f64, head_dim = 64}

// -----

// expected-error @+1 {{'head_dim' must be between 1 and 1024, got 0}}
tessera.attn_combine @c {dtype = f32, head_dim = 0}

// -----

// expected-error @+1 {{'head_dim' must be between 1 and 1024, got 2048}}
tessera.attn_combine @c {dtype = bf16, head_dim = 2048}

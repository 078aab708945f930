// Combinations the generators cannot build are diagnostics on the directive, never crashes.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics --tessera-generate-kernels=target=gfx942
// RUN: not tessera-opt %s --split-input-file --tessera-generate-kernels=target=gfx000 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not tessera-opt %s --split-input-file --tessera-generate-kernels 2>&1 | FileCheck %s --check-prefix=NOTARGET

// TARGET: error: unknown target 'gfx000'; known targets: gfx942, gfx950, gfx1100, gfx1151, sm_80, sm_90
// NOTARGET: error: unknown target ''; known targets: gfx942

// expected-error @+1 {{'tessera.wmma_gemm' op tile 64x64x32 with 8 waves (2x4) does not divide into v_mfma_f32_32x32x8_f16 atoms (32x32x8) on gfx942}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 64, n = 64, k = 32, waves = 8, stages = 1>}

// -----

// expected-error @+1 {{'tessera.wmma_gemm' op tile 48x128x32 with 4 waves (2x2) does not divide into v_mfma_f32_32x32x8_f16 atoms (32x32x8) on gfx942}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 48, n = 128, k = 32, waves = 4, stages = 1>}

// -----

// expected-error @+1 {{'tessera.wmma_gemm' op tile 256x256 with 1 waves needs 1024 accumulator registers per lane, more than half of the 512 gfx942 has}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 256, n = 256, k = 32, waves = 1, stages = 1>}

// -----

// expected-error @+1 {{'tessera.wmma_gemm' op wmma_gemm supports tile 'stages' 1 or 2, got 3}}
tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 128, n = 128, k = 32, waves = 4, stages = 3>}

// -----

// expected-error @+1 {{'tessera.paged_decode' op 'kv_dtype' 'f8E4M3FN' is not supported on gfx942 (its fp8 KV format is f8E4M3FNUZ)}}
tessera.paged_decode @d {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>}

// -----

// The rejection names the limit the closest candidate failed, with its values.
// expected-error @+1 {{'tessera.flash_attn' op no tile configuration of gfx942 atoms fits head_dim 256 with the given tile; the closest, v_mfma_f32_32x32x8_bf16 (S^T) with 256 queries x 128 keys, 4 waves: needs 272384 bytes of LDS, gfx942 has 65536}}
tessera.flash_attn @fa {dtype = bf16, head_dim = 256, tile = #tessera.tile<m = 256, n = 128, k = 64, waves = 4, stages = 1>}

// -----

// expected-error @+1 {{'tessera.flash_attn' op no tile configuration of gfx942 atoms fits head_dim 128 with the given tile; the closest, v_mfma_f32_32x32x8_f16 (S^T) with 48 queries x 64 keys, 4 waves: the queries do not split into the waves' atom tiles}}
tessera.flash_attn @fa {dtype = f16, head_dim = 128, tile = #tessera.tile<m = 48, n = 64, k = 64, waves = 4, stages = 1>}

// -----

// expected-error @+1 {{'tessera.flash_attn_bwd' op no flash_attn_bwd tile of v_mfma_f32_16x16x16_bf16 fits the given tile: the main kernel needs 75648 bytes of LDS, gfx942 has 65536}}
tessera.flash_attn_bwd @bwd {dtype = bf16, head_dim = 128, tile = #tessera.tile<m = 48, n = 64, k = 64, waves = 4, stages = 1>}

// -----

// expected-error @+1 {{'tessera.flash_attn_bwd' op no flash_attn_bwd tile of v_mfma_f32_16x16x16_f16 fits the given tile: the main kernel needs about 232 registers per lane, over the budget of 160 on gfx942}}
tessera.flash_attn_bwd @bwd {dtype = f16, head_dim = 128, tile = #tessera.tile<m = 16, n = 32, k = 32, waves = 1, stages = 1>}


// fp8_products paged_decode kernel sets of the gfx942, gfx950, sm_90 and sm_90a bundles (docs/decode.md): QK and PV
// of OCP e4m3 caches with per-tensor scales on the fp8 matrix instructions; f16 and bf16 queries, head_dim 128, pages
// of 16 and 64 tokens. gfx942 bundles get them in its FNUZ e4m3 (scripts/examples.sh); gfx11, whose matrix
// instructions read no fp8, has none.
tessera.paged_decode @pd_f16_d128_b16_fp8_products {dtype = f16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, fp8_products}
tessera.paged_decode @pd_f16_d128_b64_fp8_products {dtype = f16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, fp8_products}
tessera.paged_decode @pd_bf16_d128_b16_fp8_products {dtype = bf16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, fp8_products}
tessera.paged_decode @pd_bf16_d128_b64_fp8_products {dtype = bf16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, fp8_products}

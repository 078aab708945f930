// fp8 paged_decode kernel sets of dist/ (docs/decode.md): OCP e4m3 caches with per-tensor scales, f16 and bf16
// queries; head_dim 64 and 128; pages of 16 and 64 tokens. gfx942 bundles get the same sets in its FNUZ e4m3
// (scripts/examples.sh).
tessera.paged_decode @pd_f16_d64_b16_fp8 {dtype = f16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d64_b64_fp8 {dtype = f16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 64, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d128_b16_fp8 {dtype = f16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d128_b64_fp8 {dtype = f16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d64_b16_fp8 {dtype = bf16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d64_b64_fp8 {dtype = bf16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 64, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d128_b16_fp8 {dtype = bf16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d128_b64_fp8 {dtype = bf16, kv_dtype = f8E4M3FN, kv_scale = #tessera.kv_scale<per_tensor>, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}

// Default paged_decode kernel sets of dist/ (docs/decode.md): f16 and bf16; head_dim 64, 128, 256; cache
// pages of 16 and 64 tokens; bottom-right causal for multi-token decode; a runtime window, soft cap, LSE and
// split count. No tile: the generator picks one per target.
tessera.paged_decode @pd_f16_d64_b16 {dtype = f16, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d64_b64 {dtype = f16, head_dim = 64, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d128_b16 {dtype = f16, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d128_b64 {dtype = f16, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d256_b16 {dtype = f16, head_dim = 256, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_f16_d256_b64 {dtype = f16, head_dim = 256, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d64_b16 {dtype = bf16, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d64_b64 {dtype = bf16, head_dim = 64, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d128_b16 {dtype = bf16, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d128_b64 {dtype = bf16, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d256_b16 {dtype = bf16, head_dim = 256, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_bf16_d256_b64 {dtype = bf16, head_dim = 256, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
// attn_combine (docs/decode.md): results over parts of the keys merged, f32 or the models' dtypes out.
tessera.attn_combine @combine_f32_d64 {dtype = f32, head_dim = 64}
tessera.attn_combine @combine_f32_d128 {dtype = f32, head_dim = 128}
tessera.attn_combine @combine_f16_d64 {dtype = f16, head_dim = 64}
tessera.attn_combine @combine_f16_d128 {dtype = f16, head_dim = 128}
tessera.attn_combine @combine_bf16_d64 {dtype = bf16, head_dim = 64}
tessera.attn_combine @combine_bf16_d128 {dtype = bf16, head_dim = 128}

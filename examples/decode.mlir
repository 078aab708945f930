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

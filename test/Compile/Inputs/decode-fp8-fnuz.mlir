tessera.paged_decode @pd8 {dtype = bf16, kv_dtype = f8E4M3FNUZ, head_dim = 64, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>, mask = #tessera.mask<causal_bottom_right>}

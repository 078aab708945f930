tessera.paged_decode @pdp {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>, mask = #tessera.mask<causal_bottom_right>, fp8_products}

// FNUZ fp8 is gfx942-only.
tessera.paged_decode @d {dtype = bf16, kv_dtype = f8E4M3FNUZ, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>}

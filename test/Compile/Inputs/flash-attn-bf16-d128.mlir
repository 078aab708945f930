tessera.flash_attn @fa {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>}

// head_dim 84 is not a multiple of 8.
tessera.flash_attn @fa {dtype = f16, head_dim = 84}

// head_dim 88 is not a multiple of 16.
tessera.flash_attn @fa {dtype = f16, head_dim = 88}

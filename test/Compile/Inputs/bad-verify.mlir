// head_dim 80 is not supported.
tessera.flash_attn @fa {dtype = f16, head_dim = 80}

// A few flash_attn directives covering the feature flags, for the generation and ISA tests.
tessera.flash_attn @fa_f16_d64_br {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d128 {dtype = bf16, head_dim = 128, return_lse}
tessera.flash_attn @fa_bf16_d128_tl_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, varlen}

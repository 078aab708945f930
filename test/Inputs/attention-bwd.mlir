// flash_attn_bwd directives for the ISA gates: both modes, masks, window, softcap, varlen, head_dim
// 64 and 128.
tessera.flash_attn_bwd @bwd_f16_d64_br {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @bwd_bf16_d64_tl_varlen_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @bwd_bf16_d128_det {dtype = bf16, head_dim = 128, deterministic}
tessera.flash_attn_bwd @bwd_bf16_d128_tl_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}

// The head_dim 256 deterministic flash_attn_bwd set (its dQ kernel on 64 x 64 on mma.sync) for the sm_90 ptxas gate.
tessera.flash_attn_bwd @bwd_bf16_d256_br_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}

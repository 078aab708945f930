// Default flash_attn kernels of dist/: f16 and bf16; head_dim 32, 64, 96, 128, 256; mask none, causal
// top-left (tl) or bottom-right (br). Every kernel takes a runtime sliding window, softcap and LSE
// output; each has a varlen twin (packed batches, cu_seqlens). No tile: the generator picks one per target.
tessera.flash_attn @fa_f16_d32_none {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d32_none_varlen {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d32_tl {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d32_tl_varlen {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d32_br {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d32_br_varlen {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d64_none {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d64_none_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d64_tl {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d64_tl_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d64_br {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d64_br_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d96_none {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d96_none_varlen {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d96_tl {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d96_tl_varlen {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d96_br {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d96_br_varlen {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d128_none {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d128_none_varlen {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d128_tl {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d128_tl_varlen {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d128_br {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d128_br_varlen {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d256_none {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d256_none_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d256_tl {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d256_tl_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_f16_d256_br {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d256_br_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d32_none {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d32_none_varlen {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d32_tl {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d32_tl_varlen {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d32_br {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d32_br_varlen {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d64_none {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d64_none_varlen {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d64_tl {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d64_tl_varlen {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d64_br {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d64_br_varlen {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d96_none {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d96_none_varlen {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d96_tl {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d96_tl_varlen {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d96_br {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d96_br_varlen {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d128_none {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d128_none_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d128_tl {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d128_tl_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d128_br {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d128_br_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d256_none {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d256_none_varlen {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d256_tl {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d256_tl_varlen {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, varlen}
tessera.flash_attn @fa_bf16_d256_br {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d256_br_varlen {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen}
// Lean twins (LSE only): calls without a window or softcap pick these; they keep 64 keys per
// step where the full kernels drop to 32 for registers (sm_90 D128: 191 vs 164 TFLOP/s, bench/NOTES.md).
tessera.flash_attn @fa_f16_d32_none_lse {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_f16_d32_tl_lse {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_f16_d32_br_lse {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_f16_d64_none_lse {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_f16_d64_tl_lse {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_f16_d64_br_lse {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_f16_d96_none_lse {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_f16_d96_tl_lse {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_f16_d96_br_lse {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_f16_d128_none_lse {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_f16_d128_tl_lse {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_f16_d128_br_lse {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_f16_d256_none_lse {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_f16_d256_tl_lse {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_f16_d256_br_lse {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_bf16_d32_none_lse {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_bf16_d32_tl_lse {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_bf16_d32_br_lse {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_bf16_d64_none_lse {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_bf16_d64_tl_lse {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_bf16_d64_br_lse {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_bf16_d96_none_lse {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_bf16_d96_tl_lse {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_bf16_d96_br_lse {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_bf16_d128_none_lse {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_bf16_d128_tl_lse {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_bf16_d128_br_lse {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse}
tessera.flash_attn @fa_bf16_d256_none_lse {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, return_lse}
tessera.flash_attn @fa_bf16_d256_tl_lse {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, return_lse}
tessera.flash_attn @fa_bf16_d256_br_lse {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, return_lse}
// GQA-packed lean twins (head_dim 128): pack_gqa query heads of one KV head share a tile, all
// reading one K/V stream. With few queries a 128-row tile goes mostly unused; Python packs when
// that fills tiles better (_attention.pack_for). Packed on sm_90a; elsewhere one head per tile.
tessera.flash_attn @fa_f16_d128_none_lse_gqa4 {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, return_lse, pack_gqa = 4}
tessera.flash_attn @fa_f16_d128_none_lse_gqa8 {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, return_lse, pack_gqa = 8}
tessera.flash_attn @fa_f16_d128_tl_lse_gqa4 {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, return_lse, pack_gqa = 4}
tessera.flash_attn @fa_f16_d128_tl_lse_gqa8 {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, return_lse, pack_gqa = 8}
tessera.flash_attn @fa_f16_d128_br_lse_gqa4 {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse, pack_gqa = 4}
tessera.flash_attn @fa_f16_d128_br_lse_gqa8 {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse, pack_gqa = 8}
tessera.flash_attn @fa_bf16_d128_none_lse_gqa4 {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, return_lse, pack_gqa = 4}
tessera.flash_attn @fa_bf16_d128_none_lse_gqa8 {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, return_lse, pack_gqa = 8}
tessera.flash_attn @fa_bf16_d128_tl_lse_gqa4 {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, return_lse, pack_gqa = 4}
tessera.flash_attn @fa_bf16_d128_tl_lse_gqa8 {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, return_lse, pack_gqa = 8}
tessera.flash_attn @fa_bf16_d128_br_lse_gqa4 {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse, pack_gqa = 4}
tessera.flash_attn @fa_bf16_d128_br_lse_gqa8 {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse, pack_gqa = 8}

// Backward kernel sets of every forward variant above (pre, main, then dq_convert or, deterministic,
// dq): the same dtypes, head dims, masks and features; each with a deterministic twin (no atomics).
tessera.flash_attn_bwd @fa_bwd_f16_d32_none {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d32_none_det {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d32_none_varlen {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d32_none_varlen_det {dtype = f16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d32_tl {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d32_tl_det {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d32_tl_varlen {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d32_tl_varlen_det {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d32_br {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d32_br_det {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d32_br_varlen {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d32_br_varlen_det {dtype = f16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d64_none {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d64_none_det {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d64_none_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d64_none_varlen_det {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d64_tl {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d64_tl_det {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d64_tl_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d64_tl_varlen_det {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d64_br {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d64_br_det {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d64_br_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d64_br_varlen_det {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d96_none {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d96_none_det {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d96_none_varlen {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d96_none_varlen_det {dtype = f16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d96_tl {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d96_tl_det {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d96_tl_varlen {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d96_tl_varlen_det {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d96_br {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d96_br_det {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d96_br_varlen {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d96_br_varlen_det {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d128_none {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d128_none_det {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d128_none_varlen {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d128_none_varlen_det {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d128_tl {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d128_tl_det {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d128_tl_varlen {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d128_tl_varlen_det {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d128_br {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d128_br_det {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d128_br_varlen {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d128_br_varlen_det {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d256_none {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d256_none_det {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d256_none_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d256_none_varlen_det {dtype = f16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d256_tl {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d256_tl_det {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d256_tl_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d256_tl_varlen_det {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d256_br {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d256_br_det {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_f16_d256_br_varlen {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_f16_d256_br_varlen_det {dtype = f16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_none {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_none_det {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_none_varlen {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_none_varlen_det {dtype = bf16, head_dim = 32, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_tl {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_tl_det {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_tl_varlen {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_tl_varlen_det {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_br {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_br_det {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_br_varlen {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d32_br_varlen_det {dtype = bf16, head_dim = 32, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_none {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_none_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_none_varlen {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_none_varlen_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_tl {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_tl_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_tl_varlen {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_tl_varlen_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_varlen {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_varlen_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_none {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_none_det {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_none_varlen {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_none_varlen_det {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_tl {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_tl_det {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_tl_varlen {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_tl_varlen_det {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_br {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_br_det {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_br_varlen {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d96_br_varlen_det {dtype = bf16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_none {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_none_det {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_none_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_none_varlen_det {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_tl {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_tl_det {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_tl_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_tl_varlen_det {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_br {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_br_det {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_br_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_br_varlen_det {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_none {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_none_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_none_varlen {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_none_varlen_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<none>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl_varlen {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl_varlen_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_br {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_br_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_br_varlen {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen}
tessera.flash_attn_bwd @fa_bwd_bf16_d256_br_varlen_det {dtype = bf16, head_dim = 256, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, deterministic}

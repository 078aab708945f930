// Kernels the GPU tests use beyond the default bundles (examples/*.mlir): the options compiled on demand
// elsewhere (sinks, ALiBi, chunks, paged K/V, seqused, dropout, head dims 24, 40, 72, 80 and 192; paged_decode
// with sinks, ALiBi and cache_leftpad: the Transformers integration's left-padded decode at head_dim 64), and those
// bench_attn --dropout and --features and bench_decode's leftpad row time. scripts/make_dist.sh compiles them into
// dist/test-bundles/attention/<target>; scripts/gpu_check.sh puts that folder on the bundle search path for the
// tests, where a variant the default bundle lacks is found (python/tessera/_ondemand.py).
tessera.flash_attn @fa_bf16_d128_br_alibi {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, alibi}
tessera.flash_attn @fa_bf16_d128_br_chunk {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, attention_chunk}
tessera.flash_attn @fa_bf16_d128_br_sinks {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, sinks}
tessera.flash_attn @fa_bf16_d128_br_varlen_paged {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen, paged_kv}
tessera.flash_attn @fa_bf16_d128_tl_sinks_chunk {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_top_left>, sliding_window, softcap, return_lse, sinks, attention_chunk}
tessera.flash_attn @fa_bf16_d192_br {dtype = bf16, head_dim = 192, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d64_br_alibi_chunk {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, alibi, attention_chunk}
tessera.flash_attn @fa_bf16_d64_br_sinks {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, sinks}
tessera.flash_attn @fa_bf16_d64_br_varlen_alibi_chunk {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen, alibi, attention_chunk}
tessera.flash_attn @fa_bf16_d64_br_varlen_sinks {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen, sinks}
tessera.flash_attn @fa_bf16_d40_br {dtype = bf16, head_dim = 40, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d24_none {dtype = f16, head_dim = 24, mask = #tessera.mask<none>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d72_br {dtype = bf16, head_dim = 72, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_bf16_d80_br {dtype = bf16, head_dim = 80, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}
tessera.flash_attn @fa_f16_d64_none_sinks_alibi_chunk {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, sinks, alibi, attention_chunk}
tessera.flash_attn @fa_f16_d64_none_varlen_paged {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen, paged_kv}
tessera.flash_attn @fa_f16_d96_br_sinks_alibi {dtype = f16, head_dim = 96, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, sinks, alibi}
tessera.flash_attn_bwd @fa_bwd_bf16_d192_br {dtype = bf16, head_dim = 192, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d192_br_det {dtype = bf16, head_dim = 192, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_alibi_chunk {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, alibi, attention_chunk}
tessera.flash_attn_bwd @fa_bwd_bf16_d40_br_det {dtype = bf16, head_dim = 40, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d40_br {dtype = bf16, head_dim = 40, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_f16_d24_none {dtype = f16, head_dim = 24, mask = #tessera.mask<none>, sliding_window, softcap}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_varlen_alibi_chunk {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, alibi, attention_chunk}
tessera.flash_attn @fa_bf16_d64_br_drop {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, dropout}
tessera.flash_attn @fa_bf16_d64_br_varlen_drop {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen, dropout}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_drop {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, dropout}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_varlen_drop_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, dropout, deterministic}
tessera.flash_attn @fa_bf16_d128_br_drop {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, dropout}
tessera.flash_attn @fa_bf16_d128_none_drop {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, return_lse, dropout}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_br_drop {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, dropout}
tessera.flash_attn_bwd @fa_bwd_bf16_d128_none_drop {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, sliding_window, softcap, dropout}
// torch.compile of the optional features (test_torch_ops.py): deterministic backwards, bitwise against eager;
// attention dropout through the Transformers integration (test_transformers.py).
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_alibi_chunk_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, alibi, attention_chunk, deterministic}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_varlen_drop {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, dropout}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_drop_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, dropout, deterministic}
tessera.flash_attn @fa_bf16_d64_br_varlen_seqused_sinks {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen, seqused, sinks}
tessera.flash_attn_bwd @fa_bwd_bf16_d64_br_varlen_seqused_det {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, varlen, seqused, deterministic}
// paged_decode's options.
tessera.paged_decode @pd_bf16_d128_b16_sinks_alibi {dtype = bf16, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, sinks, alibi}
tessera.paged_decode @pd_bf16_d64_b16_leftpad {dtype = bf16, head_dim = 64, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, cache_leftpad}
tessera.paged_decode @pd_bf16_d128_b16_leftpad {dtype = bf16, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, cache_leftpad}
tessera.paged_decode @pd_bf16_d128_b64_leftpad {dtype = bf16, head_dim = 128, block_size = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, cache_leftpad}

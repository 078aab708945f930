// The generator's choice between the sm_90a wgmma/TMA kernel, its portable twin and the portable
// fallback is a remark on the directive (the manifest records it too).
// RUN: tessera-opt %s --split-input-file --verify-diagnostics --tessera-generate-kernels=target=sm_90a

// expected-remark @+1 {{wgmma/TMA kernel on sm_90a, with the portable twin 'fa_portable' for strides TMA cannot copy}}
tessera.flash_attn @fa {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>}

// -----

// expected-remark @+1 {{portable kernel on sm_90a: head_dim 96 does not fit the wgmma kernel's registers (64 and 128 do)}}
tessera.flash_attn @fa96 {dtype = f16, head_dim = 96}

// -----

// expected-remark @+1 {{portable kernel on sm_90a: an explicit tile selects the portable kernel}}
tessera.flash_attn @tiled {dtype = f16, head_dim = 64, tile = #tessera.tile<m = 64, n = 64, k = 64, waves = 4, stages = 1>}

// -----

// expected-remark @+1 {{wgmma/TMA kernel on sm_90a, with the portable twin 'alibi_portable' for strides TMA cannot copy}}
tessera.flash_attn @alibi {dtype = bf16, head_dim = 128, alibi}

// -----

// Chunked local attention keeps the wgmma kernel (its mask reads each row's key interval).
// expected-remark @+1 {{wgmma/TMA kernel on sm_90a, with the portable twin 'chunked_portable' for strides TMA cannot copy}}
tessera.flash_attn @chunked {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, attention_chunk}

// -----

// expected-remark @+1 {{portable kernel on sm_90a: paged K/V rows come through the block table, which the wgmma kernel's TMA copies do not read}}
tessera.flash_attn @paged {dtype = bf16, head_dim = 128, varlen, paged_kv}

// -----

// expected-remark @+1 {{portable kernel on sm_90a: dropout draws its mask per score element, which the wgmma kernel does not yet}}
tessera.flash_attn @dropout {dtype = bf16, head_dim = 128, dropout}

// -----

// expected-remark @+1 {{portable kernel on sm_90a: seqused leaves rows inside a sequence's range that the wgmma kernel's TMA tiles would read}}
tessera.flash_attn @seqused {dtype = bf16, head_dim = 128, varlen, seqused}

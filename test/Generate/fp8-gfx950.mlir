// gfx950 has OCP e4m3 (f8E4M3FN); the FNUZ flavour of gfx942 is rejected.
// RUN: tessera-opt %s --verify-diagnostics --tessera-generate-kernels=target=gfx950

// expected-error @+1 {{'tessera.paged_decode' op 'kv_dtype' 'f8E4M3FNUZ' is not supported on gfx950 (its fp8 KV format is f8E4M3FN)}}
tessera.paged_decode @d {dtype = bf16, kv_dtype = f8E4M3FNUZ, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>}

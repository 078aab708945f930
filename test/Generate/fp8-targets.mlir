// fp8 KV formats are checked against the target's: OCP e4m3 where the matrix cores read no fp8.
// RUN: tessera-opt %s --verify-diagnostics --tessera-generate-kernels=target=gfx1100 --split-input-file

// expected-error @+1 {{'tessera.paged_decode' op 'kv_dtype' 'f8E4M3FNUZ' is not supported on gfx1100 (its fp8 KV format is f8E4M3FN)}}
tessera.paged_decode @d {dtype = f16, kv_dtype = f8E4M3FNUZ, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>}

// -----

// A second target in the same file would need another RUN line; gfx950 is in fp8-gfx950.mlir.
tessera.wmma_gemm @fine {dtype = f16, out_type = f32}

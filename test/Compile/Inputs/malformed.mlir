// Not valid MLIR: an unterminated attribute dictionary.
tessera.wmma_gemm @g {dtype = f16, out_type = f32}
tessera.wmma_gemm @h {dtype = f16,

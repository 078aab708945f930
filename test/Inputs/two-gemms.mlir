// Two GEMM directives: one f16 -> f32, one bf16 -> bf16 with B transposed.
tessera.wmma_gemm @gemm_f16 {dtype = f16, out_type = f32}
tessera.wmma_gemm @gemm_bf16_tb {dtype = bf16, out_type = bf16, transpose_b}

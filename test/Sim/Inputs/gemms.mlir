// The wmma_gemm variants the simulator checks on every target: f32/bf16/f16 outputs and both transposes.
tessera.wmma_gemm @gemm_f16 {dtype = f16, out_type = f32}
tessera.wmma_gemm @gemm_bf16_tt {dtype = bf16, out_type = bf16, transpose_a, transpose_b}
tessera.wmma_gemm @gemm_f16_out_tb {dtype = f16, out_type = f16, transpose_b}
tessera.wmma_gemm @gemm_bf16_ta {dtype = bf16, out_type = f32, transpose_a}

// Default GEMM kernels of dist/: f16 and bf16 inputs; output in the input dtype or f32; B as is (nn) or transposed (nt).
tessera.wmma_gemm @gemm_f16_f16_nn {dtype = f16, out_type = f16}
tessera.wmma_gemm @gemm_f16_f16_nt {dtype = f16, out_type = f16, transpose_b}
tessera.wmma_gemm @gemm_f16_f32_nn {dtype = f16, out_type = f32}
tessera.wmma_gemm @gemm_f16_f32_nt {dtype = f16, out_type = f32, transpose_b}
tessera.wmma_gemm @gemm_bf16_bf16_nn {dtype = bf16, out_type = bf16}
tessera.wmma_gemm @gemm_bf16_bf16_nt {dtype = bf16, out_type = bf16, transpose_b}
tessera.wmma_gemm @gemm_bf16_f32_nn {dtype = bf16, out_type = f32}
tessera.wmma_gemm @gemm_bf16_f32_nt {dtype = bf16, out_type = f32, transpose_b}

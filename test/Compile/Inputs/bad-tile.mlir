// A tile the MFMA atoms cannot cover.

tessera.wmma_gemm @g {dtype = f16, out_type = f32, tile = #tessera.tile<m = 48, n = 128, k = 32, waves = 4, stages = 1>}

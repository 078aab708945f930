// fp8_products on a target whose matrix instructions Tessera emits read no fp8: a diagnostic on the directive.
// RUN: not tessera-opt %s --tessera-generate-kernels=target=gfx1100 2>&1 | FileCheck %s --check-prefix=GFX11

// GFX11: error: 'tessera.paged_decode' op 'fp8_products' needs matrix instructions that read the fp8 cache (gfx1100 has no matrix instruction for f8E4M3FN inputs: RDNA3 has no fp8 matrix instructions); without it
tessera.paged_decode @d {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128, block_size = 16, kv_scale = #tessera.kv_scale<per_tensor>, fp8_products}

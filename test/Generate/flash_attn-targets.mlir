// flash_attn on the other targets: gfx950 (double-K MFMA for both products; the row max
// across the half-waves and P^T's way to the PV operand by half-wave swaps, one for each two
// elements, no shuffle), gfx1100 (WMMA; P^T with one lane-16 exchange, no LDS tile)
// and sm_90 (mma.sync, S = Q K^T, P straight from the accumulators).
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx950 | FileCheck %s --check-prefix=GFX950
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx1100 | FileCheck %s --check-prefix=GFX1100
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=SM90

// GFX950: workgroup(%{{.+}}, %{{.+}}, %{{.+}}) kernel
// GFX950: amdgpu.mfma 32x32x16 {{.+}} : vector<8xf16>, vector<8xf16>, vector<16xf32>
// GFX950-NOT: gpu.shuffle
// GFX950: tessera.swap_wave_halves [[MAX:%.+]], [[MAX]] : f32
// GFX950-COUNT-4: tessera.swap_wave_halves %{{.+}}, %{{.+}} : f32
// GFX950-NEXT: arith.truncf
// GFX950-NOT: gpu.shuffle
// GFX950: amdgpu.mfma 32x32x16 {{.+}} : vector<8xf16>, vector<8xf16>, vector<16xf32>
// GFX950-NOT: gpu.shuffle
// GFX950-NOT: amdgpu.mfma 32x32x8

// Three LDS tiles (Q, K, V^T) and 128 threads (4 waves of 32).
// GFX1100: workgroup(%{{.+}} : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>
// GFX1100: amdgpu.wmma 16x16x16
// GFX1100: gpu.shuffle  xor %{{.+}}, %c16_i32, %c32_i32 : f32
// GFX1100: amdgpu.wmma 16x16x16

// SM90: known_block_size = array<i32: 128, 1, 1>
// SM90: nvvm.mma.sync
// SM90: gpu.shuffle  xor %{{.+}}, %c1_i32, %c32_i32 : f32
// SM90: gpu.shuffle  xor %{{.+}}, %c2_i32, %c32_i32 : f32
// SM90: nvgpu.ldmatrix {{.+}} {numTiles = 4 : i32, transpose = true}
// SM90: nvvm.mma.sync
tessera.flash_attn @fa {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, return_lse}

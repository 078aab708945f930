// flash_attn on gfx942: S^T = K Q^T on MFMA 32x32x8 so P^T feeds the PV MFMA from registers;
// one cross-lane step (lane bit 5) per row statistic; masks only inside a uniform scf.if.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s --implicit-check-not=tessera.flash_attn

// CHECK-LABEL: gpu.module @fa_br
// CHECK: gpu.func @fa_br(%{{.+}}: memref<?xf16>, %{{.+}}: memref<?xf16>, %{{.+}}: memref<?xf16>, %{{.+}}: memref<?xf16>, %{{.+}}: memref<?xf32>,
// CHECK-SAME: workgroup(%[[Q:.+]] : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>>, %[[K:.+]] : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>>, %[[V:.+]] : memref<{{[0-9]+}}xf16, #gpu.address_space<workgroup>>)
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "lse", "B", "Sq", "Sk", "Hq", "Hkv", "q_stride_b", "q_stride_s", "q_stride_h", "k_stride_b", "k_stride_s", "k_stride_h", "v_stride_b", "v_stride_s", "v_stride_h", "o_stride_b", "o_stride_s", "o_stride_h", "lse_stride_b", "lse_stride_h", "scale", "window_left", "window_right", "softcap"]
// CHECK-SAME: tessera.grid = "{{\[\[}}\22ceil_div\22, \22Sq\22, 128], \22Hq\22, \22B\22]"
// CHECK: scf.for
// CHECK: amdgpu.mfma 32x32x8
// The edge-tile mask is a uniform branch around the select of -inf.
// CHECK: scf.if %{{.+}} -> (vector<16xf32>)
// CHECK: arith.select %{{.+}}, %{{.+}}, %cst{{.*}} : f32
// CHECK: gpu.shuffle  xor %{{.+}}, %c32_i32, %c64_i32 : f32
// CHECK: math.exp2 %{{.+}} : vector<16xf32>
// CHECK: amdgpu.mfma 32x32x8
// CHECK: scf.yield
// CHECK: gpu.shuffle  xor
// CHECK: math.log2
tessera.flash_attn @fa_br {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse}

// No LDS tile for P: it never leaves registers on MFMA.
// CHECK-LABEL: gpu.module @fa_none
// CHECK: workgroup(%{{.+}} : memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>>, %{{.+}} : memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>>) kernel
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "B", "Sq", "Sk", "Hq", "Hkv", "q_stride_b", "q_stride_s", "q_stride_h", "k_stride_b", "k_stride_s", "k_stride_h", "v_stride_b", "v_stride_s", "v_stride_h", "o_stride_b", "o_stride_s", "o_stride_h", "scale"]
// CHECK-NOT: math.log2
// CHECK: gpu.return
tessera.flash_attn @fa_none {dtype = bf16, head_dim = 128}

// CHECK-LABEL: gpu.module @fa_varlen
// CHECK: tessera.arg_names = ["q", "k", "v", "o", "cu_seqlens_q", "cu_seqlens_k", "B"
// CHECK: memref.load %{{.+}} : memref<?xi32>
tessera.flash_attn @fa_varlen {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_top_left>, varlen}

// pack_gqa is packed on the sm_90a wgmma path only: here one query head per tile, and the
// manifest's fallback says so.
// CHECK-LABEL: gpu.func @fa_gqa8(
// CHECK-SAME: tessera.fallback = "portable kernel: pack_gqa is generated on the sm_90a wgmma path only; one query head per tile"
tessera.flash_attn @fa_gqa8 {dtype = f16, head_dim = 128, mask = #tessera.mask<none>, return_lse, pack_gqa = 8}

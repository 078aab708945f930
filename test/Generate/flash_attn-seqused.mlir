// seqused on varlen flash_attn and flash_attn_bwd: the two length arrays after cu_seqlens, and a
// sequence's lengths read from them (its first rows still from cu_seqlens).
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @fa_used
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "B",
// CHECK: %[[Q0:.+]] = memref.load %arg4[%{{.+}}] : memref<?xi32>
// CHECK: %[[K0:.+]] = memref.load %arg5[%{{.+}}] : memref<?xi32>
// CHECK: memref.load %arg6[%{{.+}}] : memref<?xi32>
// CHECK: memref.load %arg7[%{{.+}}] : memref<?xi32>
tessera.flash_attn @fa_used {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, varlen, seqused}

// CHECK-LABEL: gpu.func @bwd_used_pre
// CHECK-SAME: "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "B",
// CHECK-LABEL: gpu.func @bwd_used_main
// CHECK-SAME: "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "B",
tessera.flash_attn_bwd @bwd_used {dtype = bf16, head_dim = 64, varlen, seqused}

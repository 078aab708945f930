// Dropout on flash_attn and flash_attn_bwd: the arguments it adds (the seed and offset as four i32
// words in memory, the rate), the threshold floor(p * 65536) and the kept values' factor
// 65536 / (65536 - threshold) made once per block, and Philox4x32-10 (its multipliers) with the
// 16-bit draws compared against the threshold in the key loop, in the forward and in the
// backward's main and deterministic dq kernels.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @fa_drop
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "rng_state", "B",
// CHECK-SAME: "scale", "dropout_p"]
// CHECK: %[[THRESHOLD:.+]] = arith.fptoui %{{.+}} : f32 to i32
// CHECK: arith.uitofp %[[THRESHOLD]] : i32 to f32
// CHECK: arith.divf
// CHECK: scf.for
// CHECK: amdgpu.mfma
// CHECK: arith.muli %{{.+}}, %c3528531795_i64 : i64
// CHECK: arith.muli %{{.+}}, %c3449720151_i64 : i64
// CHECK: arith.cmpi uge, %{{.+}}, %[[THRESHOLD]] : i32
tessera.flash_attn @fa_drop {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, dropout}

// CHECK-LABEL: gpu.func @bwd_drop_main
// CHECK-SAME: "rng_state"
// CHECK-SAME: "dropout_p", "bwd_stats"]
// CHECK: arith.fptoui
// CHECK: scf.for
// CHECK: arith.muli %{{.+}}, %c3528531795_i64 : i64
// CHECK: arith.cmpi uge
// CHECK-LABEL: gpu.func @bwd_drop_dq
// CHECK: scf.for
// CHECK: arith.muli %{{.+}}, %c3528531795_i64 : i64
// CHECK: arith.cmpi uge
tessera.flash_attn_bwd @bwd_drop {dtype = bf16, head_dim = 64, dropout, deterministic}

// A forward head_dim of 8 mod 16 runs on tiles of the next multiple of 16: on gfx942's loop of
// interior key tiles, a K/V row vector past the head_dim is loaded from inside the row and
// replaced by zeros (a select against a zero vector that head dims of whole tiles never need).
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @fa_d40
// CHECK: %[[ZERO:.+]] = arith.constant dense<0.000000e+00> : vector<8xf16>
// CHECK: arith.select %{{.+}}, %{{.+}}, %[[ZERO]] : vector<8xf16>
// CHECK: gpu.return
tessera.flash_attn @fa_d40 {dtype = f16, head_dim = 40, mask = #tessera.mask<causal_bottom_right>}

// CHECK-LABEL: gpu.func @fa_d48
// CHECK-NOT: dense<0.000000e+00> : vector<8xf16>
// CHECK: gpu.return
tessera.flash_attn @fa_d48 {dtype = f16, head_dim = 48, mask = #tessera.mask<causal_bottom_right>}

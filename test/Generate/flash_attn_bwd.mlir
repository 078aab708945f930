// flash_attn_bwd becomes a kernel set: pre, main, then dq_convert (atomic dQ partials into the
// zeroed f32 workspace) or, deterministic, dq (no atomics anywhere in the set).
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=SM90
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx1100 | FileCheck %s --check-prefix=GFX1100

// CHECK-LABEL: gpu.func @bwd_pre(
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "do", "dq", "dk", "dv", "lse", "B", "Sq", "Sk", "Hq", "Hkv",
// CHECK-SAME: "bwd_stats", "dq_accum"]
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"bwd", 0>
// CHECK-SAME: tessera.workspaces = "[{\22arg\22: \22bwd_stats\22, \22bytes\22: {{.+}}, \22zero\22: false}, {\22arg\22: \22dq_accum\22, {{.+}}, \22zero\22: true}]"
// CHECK: gpu.shuffle  xor
// CHECK-LABEL: gpu.func @bwd_main(
// CHECK-SAME: tessera.grid = "{{.}}{{.}}\22ceil_div\22, \22Sk\22, 64], \22Hkv\22, \22B\22]"
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"bwd", 1>
// CHECK: scf.for
// CHECK: amdgpu.mfma 16x16x16
// CHECK: memref.atomic_rmw addf
// CHECK-LABEL: gpu.func @bwd_dq_convert(
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"bwd", 2>
// CHECK-NOT: memref.atomic_rmw
// CHECK-LABEL: gpu.func @bwd_det_pre(
// CHECK-NOT: dq_accum
// CHECK-SAME: kernel attributes
// CHECK-NOT: memref.atomic_rmw
// CHECK-LABEL: gpu.func @bwd_det_dq(
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"bwd_det", 2>
// CHECK-NOT: memref.atomic_rmw

// mma.sync: 8 warps, transposed operands through ldmatrix .trans (B fragments in pairs, x4); on
// Hopper dQ's adds are 16-byte vector reductions into dq_accum's paired columns.
// SM90-LABEL: gpu.func @bwd_main(
// SM90: known_block_size = array<i32: 256, 1, 1>
// SM90: nvgpu.ldmatrix {{.+}} {numTiles = 4 : i32, transpose = true}
// SM90: nvvm.mma.sync
// SM90: tessera.atomic_addf {{.+}} : vector<4xf32>, memref<?xf32>
// SM90-NOT: memref.atomic_rmw
// SM90-LABEL: gpu.func @bwd_dq_convert(

// GFX1100-LABEL: gpu.func @bwd_main(
// GFX1100: known_block_size = array<i32: 256, 1, 1>
// GFX1100: amdgpu.wmma 16x16x16
tessera.flash_attn_bwd @bwd {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap}
tessera.flash_attn_bwd @bwd_det {dtype = bf16, head_dim = 64, deterministic}

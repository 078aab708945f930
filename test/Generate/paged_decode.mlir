// paged_decode becomes a kernel set: decode (the forward's mainloop over one KV head's group of
// query rows and key rows gathered through the block table), then with split_kv combine.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s --implicit-check-not=tessera.paged_decode
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=SM90
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx1100 | FileCheck %s --check-prefix=GFX1100

// CHECK-LABEL: gpu.func @pd_decode(
// CHECK-SAME: tessera.arg_names = ["q", "k_cache", "v_cache", "block_table", "cache_seqlens", "o", "lse", "B", "Sq", "Hq",
// CHECK-SAME: "Hkv", "num_splits",
// CHECK-SAME: "k_stride_page", "k_stride_token", "k_stride_head"
// CHECK-SAME: "decode_partials"]
// CHECK-SAME: tessera.grid = "[\22num_splits\22, {{.}}\22mul\22, \22Hkv\22, {{.}}\22ceil_div\22, {{.}}\22mul\22, {{.}}\22div\22, \22Hq\22, \22Hkv\22], \22Sq\22], {{[0-9]+}}]], \22B\22]"
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"pd", 0>
// CHECK-SAME: tessera.workspaces = "[{\22arg\22: \22decode_partials\22, {{.+}}, \22zero\22: false}]"
// The page of each key row is read from the block table only for rows below the length.
// CHECK: memref.load %arg4
// CHECK: scf.for
// CHECK: scf.if
// CHECK: memref.load %arg3
// CHECK: amdgpu.mfma
// The combine: a workgroup of four waves per (head, token) row; they read four splits a turn
// (the loads ahead of their use), weights of 0 drop their terms by selects, the waves' sums meet
// in LDS.
// CHECK-LABEL: gpu.func @pd_combine(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: tessera.grid = "[{{.}}\22mul\22, \22Hq\22, \22Sq\22], \22B\22, {{.}}\22min\22, {{.}}\22div\22, \22num_splits\22, 2], 1]]"
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"pd", 1>
// CHECK: gpu.shuffle  xor
// CHECK: scf.for
// CHECK-COUNT-4: math.exp2
// CHECK: gpu.barrier
// The cache writer: a plain kernel (no kernel set), one workgroup per new token; a negative slot
// writes nothing; 16-byte vectors where the strides allow, else element by element.
// CHECK-LABEL: gpu.func @pd_cache_write(
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK-SAME: tessera.arg_names = ["key", "value", "k_cache", "v_cache", "slot_mapping", "num_tokens", "Hkv",
// CHECK-SAME: "key_stride_t", "key_stride_h", "value_stride_t", "value_stride_h", "k_stride_page",
// CHECK-SAME: "v_stride_head"]
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[input, input, inout, inout, input, size, size,
// CHECK-NOT: tessera.kernel_set
// CHECK-SAME: tessera.grid = "[\22num_tokens\22, 1, 1]"
// CHECK: %[[SLOT:.+]] = memref.load %arg4[%block_id_x] : memref<?xi64>
// CHECK: %[[S:.+]] = arith.index_cast %[[SLOT]]
// CHECK: arith.cmpi sge, %[[S]], %c0
// CHECK: scf.for
// CHECK: vector.load %arg0{{.+}} vector<8xbf16>
// CHECK: vector.store {{.+}} %arg2
// CHECK: } else {
// CHECK-COUNT-8: memref.store {{.+}} %arg2
// CHECK: vector.load %arg1
// CHECK: vector.store {{.+}} %arg3
// Without split_kv: one split, no workspace, no combine.
// CHECK-LABEL: gpu.func @pd_plain_decode(
// CHECK-SAME: "block_table_stride", "scale"]
// CHECK-SAME: tessera.grid = "[1,
// CHECK-NOT: gpu.func @pd_plain_combine
// CHECK-LABEL: gpu.func @pd_plain_cache_write(
// CHECK: vector.load %arg0{{.+}} vector<8xf16>

// SM90-LABEL: gpu.func @pd_decode(
// SM90: known_block_size = array<i32: 64, 1, 1>
// SM90: nvvm.mma.sync
// GFX1100-LABEL: gpu.func @pd_decode(
// GFX1100: amdgpu.wmma 16x16x16
tessera.paged_decode @pd {dtype = bf16, head_dim = 128, block_size = 16, mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}
tessera.paged_decode @pd_plain {dtype = f16, head_dim = 64, block_size = 64}

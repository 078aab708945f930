// flash_attn on sm_90a: the warp-specialised wgmma/TMA kernel (FlashAttn3-style) plus a portable
// twin for strides TMA cannot copy; directives it does not cover get the portable kernel and the
// reason. The producer warpgroup issues TMA into the mbarrier ring at 24 registers, the consumers
// run SS wgmma (S = Q K^T), RS wgmma (O += P V, P from registers) and the pingpong barriers.
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90a | FileCheck %s

// CHECK-LABEL: gpu.module @fa [#nvvm.target<{{.*}}chip = "sm_90a"
// CHECK: memref.global @tessera_dynamic_smem : memref<0xi8, #gpu.address_space<workgroup>> {alignment = 1024 : i64}
// CHECK: gpu.func @fa({{.*}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %[[COUNTER:.+]]: memref<?xi32>) kernel
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// CHECK-SAME: nvvm.minctasm = 1 : i32
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[{{.*}}tensor_map, tensor_map, tensor_map, tensor_map, tile_counter]>
// Q, K, V, O buffers and the tile index of each Q buffer.
// CHECK-SAME: tessera.dynamic_lds_bytes = 229392 : i64
// A causal mask gives tiles unequal work: persistent, each workgroup claiming its next tile
// (longest first) from the runtime's tile counter.
// CHECK-SAME: tessera.grid = "{{\[\[}}\22min\22, [\22mul\22, [\22ceil_div\22, \22Sq\22, 128], [\22mul\22, \22Hq\22, \22B\22]], \22$sm_count\22], 1, 1]"
// CHECK-SAME: tessera.portable_twin = "fa_portable"
// CHECK-SAME: tessera.tensor_maps = "[{\22arg\22: \22q_tma\22, \22tensor\22: \22q\22, \22dims\22: [128, \22Sq\22, \22Hq\22, \22B\22], \22strides\22: [\22q_stride_s\22, \22q_stride_h\22, \22q_stride_b\22], \22box\22: [64, 64, 1, 1], \22swizzle\22: \22128B\22}
// Two Q buffers and two-stage K and V rings, a full and an empty mbarrier each.
// CHECK-COUNT-12: nvgpu.mbarrier.init
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: nvvm.elect.sync
// The producer claims the tile after this one, then hands this one's index over beside its Q.
// CHECK: scf.while
// CHECK: memref.atomic_rmw addi %c1_i32, %[[COUNTER]][%c0]
// CHECK: memref.store %{{.+}} : memref<1xi32, #gpu.address_space<workgroup>>
// CHECK: nvgpu.mbarrier.arrive.expect_tx
// CHECK: nvgpu.tma.async.load {{.+}} to %{{.+}} : <tensor = memref<1x1x64x64xf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK: nvgpu.tma.async.load {{.+}} : <tensor = memref<1x1x128x64xf16
// Past the last tile: an index past the last, then the last workgroup done zeroes the counter.
// CHECK: memref.store %{{.+}} : memref<1xi32, #gpu.address_space<workgroup>>
// CHECK: nvvm.memory.barrier <gpu>
// CHECK: memref.atomic_rmw addi %c1_i32, %[[COUNTER]][%c1]
// CHECK: memref.atomic_rmw assign %c0_i32, %[[COUNTER]][%c0]
// CHECK: memref.atomic_rmw assign %c0_i32, %[[COUNTER]][%c1]
// CHECK: nvvm.setmaxregister  increase 240
// CHECK: nvvm.barrier.arrive id = %c1_i32 number_of_threads = %c256_i32
// The consumers take tiles until the index read with Q is past the last.
// CHECK: scf.while
// CHECK: memref.load %{{.+}} : memref<1xi32, #gpu.address_space<workgroup>>
// CHECK: scf.condition
// CHECK: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 16>, D[<f32>, <zero>], A[<f16>, <one>, <row>], B[<f16>, <one>, <col>]
// Steady state: QK^T of tile i and PV of tile i - 1 in flight, pingpong around the issue.
// CHECK: scf.for
// CHECK: nvvm.barrier id = %{{.+}} number_of_threads = %c256_i32
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
// CHECK: nvvm.barrier.arrive id = %{{.+}} number_of_threads = %c256_i32
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// Epilogue: swizzled O tile, proxy fence, TMA store.
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: nvgpu.tma.async.store
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: gpu.module @fa_portable
// CHECK: gpu.func @fa_portable(
// CHECK-SAME: tessera.twin_of = "fa"
// CHECK: nvvm.mma.sync
tessera.flash_attn @fa {dtype = f16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse}

// Without a mask: persistent too, at most one workgroup per SM, claiming tiles from the tile
// counter like the causal kernels; the producer carries Q phases and ring iterations, and the
// consumers take tiles as it hands them over.
// CHECK-LABEL: gpu.func @fa_persistent(
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[{{.*}}tensor_map, tensor_map, tensor_map, tensor_map, tile_counter]>
// CHECK-SAME: tessera.grid = "{{\[\[}}\22min\22, [\22mul\22, [\22ceil_div\22, \22Sq\22, 128], [\22mul\22, \22Hq\22, \22B\22]], \22$sm_count\22], 1, 1]"
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: scf.while (%{{.+}} = %{{.+}}, %{{.+}} = %c0_i32, %{{.+}} = %c0_i32) : (i32, i32, i32) -> (i32, i32, i32)
// CHECK: memref.atomic_rmw addi
// CHECK: nvvm.setmaxregister  increase 240
// CHECK: scf.while (%{{.+}} = %c0_i32, %{{.+}} = %c0_i32) : (i32, i32) -> (i32, i32, i32)
tessera.flash_attn @fa_persistent {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>}

// Varlen batches: tensor maps over the packed rows (total_q, total_k), each tile's sequence from
// cu_seqlens (rows offset by its first), a query block past its sequence's end visits no key
// tile, and O is stored by the threads, 16 bytes each, inside the sequence only (a TMA box
// would overwrite the next one): no O map, no TMA store. One workgroup per tile (no tile counter):
// a tile loop spills the sequence bounds (ptxas gate).
// CHECK-LABEL: gpu.func @fa_varlen(
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[{{.*}}size, size, size, size, size, size, size, {{.*}}tensor_map, tensor_map, tensor_map]>
// CHECK-SAME: tessera.grid = "{{\[\[}}\22mul\22, [\22ceil_div\22, \22Sq\22, 128], [\22mul\22, \22Hq\22, \22B\22]], 1, 1]"
// CHECK-SAME: tessera.portable_twin = "fa_varlen_portable"
// CHECK-SAME: tessera.tensor_maps = "[{\22arg\22: \22q_tma\22, \22tensor\22: \22q\22, \22dims\22: [128, \22total_q\22, \22Hq\22], \22strides\22: [\22q_stride_s\22, \22q_stride_h\22], \22box\22: [64, 64, 1]
// CHECK-SAME: \22dims\22: [128, \22total_k\22, \22Hkv\22]
// CHECK-NOT: o_tma
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: memref.load %arg{{[0-9]+}}[%{{.+}}] : memref<?xi32>
// CHECK: nvgpu.tma.async.load {{.+}} : <tensor = memref<1x64x64xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b
// CHECK: nvgpu.tma.async.load {{.+}} : <tensor = memref<1x128x64xbf16
// CHECK: nvvm.setmaxregister  increase 240
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: vector.load {{.+}} : memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: vector.store {{.+}} : memref<?xbf16>, vector<8xbf16>
// CHECK-NOT: nvgpu.tma.async.store
// CHECK: gpu.module @fa_varlen_portable
tessera.flash_attn @fa_varlen {dtype = bf16, head_dim = 128, mask = #tessera.mask<none>, varlen}

// CHECK: gpu.func @fa_d96(
// CHECK-SAME: tessera.fallback = "portable kernel: head_dim 96 does not fit the wgmma kernel's registers (64 and 128 do)"
tessera.flash_attn @fa_d96 {dtype = bf16, head_dim = 96, mask = #tessera.mask<none>}

// Packed GQA (pack_gqa = 8): a consumer's 64 rows are 8 query heads x 8 queries of one KV head,
// Q and O boxes [64, 8 queries, 8 heads, 1], tiles over ceil(Sq / 16) x Hq / 8 x B.
// The runtime refuses Hq that is not a multiple of Hkv x 8 (a tile's heads share a KV head).
// CHECK-LABEL: gpu.func @fa_gqa8(
// CHECK-SAME: tessera.divisible = "[{\22arg\22: \22Hq\22, \22by\22: \22Hkv\22}, {\22arg\22: \22Hq\22, \22by\22: [\22mul\22, \22Hkv\22, 8]}]"
// CHECK-SAME: tessera.grid = "{{\[\[}}\22min\22, [\22mul\22, [\22ceil_div\22, \22Sq\22, 16], [\22mul\22, [\22div\22, \22Hq\22, 8], \22B\22]]
// CHECK-SAME: \22box\22: [64, 8, 8, 1]
// CHECK: nvgpu.tma.async.load {{.+}} : <tensor = memref<1x8x8x64xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.tma.async.store {{.+}} : memref<1x8x8x64xbf16
tessera.flash_attn @fa_gqa8 {dtype = bf16, head_dim = 128, mask = #tessera.mask<causal_bottom_right>, return_lse, pack_gqa = 8}

// Head_dim 64 without a mask: three consumers (192 query rows, 512 threads, 160 registers each
// from the producer's 104 freed), no pingpong barriers.
// CHECK-LABEL: gpu.func @fa_d64_three(
// CHECK-SAME: known_block_size = array<i32: 512, 1, 1>
// CHECK-SAME: tessera.grid = "{{\[\[}}\22min\22, [\22mul\22, [\22ceil_div\22, \22Sq\22, 192]
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: nvvm.setmaxregister  increase 160
// CHECK-NOT: nvvm.barrier.arrive
// CHECK: gpu.module @fa_d64_three_portable
tessera.flash_attn @fa_d64_three {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, return_lse}

// Causal at head_dim 64 (no window, no softcap): three consumers too, claiming tiles from the
// tile counter; each consumer walks only the key tiles its own 64 rows see and steps over the
// rest of the tile's (waits for each K/V stage and frees it).
// CHECK-LABEL: gpu.func @fa_d64_three_causal(
// CHECK-SAME: known_block_size = array<i32: 512, 1, 1>
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[{{.*}}tensor_map, tile_counter]>
// CHECK-SAME: tessera.grid = "{{\[\[}}\22min\22, [\22mul\22, [\22ceil_div\22, \22Sq\22, 192], [\22mul\22, \22Hq\22, \22B\22]], \22$sm_count\22], 1, 1]"
// CHECK: nvvm.setmaxregister  increase 160
// CHECK-NOT: nvvm.barrier.arrive
// CHECK: gpu.module @fa_d64_three_causal_portable
tessera.flash_attn @fa_d64_three_causal {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_top_left>, return_lse}

// cache_leftpad in paged_decode: the argument it adds; the sequence's first key (clamped to its
// length) loaded once, the key count it leaves; with pages of at least a key tile, each tile's
// first key offset by it and two block-table entries read (the first and the last used key's
// page), each row choosing between them; with smaller pages, each row's own entry.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @pd_pages64_decode
// CHECK-SAME: %[[TABLE:arg3]]: memref<?xi32>, %[[LENS:arg4]]: memref<?xi32>, %[[PADS:arg5]]: memref<?xi32>
// CHECK-SAME: tessera.arg_names = ["q", "k_cache", "v_cache", "block_table", "cache_seqlens", "cache_leftpad", "o", "B"
// CHECK: %[[LEN:.+]] = memref.load %[[LENS]][%[[BATCH:.+]]] : memref<?xi32>
// CHECK: %[[PAD:.+]] = memref.load %[[PADS]][%[[BATCH]]] : memref<?xi32>
// CHECK: %[[PADI:.+]] = arith.index_cast %[[PAD]]
// CHECK: %[[FIRST:.+]] = arith.minui %[[PADI]], %[[LENI:.+]] : index
// CHECK: %[[KEYS:.+]] = arith.subi %[[LENI]], %[[FIRST]] : index
// CHECK: scf.for
// CHECK: %[[N0:.+]] = arith.muli %{{.+}}, %c64 : index
// CHECK: %[[LEFT:.+]] = arith.subi %[[KEYS]], %[[N0]] : index
// CHECK: %[[TILE0:.+]] = arith.addi %[[FIRST]], %[[N0]] : index
// CHECK: memref.load %[[TABLE]]
// CHECK: memref.load %[[TABLE]]
// CHECK-NOT: memref.load %[[TABLE]]
// CHECK: arith.select %{{.+}}, %{{.+}}, %{{.+}} : index
// CHECK-LABEL: gpu.func @pd_pages64_cache_write
tessera.paged_decode @pd_pages64 {dtype = f16, head_dim = 64, block_size = 64, mask = #tessera.mask<causal_bottom_right>, cache_leftpad}

// CHECK-LABEL: gpu.func @pd_pages16_decode
// CHECK: %[[FIRST16:.+]] = arith.minui
// CHECK: scf.for
// CHECK: %[[TILE016:.+]] = arith.addi %[[FIRST16]], %{{.+}} : index
// CHECK: %[[KEY:.+]] = arith.addi %[[TILE016]], %{{.+}} : index
// CHECK: %[[ENTRY:.+]] = arith.divui %[[KEY]], %c16 : index
// CHECK: memref.load %arg3[%{{.+}}] : memref<?xi32>
tessera.paged_decode @pd_pages16 {dtype = f16, head_dim = 64, block_size = 16, cache_leftpad}

// paged_kv on flash_attn: K and V rows come from a paged cache through the block table. The
// arguments it adds; a tile inside the keys whose pages hold whole tiles (page_size % blockN
// == 0) looks its page up once; any other tile looks up each row's page, only for rows below
// the sequence's length.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s

// CHECK-LABEL: gpu.func @fa_paged
// CHECK-SAME: %[[TABLE:arg6]]: memref<?xi32>
// CHECK-SAME: tessera.arg_names = ["q", "k", "v", "o", "cu_seqlens_q", "cu_seqlens_k", "block_table", "B", {{.*}} "block_table_stride", "page_size", "scale"]
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[input, input, input, output, input, input, input, size, {{.*}} stride, size, scale]>
// Whole tiles in one page: the interior loop's condition.
// CHECK: arith.remui %[[PAGE:arg27]], %c64 : index
// A row's page: block_table[batch * stride + key / page_size], then token key % page_size.
// CHECK: scf.if %{{.+}} -> (vector<8xbf16>) {
// CHECK: %[[KEY:.+]] = arith.addi
// CHECK: %[[ENTRY:.+]] = arith.divui %[[KEY]], %[[PAGE]] : index
// CHECK: %[[AT:.+]] = arith.addi %{{.+}}, %[[ENTRY]] : index
// CHECK: memref.load %[[TABLE]][%[[AT]]] : memref<?xi32>
// CHECK: arith.remui %[[KEY]], %[[PAGE]] : index
// CHECK: vector.load %arg1
tessera.flash_attn @fa_paged {dtype = bf16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, varlen, paged_kv}

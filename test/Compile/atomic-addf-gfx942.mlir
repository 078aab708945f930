// tessera.atomic_addf on gfx942: four relaxed element atomics (no cache write-back around them).
// RUN: rm -rf %t && %tessera_compile %s --target=gfx942 -o %t
// RUN: FileCheck %s < %t/add_gfx942.s
// CHECK-LABEL: add_gfx942:
// CHECK-NOT: buffer_wbl2
// CHECK-COUNT-4: global_atomic_add_f32
// CHECK-NOT: buffer_wbl2
// CHECK: s_endpgm
module attributes {gpu.container_module} {
  gpu.module @gfx942 [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @add_gfx942(%w: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %i = arith.muli %t, %c4 : index
      %one = arith.constant dense<1.0> : vector<4xf32>
      tessera.atomic_addf %one, %w[%i] : vector<4xf32>, memref<?xf32>
      gpu.return
    }
  }
}

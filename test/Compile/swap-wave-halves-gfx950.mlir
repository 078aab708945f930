// tessera.swap_wave_halves on gfx950: one v_permlane32_swap, no shuffle, no select.
// RUN: rm -rf %t && %tessera_compile %s --target=gfx950 -o %t
// RUN: FileCheck %s < %t/swap_gfx950.s
// CHECK-LABEL: swap_gfx950:
// CHECK-NOT: ds_bpermute
// CHECK-NOT: v_cndmask
// CHECK: v_permlane32_swap_b32
// CHECK-NOT: v_permlane32_swap_b32
// CHECK-NOT: v_cndmask
// CHECK: s_endpgm
module attributes {gpu.container_module} {
  gpu.module @gfx950 [#rocdl.target<chip = "gfx950", O = 3, abi = "500">] {
    gpu.func @swap_gfx950(%a: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %x = memref.load %a[%t] : memref<?xf32>
      %c64 = arith.constant 64 : index
      %t2 = arith.addi %t, %c64 : index
      %y = memref.load %a[%t2] : memref<?xf32>
      %lo, %hi = tessera.swap_wave_halves %x, %y : f32
      memref.store %lo, %a[%t] : memref<?xf32>
      memref.store %hi, %a[%t2] : memref<?xf32>
      gpu.return
    }
  }
}

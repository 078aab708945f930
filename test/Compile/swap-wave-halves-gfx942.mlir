// tessera.swap_wave_halves on gfx942 (no swap instruction): two cross-lane reads, two selects.
// RUN: rm -rf %t && %tessera_compile %s --target=gfx942 -o %t
// RUN: FileCheck %s < %t/swap_gfx942.s
// CHECK-LABEL: swap_gfx942:
// CHECK-NOT: v_permlane
// CHECK-COUNT-2: ds_bpermute_b32
// CHECK-COUNT-2: v_cndmask_b32
// CHECK: s_endpgm
module attributes {gpu.container_module} {
  gpu.module @gfx942 [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @swap_gfx942(%a: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
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

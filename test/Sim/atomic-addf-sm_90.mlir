// tessera.atomic_addf in the simulator: 8 threads add 1..8 to the same four floats (every add
// lands), and a vector add whose first element is not aligned to its 16 bytes is an error.
// RUN: tessera-sim %s --kernel add --buffer arg0=8:zero --grid 1,1,1 --print arg0 | FileCheck %s
// RUN: not tessera-sim %s --kernel misaligned --buffer arg0=8 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=ERR
// CHECK: arg0 = 36 36 72 72 0 0 0 0
// ERR: error: tessera.atomic_addf: a vector atomic add of 4 elements at a byte offset not a multiple of 16, in thread (0,0,0)
module attributes {gpu.container_module} {
  gpu.module @m [#nvvm.target<chip = "sm_90">] {
    gpu.func @add(%w: memref<?xf32>) kernel attributes {known_block_size = array<i32: 8, 1, 1>} {
      %t = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %n = arith.addi %t, %c1 : index
      %ni = arith.index_cast %n : index to i32
      %x = arith.sitofp %ni : i32 to f32
      %y = arith.addf %x, %x : f32
      %v = vector.from_elements %x, %x, %y, %y : vector<4xf32>
      %c0 = arith.constant 0 : index
      tessera.atomic_addf %v, %w[%c0] : vector<4xf32>, memref<?xf32>
      gpu.return
    }
    gpu.func @misaligned(%w: memref<?xf32>) kernel attributes {known_block_size = array<i32: 8, 1, 1>} {
      %c2 = arith.constant 2 : index
      %v = arith.constant dense<1.0> : vector<4xf32>
      tessera.atomic_addf %v, %w[%c2] : vector<4xf32>, memref<?xf32>
      gpu.return
    }
  }
}

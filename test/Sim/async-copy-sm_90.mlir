// cp.async on sm_90: each of 8 threads copies 4 floats of iota into LDS, thread t reading only t
// of them (the rest zero-filled), then commits, waits and (after a barrier) writes LDS back out.
// RUN: tessera-sim %s --buffer arg0=32:iota --buffer arg1=32 --grid 1,1,1 --print arg1 | FileCheck %s
// CHECK: arg1 = 0 0 0 0 4 0 0 0 8 9 0 0 12 13 14 0 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
module attributes {gpu.container_module} {
  gpu.module @m [#nvvm.target<chip = "sm_90">] {
    gpu.func @copy(%in: memref<?xf32>, %out: memref<?xf32>)
        workgroup(%lds : memref<32xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 8, 1, 1>} {
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %at = arith.muli %t, %c4 : index
      %n = arith.minui %t, %c4 : index
      %tok = nvgpu.device_async_copy %in[%at], %lds[%at], 4, %n : memref<?xf32> to memref<32xf32, #gpu.address_space<workgroup>>
      nvvm.cp.async.commit.group
      nvvm.cp.async.wait.group 0
      gpu.barrier
      %v = vector.load %lds[%at] : memref<32xf32, #gpu.address_space<workgroup>>, vector<4xf32>
      vector.store %v, %out[%at] : memref<?xf32>, vector<4xf32>
      gpu.return
    }
  }
}

// An LDS access outside its workgroup allocation is reported against the allocation's size.
// RUN: not tessera-sim %s --grid 1,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx942">] {
    gpu.func @lds() workgroup(%lds : memref<256xf16, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %i = arith.muli %t, %c4 : index
      %z = arith.constant dense<0.0> : vector<4xf16>
      vector.store %z, %lds[%i] : memref<256xf16, #gpu.address_space<workgroup>>, vector<4xf16>
      gpu.barrier
      // Eight elements from 4 * t: the last thread reads past the 256 elements.
      // CHECK: check-oob-lds.mlir:[[@LINE+1]]:12: error: vector.load: out-of-bounds load from workgroup buffer #0 (memref<256xf16, #gpu.address_space<workgroup>>) at index [252]: bytes [504, 520) of a workgroup buffer of 512 bytes, in thread (63,0,0) of block (0,0,0)
      %v = vector.load %lds[%i] : memref<256xf16, #gpu.address_space<workgroup>>, vector<8xf16>
      gpu.return
    }
  }
}

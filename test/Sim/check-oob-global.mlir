// A global store past the end of its buffer is reported with the op's location, the thread, the
// index and the buffer's size, and the run fails.
// RUN: not tessera-sim %s --buffer out=100 --grid 2,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx942">] {
    gpu.func @fill(%out: memref<?xf32>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>, tessera.arg_names = ["out"]} {
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %c64 = arith.constant 64 : index
      %base = arith.muli %b, %c64 : index
      %i = arith.addi %base, %t : index
      %v = arith.constant 1.0 : f32
      // No tail guard: the second workgroup runs past element 99.
      // CHECK: tessera-sim: error: {{.*}}check-oob-global.mlir:[[@LINE+1]]:7: error: memref.store: out-of-bounds store to out at index [100]: bytes [400, 404) of a global buffer of 400 bytes, in thread (36,0,0) of block (1,0,0)
      memref.store %v, %out[%i] : memref<?xf32>
      gpu.return
    }
  }
}

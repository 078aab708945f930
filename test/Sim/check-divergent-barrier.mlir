// A barrier inside a branch that only some threads take is reported (a hang or undefined
// behaviour on the GPU), naming a thread that does not reach it.
// RUN: not tessera-sim %s --grid 1,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx950">] {
    gpu.func @divergent() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
      %t = gpu.thread_id x
      %c200 = arith.constant 200 : index
      %low = arith.cmpi ult, %t, %c200 : index
      scf.if %low {
        // CHECK: check-divergent-barrier.mlir:[[@LINE+1]]:9: error: gpu.barrier: barrier reached by 200 of 256 threads (divergent barrier; thread (200,0,0) of block (0,0,0) does not reach it), in block (0,0,0)
        gpu.barrier
      }
      gpu.return
    }
  }
}

// bar.warp.sync needs every lane of its mask: one that skips it (a divergent branch) is reported.
// RUN: not tessera-sim %s --grid 1,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#nvvm.target<chip = "sm_90">] {
    gpu.func @diverged() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %c31 = arith.constant 31 : index
      %all = arith.constant -1 : i32
      %some = arith.cmpi ult, %t, %c31 : index
      scf.if %some {
        // CHECK: check-warp-sync.mlir:[[@LINE+1]]:9: error: nvvm.bar.warp.sync: lane 31 of the mask does not reach this bar.warp.sync (divergent warp), in thread (0,0,0) of block (0,0,0)
        nvvm.bar.warp.sync %all : i32
      }
      gpu.return
    }
  }
}

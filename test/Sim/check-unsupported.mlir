// Operations outside the simulator's kernel-IR subset are rejected by name and location before
// anything runs; every one is listed.
// RUN: not tessera-sim %s --grid 1,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx942">] {
    gpu.func @k(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %v = arith.constant 1.0 : f32
      // CHECK: check-unsupported.mlir:[[@LINE+1]]:12: error: unsupported operation 'gpu.subgroup_reduce' (the simulator runs the kernel-IR subset of docs/simulator.md)
      %r = gpu.subgroup_reduce add %v : (f32) -> f32
      // CHECK: check-unsupported.mlir:[[@LINE+1]]:12: error: unsupported operation 'math.cbrt'
      %c = math.cbrt %r : f32
      memref.store %c, %out[%t] : memref<?xf32>
      gpu.return
    }
  }
}

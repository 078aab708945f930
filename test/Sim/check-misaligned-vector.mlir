// A vector load that promises an alignment (`alignment = 16`) its address does not have is
// reported: the compiler may widen the access on that promise, which faults on NVIDIA and splits
// on AMD. Thread 1 loads 8 halves (16 bytes) from element 1 (byte 2).
// RUN: not tessera-sim %s --buffer in=64 --buffer out=64 --grid 1,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx942">] {
    gpu.func @copy(%in: memref<?xf16>, %out: memref<?xf16>) kernel
        attributes {known_block_size = array<i32: 2, 1, 1>, tessera.arg_names = ["in", "out"]} {
      %t = gpu.thread_id x
      // CHECK: tessera-sim: error: {{.*}}check-misaligned-vector.mlir:[[@LINE+1]]:12: error: vector.load: vector load from an address not a multiple of its declared alignment of 16 bytes, in thread (1,0,0) of block (0,0,0)
      %v = vector.load %in[%t] {alignment = 16} : memref<?xf16>, vector<8xf16>
      vector.store %v, %out[%t] : memref<?xf16>, vector<8xf16>
      gpu.return
    }
  }
}

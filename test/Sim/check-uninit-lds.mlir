// A read of LDS that no thread of the workgroup wrote is reported (a GPU returns garbage).
// RUN: not tessera-sim %s --buffer arg0=64 --grid 1,1,1 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx1100">] {
    gpu.func @shift(%out: memref<?xf32>) workgroup(%lds : memref<64xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c63 = arith.constant 63 : index
      %v = arith.constant 2.0 : f32
      // Thread 63 skips its store, but thread 62 reads its slot (the others read their neighbour's).
      %writes = arith.cmpi ult, %t, %c63 : index
      scf.if %writes {
        memref.store %v, %lds[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      %n = arith.addi %t, %c1 : index
      %k = arith.select %writes, %n, %t : index
      // CHECK: check-uninit-lds.mlir:[[@LINE+1]]:12: error: memref.load: read of LDS never written: workgroup buffer #0 (memref<64xf32, #gpu.address_space<workgroup>>) byte 252 (access of bytes [252, 256)), in thread (62,0,0) of block (0,0,0)
      %x = memref.load %lds[%k] : memref<64xf32, #gpu.address_space<workgroup>>
      memref.store %x, %out[%t] : memref<?xf32>
      gpu.return
    }
  }
}

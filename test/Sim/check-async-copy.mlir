// LDS that an asynchronous copy is still writing is neither read nor written: only a wait of the
// copying thread (cp.async.wait.group N leaves its newest N groups in flight) lands the copy.
// RUN: not tessera-sim %s --kernel=read_in_flight --buffer arg0=64 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=READ
// RUN: not tessera-sim %s --kernel=store_in_flight --buffer arg0=64 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=STORE
// RUN: not tessera-sim %s --kernel=bad_count --buffer arg0=64 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=COUNT
module attributes {gpu.container_module} {
  gpu.module @m [#nvvm.target<chip = "sm_90">] {
    // Two groups, then a wait that leaves the newest in flight: its bytes are read.
    gpu.func @read_in_flight(%in: memref<?xf32>)
        workgroup(%lds : memref<64xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %c32 = arith.constant 32 : index
      %hi = arith.addi %t, %c32 : index
      %a = nvgpu.device_async_copy %in[%t], %lds[%t], 1 : memref<?xf32> to memref<64xf32, #gpu.address_space<workgroup>>
      nvvm.cp.async.commit.group
      %b = nvgpu.device_async_copy %in[%hi], %lds[%hi], 1 : memref<?xf32> to memref<64xf32, #gpu.address_space<workgroup>>
      nvvm.cp.async.commit.group
      nvvm.cp.async.wait.group 1
      %x = memref.load %lds[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      // READ: check-async-copy.mlir:[[@LINE+1]]:12: error: memref.load: read of LDS an asynchronous copy is still writing (no wait of the copying thread covers it): workgroup buffer #0 (memref<64xf32, #gpu.address_space<workgroup>>) byte 128 (access of bytes [128, 132)), in thread (0,0,0) of block (0,0,0)
      %y = memref.load %lds[%hi] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.return
    }
    // A plain store over a copy in flight races with it.
    gpu.func @store_in_flight(%in: memref<?xf32>)
        workgroup(%lds : memref<64xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %v = arith.constant 1.0 : f32
      %a = nvgpu.device_async_copy %in[%t], %lds[%t], 1 : memref<?xf32> to memref<64xf32, #gpu.address_space<workgroup>>
      nvvm.cp.async.commit.group
      // STORE: check-async-copy.mlir:[[@LINE+1]]:7: error: memref.store: store to LDS an asynchronous copy is still writing
      memref.store %v, %lds[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.return
    }
    // The source element count must lie in [0, the copy's elements].
    gpu.func @bad_count(%in: memref<?xf32>)
        workgroup(%lds : memref<64xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c5 = arith.constant 5 : index
      // COUNT: check-async-copy.mlir:[[@LINE+1]]:12: error: nvgpu.device_async_copy: source element count 5 is outside [0, 4], in thread (0,0,0) of block (0,0,0)
      %a = nvgpu.device_async_copy %in[%c0], %lds[%c0], 4, %c5 : memref<?xf32> to memref<64xf32, #gpu.address_space<workgroup>>
      gpu.return
    }
  }
}

// amdgpu.gather_to_lds (global_load_lds_dwordx4, LDS DMA) on gfx950: 128 threads in two waves each
// load 8 halves at their own address, element 8 ((5 t) % 128) of arg0 = 0..2047, into LDS at their
// wave's base + 8 x their lane; every sixteenth thread (t % 16 == 15) stores zeros into its slot
// instead. After a load-counter wait and a barrier thread t reads its slot back: 8 ((5 t) % 128) + j,
// or 0. Reading before the wait, and a base that differs across a wave's lanes, are errors.
// RUN: tessera-sim %s --kernel gather_check --buffer arg0=2048:iota --buffer arg1=1024 --grid 1,1,1 --print arg1 | FileCheck %s
// RUN: not tessera-sim %s --kernel gather_no_wait --buffer arg0=2048:iota --buffer arg1=1024 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=NOWAIT
// RUN: not tessera-sim %s --kernel gather_lane_base --buffer arg0=2048:iota --buffer arg1=1024 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=BASE
// CHECK: arg1: 1024 x f32, sum 489248, sum|x| 489248, NaN 0
// CHECK: arg1 = 0 1 2 3 4 5 6 7 40 41 42 43 44 45 46 47 80 81 82 83 84 85 86 87 120 121
// CHECK-SAME: 560 561 562 563 564 565 566 567 0 0 0 0 0 0 0 0 640 641
// NOWAIT: read of LDS an asynchronous copy is still writing (no wait of the copying thread covers it)
// BASE: gather_to_lds: the LDS index differs across the lanes of wave 0
module attributes {gpu.container_module} {
  gpu.module @chk [#rocdl.target<chip = "gfx950">] {
    gpu.func @gather_check(%src: memref<2048xf16>, %out: memref<1024xf32>)
        workgroup(%lds: memref<1024xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %c5 = arith.constant 5 : index
      %c8 = arith.constant 8 : index
      %c15 = arith.constant 15 : index
      %c16 = arith.constant 16 : index
      %c64 = arith.constant 64 : index
      %c128 = arith.constant 128 : index
      %t = gpu.thread_id x
      %t5 = arith.muli %t, %c5 : index
      %r = arith.remui %t5, %c128 : index
      %from = arith.muli %r, %c8 : index
      %w = arith.divui %t, %c64 : index
      %w64 = arith.muli %w, %c64 : index
      %base = arith.muli %w64, %c8 : index
      %slot = arith.muli %t, %c8 : index
      %m = arith.remui %t, %c16 : index
      %valid = arith.cmpi ne, %m, %c15 : index
      scf.if %valid {
        amdgpu.gather_to_lds %src[%from], %lds[%base] : vector<8xf16>, memref<2048xf16>, memref<1024xf16, #gpu.address_space<workgroup>>
      } else {
        %z = arith.constant dense<0.0> : vector<8xf16>
        vector.store %z, %lds[%slot] : memref<1024xf16, #gpu.address_space<workgroup>>, vector<8xf16>
      }
      amdgpu.memory_counter_wait load(0)
      gpu.barrier
      %v = vector.load %lds[%slot] : memref<1024xf16, #gpu.address_space<workgroup>>, vector<8xf16>
      %f = arith.extf %v : vector<8xf16> to vector<8xf32>
      vector.store %f, %out[%slot] : memref<1024xf32>, vector<8xf32>
      gpu.return
    }
    gpu.func @gather_no_wait(%src: memref<2048xf16>, %out: memref<1024xf32>)
        workgroup(%lds: memref<1024xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %c8 = arith.constant 8 : index
      %c64 = arith.constant 64 : index
      %t = gpu.thread_id x
      %from = arith.muli %t, %c8 : index
      %w = arith.divui %t, %c64 : index
      %w64 = arith.muli %w, %c64 : index
      %base = arith.muli %w64, %c8 : index
      amdgpu.gather_to_lds %src[%from], %lds[%base] : vector<8xf16>, memref<2048xf16>, memref<1024xf16, #gpu.address_space<workgroup>>
      gpu.barrier
      %v = vector.load %lds[%from] : memref<1024xf16, #gpu.address_space<workgroup>>, vector<8xf16>
      %f = arith.extf %v : vector<8xf16> to vector<8xf32>
      vector.store %f, %out[%from] : memref<1024xf32>, vector<8xf32>
      gpu.return
    }
    gpu.func @gather_lane_base(%src: memref<2048xf16>, %out: memref<1024xf32>)
        workgroup(%lds: memref<1024xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %c8 = arith.constant 8 : index
      %t = gpu.thread_id x
      %from = arith.muli %t, %c8 : index
      amdgpu.gather_to_lds %src[%from], %lds[%from] : vector<8xf16>, memref<2048xf16>, memref<1024xf16, #gpu.address_space<workgroup>>
      gpu.return
    }
  }
}

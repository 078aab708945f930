// amdgpu.transpose_load (ds_read_b64_tr_b16) on gfx950: V[16][16] = 0..255 staged in LDS; lane s
// reads the 4 elements at row 4 (s / 16) + (s / 4) % 4, column 4 (s % 4); the exchange in each
// group of 16 lanes gives lane l the column run V[4 (l / 16) + n][l % 16], n = 0..3, stored at
// out[4 l + n]: lane 0 gets 0 16 32 48, lane 1 gets 1 17 33 49, lane 16 gets 64 80 96 112.
// An address not a multiple of 8 bytes is an error, as is a read that part of the wave skips.
// RUN: tessera-sim %s --kernel transpose_load_check --buffer arg0=256:iota --buffer arg1=256 --grid 1,1,1 --print arg1 | FileCheck %s
// RUN: not tessera-sim %s --kernel transpose_load_misaligned --buffer arg0=256:iota --buffer arg1=256 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=MISALIGNED
// CHECK: arg1: 256 x f32, sum 32640, sum|x| 32640, NaN 0
// CHECK: arg1 = 0 16 32 48 1 17 33 49 2 18 34 50 3 19 35 51 4 20 36 52
// CHECK-SAME: 15 31 47 63 64 80 96 112 65 81 97 113
// RUN: not tessera-sim %s --kernel transpose_load_half_wave --buffer arg0=256:iota --buffer arg1=256 --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=HALF
// MISALIGNED: ds_read_b64_tr_b16 from an address not a multiple of 8 bytes
// HALF: executed by 32 of the 64 lanes of wave 0 (ds_read_b64_tr_b16 needs every lane)
module attributes {gpu.container_module} {
  gpu.module @chk [#rocdl.target<chip = "gfx950">] {
    gpu.func @transpose_load_check(%V: memref<256xf16>, %out: memref<256xf32>)
        workgroup(%sV: memref<256xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c4 = arith.constant 4 : index
      %c16 = arith.constant 16 : index
      %l = gpu.thread_id x
      %at = arith.muli %l, %c4 : index
      %v = vector.load %V[%at] : memref<256xf16>, vector<4xf16>
      vector.store %v, %sV[%at] : memref<256xf16, #gpu.address_space<workgroup>>, vector<4xf16>
      gpu.barrier
      %g = arith.divui %l, %c16 : index
      %g4 = arith.muli %g, %c4 : index
      %q = arith.divui %l, %c4 : index
      %n = arith.remui %q, %c4 : index
      %row = arith.addi %g4, %n : index
      %s4 = arith.remui %l, %c4 : index
      %col = arith.muli %s4, %c4 : index
      %rowAt = arith.muli %row, %c16 : index
      %src = arith.addi %rowAt, %col : index
      %r = amdgpu.transpose_load %sV[%src] : memref<256xf16, #gpu.address_space<workgroup>> -> vector<4xf16>
      %w = arith.extf %r : vector<4xf16> to vector<4xf32>
      vector.store %w, %out[%at] : memref<256xf32>, vector<4xf32>
      gpu.return
    }
    gpu.func @transpose_load_half_wave(%V: memref<256xf16>, %out: memref<256xf32>)
        workgroup(%sV: memref<256xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c4 = arith.constant 4 : index
      %c16 = arith.constant 16 : index
      %l = gpu.thread_id x
      %at = arith.muli %l, %c4 : index
      %v = vector.load %V[%at] : memref<256xf16>, vector<4xf16>
      vector.store %v, %sV[%at] : memref<256xf16, #gpu.address_space<workgroup>>, vector<4xf16>
      gpu.barrier
      %g = arith.divui %l, %c16 : index
      %g4 = arith.muli %g, %c4 : index
      %q = arith.divui %l, %c4 : index
      %n = arith.remui %q, %c4 : index
      %row = arith.addi %g4, %n : index
      %s4 = arith.remui %l, %c4 : index
      %col = arith.muli %s4, %c4 : index
      %rowAt = arith.muli %row, %c16 : index
      %src = arith.addi %rowAt, %col : index
      %c32 = arith.constant 32 : index
      %low = arith.cmpi ult, %l, %c32 : index
      scf.if %low {
        %r = amdgpu.transpose_load %sV[%src] : memref<256xf16, #gpu.address_space<workgroup>> -> vector<4xf16>
        %w = arith.extf %r : vector<4xf16> to vector<4xf32>
        vector.store %w, %out[%at] : memref<256xf32>, vector<4xf32>
      }
      gpu.return
    }
    gpu.func @transpose_load_misaligned(%V: memref<256xf16>, %out: memref<256xf32>)
        workgroup(%sV: memref<256xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c4 = arith.constant 4 : index
      %c16 = arith.constant 16 : index
      %l = gpu.thread_id x
      %at = arith.muli %l, %c4 : index
      %v = vector.load %V[%at] : memref<256xf16>, vector<4xf16>
      vector.store %v, %sV[%at] : memref<256xf16, #gpu.address_space<workgroup>>, vector<4xf16>
      gpu.barrier
      %g = arith.divui %l, %c16 : index
      %g4 = arith.muli %g, %c4 : index
      %q = arith.divui %l, %c4 : index
      %n = arith.remui %q, %c4 : index
      %row = arith.addi %g4, %n : index
      %s4 = arith.remui %l, %c4 : index
      %col = arith.muli %s4, %c4 : index
      %rowAt = arith.muli %row, %c16 : index
      %c1 = arith.constant 1 : index
      %src0 = arith.addi %rowAt, %col : index
      %src = arith.addi %src0, %c1 : index
      %r = amdgpu.transpose_load %sV[%src] : memref<256xf16, #gpu.address_space<workgroup>> -> vector<4xf16>
      %w = arith.extf %r : vector<4xf16> to vector<4xf32>
      vector.store %w, %out[%at] : memref<256xf32>, vector<4xf32>
      gpu.return
    }
  }
}

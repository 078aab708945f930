// ldmatrix and mma.sync m16n8k16 on sm_90: C = A * Bt^T with A = 0..255 and Bt = 0..127 (row-major),
// whose products and sums are exact: C[i][j] = sum_k (16 i + k)(16 j + k).
// RUN: tessera-sim %s --buffer arg0=256:iota --buffer arg1=128:iota --buffer arg2=128 --grid 1,1,1 --print arg2 | FileCheck %s
// CHECK: arg2: 128 x f32, sum 16624640, sum|x| 16624640, NaN 0
// CHECK: arg2 = 1240 3160 5080 7000 8920 10840 12760 14680 3160 9176 15192 21208 27224 33240 39256 45272 5080 15192
module attributes {gpu.container_module} {
  gpu.module @chk [#nvvm.target<chip = "sm_90">] {
    gpu.func @mma_check(%A: memref<16x16xf16>, %Bt: memref<8x16xf16>, %C: memref<16x8xf32>)
        workgroup(%sA: memref<16x16xf16, #gpu.address_space<workgroup>>, %sB: memref<8x16xf16, #gpu.address_space<workgroup>>)
        kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %c2 = arith.constant 2 : index
      %c4 = arith.constant 4 : index
      %c8 = arith.constant 8 : index
      %c16 = arith.constant 16 : index
      %l = gpu.thread_id x
      // Stage A (8 halves per lane) and Bt (4 per lane) in shared memory.
      %ar = arith.divui %l, %c2 : index
      %ac0 = arith.remui %l, %c2 : index
      %ac = arith.muli %ac0, %c8 : index
      %av = vector.load %A[%ar, %ac] : memref<16x16xf16>, vector<8xf16>
      vector.store %av, %sA[%ar, %ac] : memref<16x16xf16, #gpu.address_space<workgroup>>, vector<8xf16>
      %br = arith.divui %l, %c4 : index
      %bc0 = arith.remui %l, %c4 : index
      %bc = arith.muli %bc0, %c4 : index
      %bv = vector.load %Bt[%br, %bc] : memref<8x16xf16>, vector<4xf16>
      vector.store %bv, %sB[%br, %bc] : memref<8x16xf16, #gpu.address_space<workgroup>>, vector<4xf16>
      gpu.barrier
      // ldmatrix.x4 for A: lane l addresses row l % 16, column (l / 16) * 8.
      %lr = arith.remui %l, %c16 : index
      %lq = arith.divui %l, %c16 : index
      %lc = arith.muli %lq, %c8 : index
      %a = nvgpu.ldmatrix %sA[%lr, %lc] {numTiles = 4 : i32, transpose = false} : memref<16x16xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
      // ldmatrix.x2 for B (Bt row-major is B column-major): row l % 8, column ((l / 8) % 2) * 8.
      %br2 = arith.remui %l, %c8 : index
      %bq = arith.divui %l, %c8 : index
      %bq2 = arith.remui %bq, %c2 : index
      %bc2 = arith.muli %bq2, %c8 : index
      %b = nvgpu.ldmatrix %sB[%br2, %bc2] {numTiles = 2 : i32, transpose = false} : memref<8x16xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
      %z = arith.constant dense<0.0> : vector<2x2xf32>
      %d = nvgpu.mma.sync (%a, %b, %z) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
      // D fragment: d[0] is row l / 4, columns 2 (l % 4) + {0, 1}; d[1] the same 8 rows lower.
      %cr = arith.divui %l, %c4 : index
      %cc0 = arith.remui %l, %c4 : index
      %cc = arith.muli %cc0, %c2 : index
      %cr8 = arith.addi %cr, %c8 : index
      %d0 = vector.extract %d[0] : vector<2xf32> from vector<2x2xf32>
      %d1 = vector.extract %d[1] : vector<2xf32> from vector<2x2xf32>
      vector.store %d0, %C[%cr, %cc] : memref<16x8xf32>, vector<2xf32>
      vector.store %d1, %C[%cr8, %cc] : memref<16x8xf32>, vector<2xf32>
      gpu.return
    }
  }
}

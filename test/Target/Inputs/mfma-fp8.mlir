// One fp8 MFMA of each shape on CHIP with e4m3 elements FP8 (substituted by the RUN lines):
// lane l reads its 8 bytes of A and of B at 8 l and writes its accumulator at l * (M * N / 64).
module attributes {gpu.container_module} {
  gpu.module @mfma_16x16x32 [#rocdl.target<chip = "CHIP">] {
    gpu.func @mfma_16x16x32(%a: memref<?xFP8>, %b: memref<?xFP8>, %d: memref<?xf32>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c4 = arith.constant 4 : index
      %c8 = arith.constant 8 : index
      %l = gpu.thread_id x
      %in = arith.muli %l, %c8 : index
      %va = vector.load %a[%in] : memref<?xFP8>, vector<8xFP8>
      %vb = vector.load %b[%in] : memref<?xFP8>, vector<8xFP8>
      %z = arith.constant dense<0.0> : vector<4xf32>
      %acc = amdgpu.mfma 16x16x32 %va * %vb + %z blgp = none : vector<8xFP8>, vector<8xFP8>, vector<4xf32>
      %out = arith.muli %l, %c4 : index
      vector.store %acc, %d[%out] : memref<?xf32>, vector<4xf32>
      gpu.return
    }
  }
  gpu.module @mfma_32x32x16 [#rocdl.target<chip = "CHIP">] {
    gpu.func @mfma_32x32x16(%a: memref<?xFP8>, %b: memref<?xFP8>, %d: memref<?xf32>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c8 = arith.constant 8 : index
      %c16 = arith.constant 16 : index
      %l = gpu.thread_id x
      %in = arith.muli %l, %c8 : index
      %va = vector.load %a[%in] : memref<?xFP8>, vector<8xFP8>
      %vb = vector.load %b[%in] : memref<?xFP8>, vector<8xFP8>
      %z = arith.constant dense<0.0> : vector<16xf32>
      %acc = amdgpu.mfma 32x32x16 %va * %vb + %z blgp = none : vector<8xFP8>, vector<8xFP8>, vector<16xf32>
      %out = arith.muli %l, %c16 : index
      vector.store %acc, %d[%out] : memref<?xf32>, vector<16xf32>
      gpu.return
    }
  }
}

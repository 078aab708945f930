// math.exp2 becomes one v_exp_f32 per element, with no ROCm device libraries and no PATH.
// RUN: tessera-opt %s --tessera-lower-to-rocdl=chip=gfx942 | FileCheck %s --check-prefix=IR
// RUN: rm -rf %t && env PATH= %tessera_compile %s --target=gfx942 -o %t
// RUN: FileCheck %s --check-prefix=ISA < %t/softmax_exp.s

// IR-LABEL: llvm.func @softmax_exp
// IR-COUNT-5: rocdl.exp2
// IR-NOT: __ocml
// ISA-LABEL: softmax_exp:
// ISA-COUNT-5: v_exp_f32
// ISA-NOT: __ocml
module attributes {gpu.container_module} {
  gpu.module @softmax_exp [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @softmax_exp(%x: memref<?xf32>, %v: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %tid = gpu.thread_id x
      %a = memref.load %x[%tid] : memref<?xf32>
      %e = math.exp2 %a : f32
      memref.store %e, %x[%tid] : memref<?xf32>
      %c4 = arith.constant 4 : index
      %o = arith.muli %tid, %c4 : index
      %vv = vector.load %v[%o] : memref<?xf32>, vector<4xf32>
      %ve = math.exp2 %vv : vector<4xf32>
      vector.store %ve, %v[%o] : memref<?xf32>, vector<4xf32>
      gpu.return
    }
  }
}

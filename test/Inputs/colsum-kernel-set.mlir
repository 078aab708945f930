// A test-only kernel set (kernel IR, no directive): out = scale * column sums of x (M x N, row stride ld).
// colsum_accumulate adds every row into the f32 workspace acc, which the runtime allocates per
// stream and zeroes before the set's first kernel; colsum_finish scales acc into out. Each thread
// owns one column, so the accumulation needs no atomics: what it needs is the zeroed workspace,
// shared between the two kernels of one launch. Compiled by tessera-compile for any target
// (python/tests/test_kernel_set_*.py, test/Compile/kernel-set.test).
module attributes {gpu.container_module} {
  gpu.module @colsum_accumulate {
    gpu.func @colsum_accumulate(%x: memref<?xf32>, %acc: memref<?xf32>, %M: index, %N: index, %ld: index) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>,
                    tessera.directive = "colsum",
                    tessera.arg_names = ["x", "acc", "M", "N", "ld"],
                    tessera.arg_roles = #tessera.arg_roles<[input, workspace, size, size, stride]>,
                    tessera.grid = "[[\22ceil_div\22, \22N\22, 64], 1, 1]",
                    tessera.workspaces = "[{\22arg\22: \22acc\22, \22bytes\22: [\22mul\22, \22N\22, 4], \22zero\22: true}]",
                    tessera.kernel_set = #tessera.kernel_set<"colsum", 0>} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %base = arith.muli %b, %c64 : index
      %j = arith.addi %base, %t : index
      %inside = arith.cmpi ult, %j, %N : index
      scf.if %inside {
        scf.for %i = %c0 to %M step %c1 {
          %row = arith.muli %i, %ld : index
          %at = arith.addi %row, %j : index
          %v = memref.load %x[%at] : memref<?xf32>
          %sum = memref.load %acc[%j] : memref<?xf32>
          %next = arith.addf %sum, %v : f32
          memref.store %next, %acc[%j] : memref<?xf32>
        }
      }
      gpu.return
    }
  }
  gpu.module @colsum_finish {
    gpu.func @colsum_finish(%acc: memref<?xf32>, %out: memref<?xf32>, %N: index, %scale: f32) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>,
                    tessera.directive = "colsum",
                    tessera.arg_names = ["acc", "out", "N", "scale"],
                    tessera.arg_roles = #tessera.arg_roles<[workspace, output, size, scale]>,
                    tessera.grid = "[[\22ceil_div\22, \22N\22, 64], 1, 1]",
                    tessera.workspaces = "[{\22arg\22: \22acc\22, \22bytes\22: [\22mul\22, \22N\22, 4], \22zero\22: true}]",
                    tessera.kernel_set = #tessera.kernel_set<"colsum", 1>} {
      %c64 = arith.constant 64 : index
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %base = arith.muli %b, %c64 : index
      %j = arith.addi %base, %t : index
      %inside = arith.cmpi ult, %j, %N : index
      scf.if %inside {
        %sum = memref.load %acc[%j] : memref<?xf32>
        %scaled = arith.mulf %sum, %scale : f32
        memref.store %scaled, %out[%j] : memref<?xf32>
      }
      gpu.return
    }
  }
}

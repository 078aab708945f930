// An op whose ROCDL lowering calls a device-library function (math.sin: __ocml_sin_f32) is
// refused at compile time with the function's name, not left for the loader to fail on.
// RUN: rm -rf %t && not %tessera_compile %s --target=gfx942 -o %t 2>&1 | FileCheck %s
// CHECK: kernel 'sine' calls '__ocml_sin_f32', a device-library function: Tessera links no device library
module attributes {gpu.container_module} {
  gpu.module @sine [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @sine(%x: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %a = memref.load %x[%t] : memref<?xf32>
      %s = math.sin %a : f32
      memref.store %s, %x[%t] : memref<?xf32>
      gpu.return
    }
  }
}

// An op whose ROCDL lowering calls a device-library function (gpu.grid_dim: __ockl_get_num_groups)
// is refused at compile time with the function's name, not left for the loader to fail on.
// RUN: rm -rf %t && not %tessera_compile %s --target=gfx942 -o %t 2>&1 | FileCheck %s
// CHECK: kernel 'grid_dim' calls '__ockl_get_num_groups', a device-library function: Tessera links no device library
module attributes {gpu.container_module} {
  gpu.module @grid_dim [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @grid_dim(%x: memref<?xindex>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %n = gpu.grid_dim x
      %t = gpu.thread_id x
      memref.store %n, %x[%t] : memref<?xindex>
      gpu.return
    }
  }
}

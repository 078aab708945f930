// gpu.grid_dim on AMD: the workgroup count from the HSA dispatch packet (grid size over workgroup
// size), with no device-library call (upstream's lowering calls __ockl_get_num_groups).
// RUN: tessera-opt %s --tessera-lower-to-rocdl=chip=gfx942 | FileCheck %s --check-prefix=IR
// RUN: rm -rf %t && %tessera_compile %s --target=gfx942 -o %t
// RUN: FileCheck %s --check-prefix=ISA < %t/grid_dim.s

// IR-LABEL: llvm.func @grid_dim
// IR: llvm.call_intrinsic "llvm.amdgcn.dispatch.ptr"() : () -> !llvm.ptr<4>
// IR-DAG: llvm.getelementptr {{.+}}[16] : (!llvm.ptr<4>) -> !llvm.ptr<4>, i8
// IR-DAG: llvm.getelementptr {{.+}}[6] : (!llvm.ptr<4>) -> !llvm.ptr<4>, i8
// IR: llvm.udiv
// IR-NOT: __ockl
// ISA-LABEL: grid_dim:
// ISA-DAG: s_load_dword {{s[0-9]+}}, s[0:1], 0x10
// ISA-DAG: s_load_dword {{s[0-9]+}}, s[0:1], 0x4
// ISA-NOT: __ockl
// ISA: .amdhsa_user_sgpr_dispatch_ptr 1
module attributes {gpu.container_module} {
  gpu.module @grid_dim [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @grid_dim(%x: memref<?xindex>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %n = gpu.grid_dim y
      %t = gpu.thread_id x
      memref.store %n, %x[%t] : memref<?xindex>
      gpu.return
    }
  }
}

// tessera.atomic_addf: one vector reduction on sm_90 (sm_90a alike), element atomics on sm_80 and
// on AMD (relaxed there: tessera-workspace-atomics); atomic-addf-gfx942.mlir checks the AMD ISA.
// RUN: tessera-opt %s --tessera-lower-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: tessera-opt %s --tessera-lower-to-rocdl=chip=gfx942 | FileCheck %s --check-prefix=ROCDL

// NVVM-LABEL: llvm.func @add_sm90
// NVVM: llvm.inline_asm has_side_effects {{.*}}cvta.to.global.u64 g, $0;\0Ared.relaxed.gpu.global.add.v4.f32 [g], {$1, $2, $3, $4};\0A}", "l,f,f,f,f"
// NVVM: llvm.inline_asm has_side_effects {{.*}}red.relaxed.gpu.global.add.v2.f32 [g], {$1, $2};\0A}", "l,f,f"
// NVVM-NOT: llvm.atomicrmw
// NVVM-LABEL: llvm.func @add_sm80
// NVVM-NOT: llvm.inline_asm
// NVVM-COUNT-4: llvm.atomicrmw fadd
// ROCDL-LABEL: llvm.func @add_gfx942
// ROCDL-COUNT-4: llvm.atomicrmw fadd {{.*}} monotonic
module attributes {gpu.container_module} {
  gpu.module @sm90 [#nvvm.target<chip = "sm_90">] {
    gpu.func @add_sm90(%w: memref<?xf32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %c8 = arith.constant 8 : index
      %i = arith.muli %t, %c8 : index
      %one = arith.constant dense<1.0> : vector<4xf32>
      tessera.atomic_addf %one, %w[%i] : vector<4xf32>, memref<?xf32>
      %c4 = arith.constant 4 : index
      %j = arith.addi %i, %c4 : index
      %two = arith.constant dense<2.0> : vector<2xf32>
      tessera.atomic_addf %two, %w[%j] : vector<2xf32>, memref<?xf32>
      gpu.return
    }
  }
  gpu.module @sm80 [#nvvm.target<chip = "sm_80">] {
    gpu.func @add_sm80(%w: memref<?xf32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %i = arith.muli %t, %c4 : index
      %one = arith.constant dense<1.0> : vector<4xf32>
      tessera.atomic_addf %one, %w[%i] : vector<4xf32>, memref<?xf32>
      gpu.return
    }
  }
  gpu.module @gfx942 [#rocdl.target<chip = "gfx942", O = 3, abi = "500">] {
    gpu.func @add_gfx942(%w: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %i = arith.muli %t, %c4 : index
      %one = arith.constant dense<1.0> : vector<4xf32>
      tessera.atomic_addf %one, %w[%i] : vector<4xf32>, memref<?xf32>
      gpu.return
    }
  }
}

// tessera.swap_wave_halves in the simulator, on a wave of 64 (gfx950) and of 32 (sm_90): with
// a = lane and b = 100 + lane, lo holds a's lower half-wave then b's, hi a's upper half then b's.
// A swap that not every lane of the wave reaches is an error.
// RUN: tessera-sim %s --kernel swap64 --buffer arg0=128:zero --grid 1,1,1 --print arg0 | FileCheck %s --check-prefix=W64
// RUN: tessera-sim %s --kernel swap32 --buffer arg0=64:zero --grid 1,1,1 --print arg0 | FileCheck %s --check-prefix=W32
// RUN: not tessera-sim %s --kernel divergent --buffer arg0=128:zero --grid 1,1,1 2>&1 | FileCheck %s --check-prefix=ERR
// W64: arg0 = 0 1 2 {{.*}} 30 31 100 101 {{.*}} 130 131 32 33 {{.*}} 62 63 132 133 {{.*}} 162 163{{$}}
// W32: arg0 = 0 1 {{.*}} 14 15 100 101 {{.*}} 114 115 16 17 {{.*}} 30 31 116 117 {{.*}} 130 131{{$}}
// ERR: error: tessera.swap_wave_halves: lane 10 of the wave is inactive (the swap needs all of them), in thread (0,0,0) of block (0,0,0)
module attributes {gpu.container_module} {
  gpu.module @amd [#rocdl.target<chip = "gfx950">] {
    gpu.func @swap64(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %ti = arith.index_cast %t : index to i32
      %a = arith.sitofp %ti : i32 to f32
      %c100 = arith.constant 100.0 : f32
      %b = arith.addf %a, %c100 : f32
      %lo, %hi = tessera.swap_wave_halves %a, %b : f32
      %c64 = arith.constant 64 : index
      %t2 = arith.addi %t, %c64 : index
      memref.store %lo, %out[%t] : memref<?xf32>
      memref.store %hi, %out[%t2] : memref<?xf32>
      gpu.return
    }
    gpu.func @divergent(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c10 = arith.constant 10 : index
      %few = arith.cmpi ult, %t, %c10 : index
      scf.if %few {
        %x = arith.constant 1.0 : f32
        %lo, %hi = tessera.swap_wave_halves %x, %x : f32
        memref.store %lo, %out[%t] : memref<?xf32>
      }
      gpu.return
    }
  }
  gpu.module @nv [#nvvm.target<chip = "sm_90">] {
    gpu.func @swap32(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %ti = arith.index_cast %t : index to i32
      %a = arith.sitofp %ti : i32 to f32
      %c100 = arith.constant 100.0 : f32
      %b = arith.addf %a, %c100 : f32
      %lo, %hi = tessera.swap_wave_halves %a, %b : f32
      %c32 = arith.constant 32 : index
      %t2 = arith.addi %t, %c32 : index
      memref.store %lo, %out[%t] : memref<?xf32>
      memref.store %hi, %out[%t2] : memref<?xf32>
      gpu.return
    }
  }
}

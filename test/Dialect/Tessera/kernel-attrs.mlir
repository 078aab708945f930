// #tessera.arg_roles and #tessera.kernel_set on generated kernels: round trip and every verifier branch.
// RUN: tessera-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: gpu.func @k
// CHECK-SAME: tessera.arg_roles = #tessera.arg_roles<[input, workspace, size, tensor_map, tile_counter]>
// CHECK-SAME: tessera.kernel_set = #tessera.kernel_set<"pair", 1>
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @k(%x: memref<?xf32>, %w: memref<?xf32>, %n: index, %m: memref<16xi64>, %c: memref<?xi32>) kernel
        attributes {tessera.arg_roles = #tessera.arg_roles<[input, workspace, size, tensor_map, tile_counter]>,
                    tessera.kernel_set = #tessera.kernel_set<"pair", 1>} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @+2 {{unknown argument role 'scratch' (expected one of input, output, inout, size, stride, scale, param, tensor_map, tile_counter, workspace)}}
    gpu.func @k(%x: memref<?xf32>) kernel
        attributes {tessera.arg_roles = #tessera.arg_roles<[scratch]>} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @+1 {{'gpu.func' op has 2 arguments but 'tessera.arg_roles' lists 1 roles}}
    gpu.func @k(%x: memref<?xf32>, %n: index) kernel
        attributes {tessera.arg_roles = #tessera.arg_roles<[input]>} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @+1 {{'gpu.func' op argument 1 has role 'workspace' but is not a memref (the runtime passes a pointer)}}
    gpu.func @k(%x: memref<?xf32>, %n: index) kernel
        attributes {tessera.arg_roles = #tessera.arg_roles<[input, workspace]>} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @+1 {{'gpu.func' op 'tessera.arg_roles' must be a #tessera.arg_roles attribute}}
    gpu.func @k(%x: memref<?xf32>) kernel attributes {tessera.arg_roles = ["input"]} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @+2 {{kernel set position must be >= 0, got -1}}
    gpu.func @k(%x: memref<?xf32>) kernel
        attributes {tessera.kernel_set = #tessera.kernel_set<"pair", -1>} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    // expected-error @+1 {{'gpu.func' op 'tessera.kernel_set' must be a #tessera.kernel_set attribute}}
    gpu.func @k(%x: memref<?xf32>) kernel attributes {tessera.kernel_set = "pair"} {
      gpu.return
    }
  }
}

// A backward head_dim of 8 mod 16 runs on tiles of the next multiple of 16: dq_accum's rows are
// the tiles' width (4 x 48 bytes), a tile load's vector past head_dim is a select of zeros (its
// load moved inside the row, no element-wise branch of its own), and dq_convert converts the runs
// that hold columns below head_dim: gfx942's runs of 8 end at 40 (5 per row), sm_90's paired runs
// of 16 end at 48 and skip the vector past 40.
// RUN: tessera-opt %s --tessera-generate-kernels=target=gfx942 | FileCheck %s --check-prefix=GFX942
// RUN: tessera-opt %s --tessera-generate-kernels=target=sm_90 | FileCheck %s --check-prefix=SM90

// GFX942-LABEL: gpu.func @b40_main
// GFX942-SAME: \22dq_accum\22, \22bytes\22: [\22mul\22, [\22add\22, {{.+}}, 64], 192]
// GFX942: %[[D:.+]] = arith.constant 40 : index
// GFX942: %[[OK:.+]] = arith.cmpi slt, %{{.+}}, %[[D]] : index
// GFX942: arith.select %[[OK]], %{{.+}}, %{{.+}} : vector<8xbf16>
// GFX942-NOT: arith.cmpi sle, %{{.+}}, %[[D]] : index
// GFX942: gpu.return
// GFX942-LABEL: gpu.func @b40_dq_convert
// GFX942: %[[RUNS:.+]] = arith.constant 320 : index
// GFX942: arith.cmpi slt, %{{.+}}, %[[RUNS]] : index
// GFX942-NOT: arith.constant 40 : index
// GFX942: gpu.return

// SM90-LABEL: gpu.func @b40_dq_convert
// SM90: %[[RUNS:.+]] = arith.constant 192 : index
// SM90: %[[D:.+]] = arith.constant 40 : index
// SM90: arith.cmpi slt, %thread_id_x, %[[RUNS]] : index
// SM90: %[[PAST:.+]] = arith.cmpi slt, %{{.+}}, %[[D]] : index
// SM90-NEXT: scf.if %[[PAST]]
// SM90: gpu.return
tessera.flash_attn_bwd @b40 {dtype = bf16, head_dim = 40, mask = #tessera.mask<causal_bottom_right>}

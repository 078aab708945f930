// Attributes of the tessera dialect: mask kind, KV-scale granularity, tile configuration, and what generated kernels record.
#ifndef TESSERA_ATTRS_TD
#define TESSERA_ATTRS_TD

include "tessera/Dialect/Tessera/IR/TesseraDialect.td"
include "mlir/IR/EnumAttr.td"

def Tessera_MaskKind : I32EnumAttr<"MaskKind", "attention mask kind", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"CausalTopLeft", 1, "causal_top_left">,
    I32EnumAttrCase<"CausalBottomRight", 2, "causal_bottom_right">]> {
  let cppNamespace = "::tessera";
  let genSpecializedAttr = 0;
}

def Tessera_MaskKindAttr : EnumAttr<Tessera_Dialect, Tessera_MaskKind, "mask"> {
  let summary = "Attention mask kind";
  let description = [{
    `none`: every key is visible. `causal_top_left`: query row i sees keys j <= i (the
    diagonal starts at the top-left corner of the Sq x Sk score matrix).
    `causal_bottom_right`: query row i sees keys j <= i + Sk - Sq (the diagonal ends at the
    bottom-right corner, as in FlashAttention 2.1+ and decoding against a cache).
    Example: `#tessera.mask<causal_bottom_right>`.
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Tessera_KVScale : I32EnumAttr<"KVScale", "granularity of fp8 KV dequantisation scales", [
    I32EnumAttrCase<"PerTensor", 0, "per_tensor">,
    I32EnumAttrCase<"PerToken", 1, "per_token">]> {
  let cppNamespace = "::tessera";
  let genSpecializedAttr = 0;
}

def Tessera_KVScaleAttr : EnumAttr<Tessera_Dialect, Tessera_KVScale, "kv_scale"> {
  let summary = "Granularity of the fp8 KV-cache scales";
  let description = [{
    `per_tensor`: one f32 scale for K and one for V (runtime arguments).
    `per_token`: one f32 scale per cached token and KV head, stored beside the cache.
    Example: `#tessera.kv_scale<per_token>`.
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Tessera_TileConfigAttr : AttrDef<Tessera_Dialect, "TileConfig"> {
  let mnemonic = "tile";
  let summary = "Workgroup tile configuration of a generated kernel";
  let description = [{
    `m` x `n` is the output tile one workgroup computes (rows of the output or of the query
    block, columns of the output or keys per step), `k` the reduction depth staged through
    LDS per step, `waves` the number of waves (warps) per workgroup and `stages` the number
    of LDS buffers in the software pipeline. `m`, `n` and `k` are multiples of 16; `waves`
    is 1, 2, 4 or 8; `stages` is 1 to 4. Whether the tile suits a target's matrix atoms is
    checked when the kernel is generated.

    ```mlir
    #tessera.tile<m = 128, n = 128, k = 32, waves = 4, stages = 2>
    ```
  }];
  let parameters = (ins "int64_t":$m, "int64_t":$n, "int64_t":$k, "int64_t":$waves,
                        "int64_t":$stages);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tessera_ArgRolesAttr : AttrDef<Tessera_Dialect, "ArgRoles"> {
  let mnemonic = "arg_roles";
  let summary = "Roles of a generated kernel's arguments";
  let description = [{
    One role per argument of the `gpu.func` carrying it as `tessera.arg_roles`, in order
    (the names are those of the manifest, docs/bundle.md): `input`, `output`, `inout`,
    `size`, `stride`, `scale`, `param`, and the three the runtime fills at launch,
    `tensor_map`, `tile_counter` and `workspace`. The enum and its names are
    `tessera::ArgRole` (`tessera/Support/ArgRole.h`), shared with the simulator and the
    runtime.

    ```mlir
    gpu.func @colsum(%x: memref<?xf32>, %acc: memref<?xf32>, %M: index) kernel
        attributes {tessera.arg_names = ["x", "acc", "M"],
                    tessera.arg_roles = #tessera.arg_roles<[input, workspace, size]>}
    ```
  }];
  let parameters = (ins ArrayRefParameter<"::tessera::ArgRole", "one role per argument">:$roles);
  let hasCustomAssemblyFormat = 1;
}

def Tessera_KernelSetAttr : AttrDef<Tessera_Dialect, "KernelSet"> {
  let mnemonic = "kernel_set";
  let summary = "A kernel's set and its position in the set's launch order";
  let description = [{
    Carried as `tessera.kernel_set` by each `gpu.func` of a directive that generates several
    kernels launched together (a backward pass's preprocess, main and convert kernels; a
    split-KV decode and its combine): the set's name and the kernel's position in the launch
    order, from 0. The bundle writer records the set in the manifest's `kernel_sets`
    (docs/bundle.md). A kernel without it is launched alone.

    ```mlir
    #tessera.kernel_set<"colsum", 1>
    ```
  }];
  let parameters = (ins StringRefParameter<"the set's name">:$name, "int64_t":$position);
  let assemblyFormat = "`<` $name `,` $position `>`";
  let genVerifyDecl = 1;
}

#endif // TESSERA_ATTRS_TD

// The tessera dialect: declaration and the base class of its ops.
#ifndef TESSERA_DIALECT_TD
#define TESSERA_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Tessera_Dialect : Dialect {
  let name = "tessera";
  let summary = "Attention and matrix-core directives that Tessera expands into GPU kernels";
  let description = [{
    Each op of this dialect is a *directive*: a symbol that names one GPU kernel and states,
    with typed attributes, everything that kernel supports at compile time (element types,
    head dimension, mask kind, optional features, tile configuration). Values that change
    per call (batch, heads, sequence lengths, strides, scale, window sizes, softcap value)
    are runtime arguments of the generated kernel. `tessera-generate-kernels` replaces each
    directive by a `gpu.module` holding one `gpu.func` of the same name.
  }];
  let cppNamespace = "::tessera";
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    // What a generator records on the gpu.func it builds, for the manifest writer, the
    // simulator and the lowerings; the manifest key is the name after "tessera.".
    static ::llvm::StringRef getDirectiveAttrName() { return "tessera.directive"; }
    static ::llvm::StringRef getAttributesAttrName() { return "tessera.attributes"; }
    static ::llvm::StringRef getArgNamesAttrName() { return "tessera.arg_names"; }
    static ::llvm::StringRef getArgRolesAttrName() { return "tessera.arg_roles"; }
    static ::llvm::StringRef getGridAttrName() { return "tessera.grid"; }
    static ::llvm::StringRef getTensorMapsAttrName() { return "tessera.tensor_maps"; }
    static ::llvm::StringRef getDivisibleAttrName() { return "tessera.divisible"; }
    static ::llvm::StringRef getDynamicLdsBytesAttrName() { return "tessera.dynamic_lds_bytes"; }
    static ::llvm::StringRef getFallbackAttrName() { return "tessera.fallback"; }
    static ::llvm::StringRef getPortableTwinAttrName() { return "tessera.portable_twin"; }
    static ::llvm::StringRef getTwinOfAttrName() { return "tessera.twin_of"; }
    static ::llvm::StringRef getWorkspacesAttrName() { return "tessera.workspaces"; }
    static ::llvm::StringRef getKernelSetAttrName() { return "tessera.kernel_set"; } // KernelSetAttr
  }];
  // tessera.arg_roles and tessera.kernel_set on generated kernels are checked where they sit.
  let hasOperationAttrVerify = 1;
}

class Tessera_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tessera_Dialect, mnemonic, traits>;

#endif // TESSERA_DIALECT_TD

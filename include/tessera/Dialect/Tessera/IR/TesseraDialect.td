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
  // tessera.arg_roles and tessera.kernel_set on generated kernels are checked where they sit.
  let hasOperationAttrVerify = 1;
}

class Tessera_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tessera_Dialect, mnemonic, traits>;

#endif // TESSERA_DIALECT_TD

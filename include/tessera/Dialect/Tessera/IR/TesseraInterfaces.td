// The op interface the attention directives share.
#ifndef TESSERA_INTERFACES_TD
#define TESSERA_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Tessera_AttentionDirective : OpInterface<"AttentionDirective"> {
  let description = [{
    What `flash_attn`, `flash_attn_bwd` and `paged_decode` state the same way: the element type,
    the head dimension, the mask kind and the runtime features their kernels support. The
    attention building blocks (`lib/Codegen/Attention`) read a directive through this interface,
    so the forward, backward and decode generators share one reading of the mask rules.
  }];
  let cppNamespace = "::tessera";
  let methods = [
    InterfaceMethod<"The element type of q, k and v.", "::mlir::Type", "getDtype">,
    InterfaceMethod<"The head dimension.", "uint64_t", "getHeadDim">,
    InterfaceMethod<"The causal mask kind (none, top-left or bottom-right aligned).",
                    "::tessera::MaskKind", "getMask">,
    InterfaceMethod<"True when the kernels take a runtime sliding window.", "bool",
                    "getSlidingWindow">,
    InterfaceMethod<"True when the kernels take a runtime softcap.", "bool", "getSoftcap">,
  ];
}

#endif // TESSERA_INTERFACES_TD

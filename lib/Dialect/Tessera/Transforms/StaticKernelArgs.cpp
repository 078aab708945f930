// tessera-static-kernel-args: static extents for buffer arguments before bare-pointer lowering.
#include "tessera/Dialect/Tessera/Transforms/Passes.h"

using namespace mlir;

namespace tessera {
#define GEN_PASS_DEF_TESSERASTATICKERNELARGS
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
} // namespace tessera

namespace {
struct StaticKernelArgsPass
    : tessera::impl::TesseraStaticKernelArgsBase<StaticKernelArgsPass> {
  void runOnOperation() override {
    constexpr int64_t kNominalExtent = int64_t(1) << 40;
    for (gpu::GPUFuncOp func : getOperation().getOps<gpu::GPUFuncOp>()) {
      SmallVector<Type> types;
      // The entry block also holds the workgroup attributions after the parameters.
      unsigned numParams = func.getFunctionType().getNumInputs();
      for (BlockArgument arg : func.getArguments().take_front(numParams)) {
        auto type = dyn_cast<MemRefType>(arg.getType());
        if (type && type.getRank() == 1 && type.isDynamicDim(0))
          arg.setType(MemRefType::get({kNominalExtent}, type.getElementType(),
                                      type.getLayout(), type.getMemorySpace()));
        types.push_back(arg.getType());
      }
      func.setFunctionType(FunctionType::get(func.getContext(), types, {}));
    }
  }
};
} // namespace

// tessera-lower-to-nvvm: the NVIDIA lowering of generated kernels to the LLVM + NVVM dialects.
#include "tessera/Dialect/Tessera/Transforms/Passes.h"

#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace tessera {
#define GEN_PASS_DEF_TESSERALOWERTONVVM
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
} // namespace tessera

namespace {

std::optional<std::string> nvvmChip(gpu::GPUModuleOp module) {
  if (ArrayAttr targets = module.getTargetsAttr())
    for (Attribute a : targets)
      if (auto t = dyn_cast<NVVM::NVVMTargetAttr>(a)) return t.getChip().str();
  return std::nullopt;
}

struct LowerToNVVMPass : tessera::impl::TesseraLowerToNVVMBase<LowerToNVVMPass> {
  using TesseraLowerToNVVMBase::TesseraLowerToNVVMBase;
  // Load the nested pipeline's dialects before running (see LowerToROCDL.cpp).
  void getDependentDialects(DialectRegistry &registry) const override {
    TesseraLowerToNVVMBase::getDependentDialects(registry);
    OpPassManager pm(gpu::GPUModuleOp::getOperationName());
    tessera::buildNVVMLoweringPipeline(pm);
    pm.getDependentDialects(registry);
  }
  void runOnOperation() override {
    SmallVector<gpu::GPUModuleOp> modules(getOperation().getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp module : modules) {
      std::optional<std::string> moduleChip = nvvmChip(module);
      if (!moduleChip) continue; // not an NVIDIA kernel
      if (!chip.empty() && chip != *moduleChip) {
        module.emitError() << "gpu.module targets " << *moduleChip
                           << " but the lowering was asked for chip " << chip;
        return signalPassFailure();
      }
      OpPassManager pm(gpu::GPUModuleOp::getOperationName());
      tessera::buildNVVMLoweringPipeline(pm);
      if (failed(runPipeline(pm, module))) return signalPassFailure();
    }
  }
};

} // namespace

void tessera::buildNVVMLoweringPipeline(OpPassManager &pm) {
  pm.addPass(tessera::createTesseraStaticKernelArgs());
  pm.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions options;
  options.useBarePtrCallConv = true;
  pm.addPass(createConvertGpuOpsToNVVMOps(options));
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

// LLVM back-end steps shared by the AMDGPU and NVPTX serialisers.
#include "LLVMCodegen.h"

#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

namespace tessera {

std::unique_ptr<llvm::Module>
lowerToLLVMIR(mlir::gpu::GPUModuleOp module,
              llvm::function_ref<void(mlir::OpPassManager &)> pipeline,
              llvm::StringRef vendorDialect, llvm::LLVMContext &context) {
  mlir::PassManager pm(module.getContext(), mlir::gpu::GPUModuleOp::getOperationName());
  pipeline(pm);
  if (mlir::failed(pm.run(module))) {
    mlir::emitError(module.getLoc())
        << "lowering kernel '" << module.getName() << "' to " << vendorDialect << " failed";
    return nullptr;
  }
  std::unique_ptr<llvm::Module> llvmModule =
      mlir::translateModuleToLLVMIR(module, context, module.getName());
  if (!llvmModule) {
    mlir::emitError(module.getLoc()) << "translation to LLVM IR failed";
    return nullptr;
  }
  // Code objects are made in-process with no device library linked: a call to one of its
  // functions (an op lowered to, e.g., __ockl_get_num_groups) would fail only when loaded.
  for (const llvm::Function &f : *llvmModule)
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty()) {
      mlir::emitError(module.getLoc())
          << "kernel '" << module.getName() << "' calls '" << f.getName()
          << "', a device-library function: Tessera links no device library, so the op that "
             "lowered to it has no in-process form on this target";
      return nullptr;
    }
  return llvmModule;
}

static void initTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeAMDGPUTarget();
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const std::string &triple,
                                                         const std::string &cpu,
                                                         const std::string &features,
                                                         std::string &error) {
  initTargets();
  llvm::Triple t(triple);
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(t, error);
  if (!target) return nullptr;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      t, cpu, features, llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
}

void optimizeModule(llvm::Module &module, llvm::TargetMachine &tm) {
  module.setTargetTriple(tm.getTargetTriple());
  module.setDataLayout(tm.createDataLayout());
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, mam);
}

bool emitCode(llvm::TargetMachine &tm, llvm::Module &module, llvm::CodeGenFileType type,
              std::string &out) {
  llvm::raw_string_ostream os(out);
  llvm::buffer_ostream buffered(os);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, buffered, nullptr, type)) return false;
  pm.run(module);
  return true;
}

} // namespace tessera

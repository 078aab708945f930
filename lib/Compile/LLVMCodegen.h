// LLVM back-end steps shared by the AMDGPU and NVPTX serialisers.
#ifndef TESSERA_LIB_COMPILE_LLVMCODEGEN_H
#define TESSERA_LIB_COMPILE_LLVMCODEGEN_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"

#include <memory>
#include <string>

namespace tessera {

/// Runs the vendor lowering `pipeline` on a kernel module (in place) and translates it to LLVM
/// IR in `context`; emits a diagnostic naming the `vendorDialect` and returns null on failure.
std::unique_ptr<llvm::Module>
lowerToLLVMIR(mlir::gpu::GPUModuleOp module,
              llvm::function_ref<void(mlir::OpPassManager &)> pipeline,
              llvm::StringRef vendorDialect, llvm::LLVMContext &context);

/// A TargetMachine for `triple` / `cpu` at -O3, or null with `error` set.
std::unique_ptr<llvm::TargetMachine> createTargetMachine(const std::string &triple,
                                                         const std::string &cpu,
                                                         const std::string &features,
                                                         std::string &error);
/// Runs the LLVM O3 module pipeline for `tm` and sets the module's triple and data layout.
void optimizeModule(llvm::Module &module, llvm::TargetMachine &tm);
/// Emits `module` as assembly or object code into `out`; false when `tm` cannot.
bool emitCode(llvm::TargetMachine &tm, llvm::Module &module, llvm::CodeGenFileType type,
              std::string &out);

} // namespace tessera

#endif // TESSERA_LIB_COMPILE_LLVMCODEGEN_H

// Dialect, interface, translation and pass registration shared by the Tessera tools.
#include "tessera/Compile/Compile.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void tessera::registerTesseraDialects(DialectRegistry &registry) {
  registry.insert<tessera::TesseraDialect, gpu::GPUDialect, amdgpu::AMDGPUDialect,
                  ROCDL::ROCDLDialect, NVVM::NVVMDialect, nvgpu::NVGPUDialect,
                  LLVM::LLVMDialect, arith::ArithDialect, math::MathDialect,
                  memref::MemRefDialect, scf::SCFDialect, cf::ControlFlowDialect,
                  vector::VectorDialect, func::FuncDialect, index::IndexDialect,
                  ub::UBDialect>();
  // The to-LLVM conversions find arith/memref/vector/... patterns through interfaces that
  // must be registered explicitly ("failed to legalize operation 'gpu.shuffle'" otherwise).
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
}

void tessera::registerTesseraToolPasses() {
  tessera::registerTesseraPasses();
  registerConversionPasses();
  registerTransformsPasses();
}

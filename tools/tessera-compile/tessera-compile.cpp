// tessera-compile: directives in an .mlir file -> a bundle (code objects, ISA, kernel IR, manifest).
#include "tessera/Compile/Compile.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

namespace cl = llvm::cl;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input.mlir>"), cl::Required);
static cl::opt<std::string> targetChip("target", cl::desc("chip: gfx942, gfx950, gfx1100, gfx1151"),
                                       cl::Required);
static cl::opt<std::string> outputDir("o", cl::desc("bundle directory to write"), cl::Required);

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "Tessera compiler: writes a bundle of kernels for one chip\n");
  // lld, run in-process, resets every cl::opt: keep copies of ours.
  const std::string input = inputFile, chip = targetChip, out = outputDir;

  const tessera::TargetInfo *target = tessera::lookupTarget(chip);
  if (!target) {
    llvm::errs() << "tessera-compile: error: unknown target '" << chip
                 << "'; known targets: " << tessera::knownTargetNames() << "\n";
    return 1;
  }

  mlir::DialectRegistry registry;
  tessera::registerTesseraDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  std::string error;
  auto file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "tessera-compile: error: " << error << "\n";
    return 1;
  }
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module) return 1;
  if (mlir::failed(tessera::compileToBundle(*module, *target, out))) return 1;
  llvm::outs() << "wrote " << out << " (" << chip << ")\n";
  return 0;
}

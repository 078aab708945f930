// NVIDIA serialisation in-process: kernel IR -> LLVM IR -> PTX; ptxas, when present, only
// reports registers and spills for the manifest.
#include "tessera/Compile/Compile.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"
#include "LLVMCodegen.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"

using namespace mlir;

namespace tessera {

KernelResources parsePtxasInfo(llvm::StringRef log) {
  KernelResources r;
  auto capture = [&](const char *pattern) -> std::optional<int> {
    llvm::SmallVector<llvm::StringRef> m;
    int v;
    if (llvm::Regex(pattern).match(log, &m) && !m[1].getAsInteger(10, v)) return v;
    return std::nullopt;
  };
  r.vgpr = capture("Used ([0-9]+) registers");
  r.vgprSpills = capture("([0-9]+) bytes spill stores");
  r.sgprSpills = capture("([0-9]+) bytes spill loads");
  r.ldsBytes = capture("([0-9]+) bytes smem");
  r.scratchBytes = capture("([0-9]+) bytes stack frame");
  return r;
}

/// `ptxas -v` on the PTX, when ptxas is installed; empty resources otherwise.
static KernelResources runPtxas(llvm::StringRef ptx, llvm::StringRef chip) {
  auto ptxas = llvm::sys::findProgramByName("ptxas");
  if (!ptxas) ptxas = llvm::sys::findProgramByName("ptxas", {"/usr/local/cuda/bin"});
  if (!ptxas) return {};
  llvm::SmallString<128> in, log;
  if (llvm::sys::fs::createTemporaryFile("tessera", "ptx", in) ||
      llvm::sys::fs::createTemporaryFile("tessera", "log", log))
    return {};
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(in, ec);
    os << ptx;
  }
  std::string arch = ("-arch=" + chip).str();
  llvm::StringRef args[] = {*ptxas, arch, "-v", in, "-o", "/dev/null"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log),
                                                llvm::StringRef(log)};
  int rc = llvm::sys::ExecuteAndWait(*ptxas, args, std::nullopt, redirects);
  auto text = llvm::MemoryBuffer::getFile(log);
  llvm::sys::fs::remove(in);
  llvm::sys::fs::remove(log);
  if (rc != 0 || !text) return {};
  return parsePtxasInfo((*text)->getBuffer());
}

FailureOr<CompiledKernel> compileNVPTXModule(gpu::GPUModuleOp module, const TargetInfo &target) {
  Location loc = module.getLoc();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = lowerToLLVMIR(
      module, [&](OpPassManager &pm) { buildNVVMLoweringPipeline(pm); }, "NVVM", llvmContext);
  if (!llvmModule) return failure();
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm =
      createTargetMachine("nvptx64-nvidia-cuda", target.chip, "+ptx80", error);
  if (!tm) return emitError(loc) << "NVPTX backend unavailable: " << error;
  optimizeModule(*llvmModule, *tm);

  CompiledKernel kernel;
  if (!emitCode(*tm, *llvmModule, llvm::CodeGenFileType::AssemblyFile, kernel.isa))
    return emitError(loc) << "the NVPTX backend cannot emit code for " << target.chip;
  kernel.codeObject = kernel.isa;
  kernel.resources = runPtxas(kernel.isa, target.chip);
  return kernel;
}

} // namespace tessera

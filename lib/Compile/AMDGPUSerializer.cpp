// AMD serialisation in-process: kernel IR -> LLVM IR -> AMDGPU ISA + object -> hsaco (lld).
#include "tessera/Compile/Compile.h"
#include "LLVMCodegen.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"


#include "lld/Common/Driver.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Transforms/Utils/Cloning.h"


LLD_HAS_DRIVER(elf)

using namespace mlir;

namespace tessera {

KernelResources parseAMDGPUMetadata(llvm::StringRef isa, llvm::StringRef name) {
  // The YAML block lists each kernel as "  - .agpr_count: N ... .name: NAME ..."; fields of
  // one kernel run from its "- " line to the next one.
  KernelResources r;
  size_t meta = isa.find(".amdgpu_metadata");
  if (meta == llvm::StringRef::npos) return r;
  llvm::StringRef yaml = isa.drop_front(meta);
  llvm::SmallVector<llvm::StringRef> lines;
  yaml.split(lines, '\n');
  std::map<std::string, int> fields;
  bool isOurs = false;
  auto flush = [&] {
    if (!isOurs) return;
    auto get = [&](const char *k) -> std::optional<int> {
      auto it = fields.find(k);
      return it == fields.end() ? std::nullopt : std::optional<int>(it->second);
    };
    r.vgpr = get(".vgpr_count"), r.agpr = get(".agpr_count"), r.sgpr = get(".sgpr_count");
    r.vgprSpills = get(".vgpr_spill_count"), r.sgprSpills = get(".sgpr_spill_count");
    r.ldsBytes = get(".group_segment_fixed_size");
    r.scratchBytes = get(".private_segment_fixed_size");
  };
  for (llvm::StringRef line : lines) {
    llvm::StringRef t = line.trim();
    // A kernel entry starts at "- ." with the indentation of the kernels list.
    if (line.starts_with("  - .")) {
      flush();
      fields.clear();
      isOurs = false;
      t = t.drop_front(2);
    }
    auto [key, value] = t.split(':');
    value = value.trim();
    int v;
    if (!value.getAsInteger(10, v)) fields[key.trim().str()] = v;
    if (key.trim() == ".name" && value == name) isOurs = true;
  }
  flush();
  return r;
}

FailureOr<std::string> linkHsaco(Location loc, llvm::StringRef object) {
  llvm::SmallString<128> objPath, outPath;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("tessera", "o", fd, objPath))
    return emitError(loc) << "cannot create a temporary object file";
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << object;
  }
  if (llvm::sys::fs::createTemporaryFile("tessera", "hsaco", outPath)) {
    llvm::sys::fs::remove(objPath);
    return emitError(loc) << "cannot create a temporary code object file";
  }
  // lld resets every llvm::cl option of the process; the tools copy theirs before this.
  std::string errors;
  llvm::raw_string_ostream errStream(errors);
  const char *args[] = {"ld.lld", "-shared", objPath.c_str(), "-o", outPath.c_str()};
  lld::Result result =
      lld::lldMain(args, llvm::nulls(), errStream, {{lld::Gnu, &lld::elf::link}});
  llvm::sys::fs::remove(objPath);
  auto buffer = llvm::MemoryBuffer::getFile(outPath);
  llvm::sys::fs::remove(outPath);
  if (result.retCode != 0 || !buffer)
    return emitError(loc) << "in-process lld failed to link the hsaco: " << errors;
  return (*buffer)->getBuffer().str();
}

FailureOr<CompiledKernel> compileAMDGPUModule(gpu::GPUModuleOp module, const TargetInfo &target) {
  Location loc = module.getLoc();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = lowerToLLVMIR(
      module, [&](OpPassManager &pm) { buildROCDLLoweringPipeline(pm, target.chip); }, "ROCDL", llvmContext);
  if (!llvmModule) return failure();

  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm =
      createTargetMachine("amdgcn-amd-amdhsa", target.chip, "", error);
  if (!tm) return emitError(loc) << "AMDGPU backend unavailable: " << error;
  llvmModule->addModuleFlag(llvm::Module::Error, "amdhsa_code_object_version",
                            kCodeObjectVersion * 100);
  optimizeModule(*llvmModule, *tm);

  CompiledKernel kernel;
  std::unique_ptr<llvm::Module> clone = llvm::CloneModule(*llvmModule);
  if (!emitCode(*tm, *clone, llvm::CodeGenFileType::AssemblyFile, kernel.isa) ||
      !emitCode(*tm, *llvmModule, llvm::CodeGenFileType::ObjectFile, kernel.codeObject))
    return emitError(loc) << "the AMDGPU backend cannot emit code for " << target.chip;
  kernel.resources = parseAMDGPUMetadata(kernel.isa, module.getName());
  return kernel;
}

} // namespace tessera

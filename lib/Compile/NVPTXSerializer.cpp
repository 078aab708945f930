// NVIDIA serialisation in-process: kernel IR -> LLVM IR -> PTX; ptxas, when present, only
// reports registers and spills for the manifest.
#include "tessera/Compile/Compile.h"
#include "tessera/Codegen/MMAAtom.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"
#include "LLVMCodegen.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
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

namespace {

/// `index` as x + c with a constant c (add, or an or of disjoint bits).
std::optional<std::pair<llvm::Value *, int64_t>> splitConstantIndex(llvm::Value *index) {
  auto *op = llvm::dyn_cast<llvm::BinaryOperator>(index);
  if (!op) return std::nullopt;
  bool add = op->getOpcode() == llvm::Instruction::Add ||
             (op->getOpcode() == llvm::Instruction::Or &&
              llvm::cast<llvm::PossiblyDisjointInst>(op)->isDisjoint());
  auto *c = llvm::dyn_cast<llvm::ConstantInt>(op->getOperand(1));
  if (!add || !c) return std::nullopt;
  return std::pair{op->getOperand(0), c->getSExtValue()};
}

/// LICM hoists the addresses of the unrolled ldmatrix loads out of their loop, one register
/// each across the whole body. Split into a base and a constant (the tile's place in shared
/// memory, the fragment's offset in the tile), with the constant's step next to the load,
/// they share a few bases and the constants fold into the instructions' immediates.
/// (CodeGenPrepare does this for plain loads and stores, not for these intrinsics.)
void sinkMatrixLoadOffsets(llvm::Module &module) {
  const llvm::DataLayout &layout = module.getDataLayout();
  llvm::SmallVector<llvm::IntrinsicInst *> loads;
  for (llvm::Function &f : module)
    for (llvm::BasicBlock &bb : f)
      for (llvm::Instruction &i : bb)
        if (auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(&i);
            call && call->getCalledFunction()->getName().starts_with("llvm.nvvm.ldmatrix"))
          loads.push_back(call);
  llvm::DenseMap<std::tuple<llvm::Value *, llvm::Value *, llvm::Type *>, llvm::Value *> bases;
  llvm::SmallPtrSet<llvm::GetElementPtrInst *, 16> replaced;
  for (llvm::IntrinsicInst *load : loads) {
    auto *gep = llvm::dyn_cast<llvm::GetElementPtrInst>(load->getArgOperand(0));
    if (!gep || gep->getParent() == load->getParent() || gep->getNumIndices() != 1) continue;
    llvm::Type *elem = gep->getSourceElementType();
    const int64_t elemBytes = layout.getTypeAllocSize(elem);
    // The base as a root pointer plus constant bytes (a tile's view of shared memory).
    llvm::Value *root = gep->getPointerOperand();
    llvm::APInt rootBytes(layout.getIndexTypeSizeInBits(root->getType()), 0);
    root = root->stripAndAccumulateConstantOffsets(layout, rootBytes, /*AllowNonInbounds=*/true);
    int64_t bytes = rootBytes.getSExtValue();
    llvm::Value *index = gep->getOperand(1);
    if (auto *c = llvm::dyn_cast<llvm::ConstantInt>(index)) {
      bytes += c->getSExtValue() * elemBytes;
      index = nullptr;
    } else if (auto split = splitConstantIndex(index)) {
      index = split->first;
      bytes += split->second * elemBytes;
    }
    llvm::Value *base = root;
    if (index) {
      llvm::Value *&shared = bases[{root, index, elem}];
      if (!shared) {
        llvm::IRBuilder<> at(gep);
        shared = at.CreateGEP(elem, root, index);
      }
      base = shared;
    }
    llvm::IRBuilder<> at(load);
    load->setArgOperand(0, at.CreateConstGEP1_64(at.getInt8Ty(), base, bytes));
    replaced.insert(gep);
  }
  for (llvm::GetElementPtrInst *gep : replaced)
    if (gep->use_empty()) gep->eraseFromParent();
}

} // namespace

FailureOr<CompiledKernel> compileNVPTXModule(gpu::GPUModuleOp module, const TargetInfo &target) {
  Location loc = module.getLoc();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = lowerToLLVMIR(
      module, [&](OpPassManager &pm) { buildNVVMLoweringPipeline(pm); }, "NVVM", llvmContext);
  if (!llvmModule) return failure();
  std::string error;
  // mma.sync on e4m3 needs PTX ISA 8.4 (CUDA 12.4 drivers); every other kernel keeps 8.1.
  const char *ptx = llvmModule->getFunction(kMmaSyncE4M3Intrinsic) ? "+ptx84" : "+ptx81";
  std::unique_ptr<llvm::TargetMachine> tm =
      createTargetMachine("nvptx64-nvidia-cuda", target.chip, ptx, error);
  if (!tm) return emitError(loc) << "NVPTX backend unavailable: " << error;
  optimizeModule(*llvmModule, *tm);
  sinkMatrixLoadOffsets(*llvmModule);

  CompiledKernel kernel;
  if (!emitCode(*tm, *llvmModule, llvm::CodeGenFileType::AssemblyFile, kernel.isa))
    return emitError(loc) << "the NVPTX backend cannot emit code for " << target.chip;
  kernel.codeObject = kernel.isa;
  kernel.resources = runPtxas(kernel.isa, target.chip);
  return kernel;
}

} // namespace tessera

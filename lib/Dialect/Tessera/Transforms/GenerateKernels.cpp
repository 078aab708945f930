// tessera-generate-kernels: replaces each directive by the kernel its generator builds.
#include "tessera/Codegen/Generators.h"
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"
#include "tessera/Target/TargetInfo.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace tessera {
#define GEN_PASS_DEF_TESSERAGENERATEKERNELS
#include "tessera/Dialect/Tessera/Transforms/Passes.h.inc"
} // namespace tessera

namespace tessera {

/// Rejects fp8 KV formats other than the target's: the e4m3 flavour of its matrix cores (FNUZ on
/// gfx942), OCP e4m3 on targets without fp8 matrix cores (gfx11, Hopper dequantises before its
/// mma.sync).
static LogicalResult checkKvFormat(tessera::PagedDecodeOp op, const TargetInfo &target) {
  Type kv = op.getKvElementType();
  std::optional<ElemType> kvElem = toElemType(kv);
  bool isFp8 = kvElem == ElemType::FP8E4M3FN || kvElem == ElemType::FP8E4M3FNUZ;
  ElemType format = target.fp8.value_or(ElemType::FP8E4M3FN);
  if (!isFp8 || kvElem == format) return success();
  return op.emitOpError() << "'kv_dtype' " << kv << " is not supported on " << target.chip
                          << " (its fp8 KV format is " << elemTypeName(format) << ")";
}

/// flash_attn on a target with wgmma gets the warp-specialised TMA kernel plus a portable twin
/// `<name>_portable` for calls TMA cannot serve (strides that are not multiples of 16 bytes);
/// directives that kernel does not cover get the portable kernel, the manifest saying why. Either
/// choice is a remark on the directive.
static LogicalResult generateFlashAttnForTarget(tessera::FlashAttnOp attn, const TargetInfo &target) {
  MLIRContext *ctx = attn.getContext();
  std::string unsupported = target.hasWgmma ? sm90FlashAttnUnsupported(attn) : "";
  if (!target.hasWgmma || !unsupported.empty()) {
    FailureOr<gpu::GPUFuncOp> func = generateFlashAttn(attn, target);
    if (failed(func)) return failure();
    if (unsupported.empty() && attn.getPackGqa() > 1)
      unsupported = "pack_gqa is generated on the sm_90a wgmma path only; one query head per tile";
    if (!unsupported.empty()) {
      (*func)->setAttr(TesseraDialect::getFallbackAttrName(),
                       StringAttr::get(ctx, "portable kernel: " + unsupported));
      attn.emitRemark() << "portable kernel on " << target.chip << ": " << unsupported;
    }
    return success();
  }
  FailureOr<gpu::GPUFuncOp> fast = generateFlashAttnSm90(attn, target);
  if (failed(fast)) return failure();
  FailureOr<gpu::GPUFuncOp> twin = generateFlashAttn(attn, target);
  if (failed(twin)) return failure();
  std::string twinName = (attn.getSymName() + "_portable").str();
  auto twinModule = (*twin)->getParentOfType<gpu::GPUModuleOp>();
  if (SymbolTable::lookupSymbolIn(attn->getParentOp(), twinName))
    return attn.emitOpError() << "needs the symbol '" << twinName
                              << "' for its portable twin on " << target.chip;
  SymbolTable::setSymbolName(twinModule, twinName);
  SymbolTable::setSymbolName(*twin, twinName);
  (*fast)->setAttr(TesseraDialect::getPortableTwinAttrName(), StringAttr::get(ctx, twinName));
  (*twin)->setAttr(TesseraDialect::getTwinOfAttrName(), StringAttr::get(ctx, attn.getSymName()));
  attn.emitRemark() << "wgmma/TMA kernel on " << target.chip << ", with the portable twin '"
                    << twinName << "' for strides TMA cannot copy";
  return success();
}

LogicalResult generateKernels(ModuleOp module, const TargetInfo &target) {
  // Directives sit at the top level; tessera ops inside kernels (atomic_addf) are not ones.
  SmallVector<Operation *> directives;
  for (Operation &op : module.getOps())
    if (isa<tessera::TesseraDialect>(op.getDialect())) directives.push_back(&op);
  // A directive whose generator builds one plain kernel: record it, then drop the directive.
  auto plainKernel = [](Operation *directive, StringRef name,
                        FailureOr<gpu::GPUFuncOp> func) -> LogicalResult {
    if (failed(func)) return failure();
    recordKernelSet({name.str(), {*func}});
    directive->erase();
    return success();
  };
  bool ok = true;
  for (Operation *op : directives) {
    LogicalResult result =
        llvm::TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](tessera::WmmaGemmOp gemm) {
              return plainKernel(gemm, gemm.getSymName(), generateWmmaGemm(gemm, target));
            })
            .Case([&](tessera::PagedDecodeOp decode) -> LogicalResult {
              if (failed(checkKvFormat(decode, target))) return failure();
              FailureOr<KernelSet> set = generatePagedDecode(decode, target);
              if (failed(set)) return failure();
              recordKernelSet(*set);
              decode.erase();
              return success();
            })
            .Case([&](tessera::AttnCombineOp combine) {
              return plainKernel(combine, combine.getSymName(), generateAttnCombine(combine, target));
            })
            .Case([&](tessera::FlashAttnOp attn) -> LogicalResult {
              if (failed(generateFlashAttnForTarget(attn, target))) return failure();
              attn.erase();
              return success();
            })
            .Case([&](tessera::FlashAttnBwdOp bwd) -> LogicalResult {
              FailureOr<KernelSet> set = generateFlashAttnBwd(bwd, target);
              if (failed(set)) return failure();
              recordKernelSet(*set);
              bwd.erase();
              return success();
            })
            .Default([&](Operation *other) {
              return other->emitOpError() << "is not a directive tessera-generate-kernels expands";
            });
    ok &= succeeded(result);
  }
  if (!ok) return failure();
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), UnitAttr::get(module.getContext()));
  return success();
}

} // namespace tessera

namespace {
struct GenerateKernelsPass
    : tessera::impl::TesseraGenerateKernelsBase<GenerateKernelsPass> {
  using TesseraGenerateKernelsBase::TesseraGenerateKernelsBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const tessera::TargetInfo *info = tessera::lookupTarget(target);
    if (!info) {
      module.emitError() << "unknown target '" << target
                         << "'; known targets: " << tessera::knownTargetNames();
      return signalPassFailure();
    }
    if (failed(tessera::generateKernels(module, *info))) return signalPassFailure();
    // Fold the generators' constants and shared index math so the kernel IR reads cleanly; as a
    // nested pipeline the kernels' modules are cleaned in parallel.
    OpPassManager cleanup(ModuleOp::getOperationName());
    OpPassManager &perKernel = cleanup.nest<gpu::GPUModuleOp>();
    perKernel.addPass(createCanonicalizerPass());
    perKernel.addPass(createCSEPass());
    if (failed(runPipeline(cleanup, module))) return signalPassFailure();
  }
};
} // namespace

// Bundle writing: generate, compile and record every kernel, then publish the directory whole.
#include "tessera/Compile/Compile.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Dialect/Tessera/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Threading.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;
namespace json = llvm::json;

namespace tessera {
namespace {

json::Value attrToJson(Attribute attr) {
  if (auto t = dyn_cast<TypeAttr>(attr)) {
    std::string s;
    llvm::raw_string_ostream(s) << t.getValue();
    return s;
  }
  if (isa<UnitAttr>(attr)) return true;
  if (auto b = dyn_cast<BoolAttr>(attr)) return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(attr)) return i.getInt();
  if (auto m = dyn_cast<tessera::MaskKindAttr>(attr))
    return tessera::stringifyMaskKind(m.getValue()).str();
  if (auto s = dyn_cast<tessera::KVScaleAttr>(attr))
    return tessera::stringifyKVScale(s.getValue()).str();
  if (auto t = dyn_cast<tessera::TileConfigAttr>(attr))
    return json::Object{{"m", t.getM()}, {"n", t.getN()}, {"k", t.getK()},
                        {"waves", t.getWaves()}, {"stages", t.getStages()}};
  std::string s;
  llvm::raw_string_ostream(s) << attr;
  return s;
}

std::string typeName(Type t) {
  if (auto m = dyn_cast<MemRefType>(t)) t = m.getElementType();
  std::string s;
  llvm::raw_string_ostream(s) << t;
  return s;
}

json::Value optionalInt(std::optional<int> v) { return v ? json::Value(*v) : json::Value(nullptr); }

/// Bytes of the kernel's workgroup (LDS / shared memory) attributions.
int workgroupBytes(gpu::GPUFuncOp func) {
  int64_t bytes = 0;
  for (BlockArgument a : func.getWorkgroupAttributions()) {
    auto type = cast<MemRefType>(a.getType());
    bytes += type.getNumElements() * type.getElementTypeBitWidth() / 8;
  }
  return int(bytes);
}

json::Value registersJson(const TargetInfo &target, const KernelResources &r) {
  if (!target.isAMD()) return json::Object{{"regs", optionalInt(r.vgpr)}};
  return json::Object{{"vgpr", optionalInt(r.vgpr)}, {"agpr", optionalInt(r.agpr)},
                      {"sgpr", optionalInt(r.sgpr)}};
}

json::Value spillsJson(const TargetInfo &target, const KernelResources &r) {
  if (!target.isAMD())
    return json::Object{{"store_bytes", optionalInt(r.vgprSpills)},
                        {"load_bytes", optionalInt(r.sgprSpills)}};
  return json::Object{{"vgpr", optionalInt(r.vgprSpills)}, {"sgpr", optionalInt(r.sgprSpills)}};
}

/// tessera.workspaces, `[{"arg", "bytes", "zero"}]`, by argument name; an error names the kernel.
FailureOr<std::map<std::string, json::Object>> workspaceSpecs(gpu::GPUFuncOp func) {
  std::map<std::string, json::Object> specs;
  auto text = func->getAttrOfType<StringAttr>(TesseraDialect::getWorkspacesAttrName());
  if (!text) return specs;
  llvm::Expected<json::Value> parsed = json::parse(text.getValue());
  json::Array *list = parsed ? parsed->getAsArray() : nullptr;
  if (!list) {
    if (!parsed) llvm::consumeError(parsed.takeError());
    return func.emitError() << "'tessera.workspaces' must be a JSON list of {\"arg\", \"bytes\", \"zero\"}";
  }
  for (json::Value &v : *list) {
    json::Object *spec = v.getAsObject();
    std::optional<StringRef> arg = spec ? spec->getString("arg") : std::nullopt;
    if (!arg || !spec->get("bytes"))
      return func.emitError() << "each 'tessera.workspaces' entry needs \"arg\" and \"bytes\"";
    specs[arg->str()] = std::move(*spec);
  }
  return specs;
}

/// The manifest entry of one kernel, from the tessera.* attributes its generator recorded.
FailureOr<json::Object> kernelEntry(gpu::GPUFuncOp func, const TargetInfo &target,
                                    const CompiledKernel &compiled, StringRef codeObjectFile,
                                    StringRef isaFile) {
  std::string name = func.getName().str();
  json::Object attrs;
  if (auto dict = func->getAttrOfType<DictionaryAttr>(TesseraDialect::getAttributesAttrName()))
    for (NamedAttribute a : dict) attrs[a.getName().str()] = attrToJson(a.getValue());
  json::Array args;
  auto names = func->getAttrOfType<ArrayAttr>(TesseraDialect::getArgNamesAttrName());
  auto roles = func->getAttrOfType<ArgRolesAttr>(TesseraDialect::getArgRolesAttrName());
  // Hand-written kernel IR (no generator signature) gets positional names and role param.
  auto argName = [&](size_t i) {
    return names && i < names.size() ? cast<StringAttr>(names[i]).str() : "arg" + std::to_string(i);
  };
  auto role = [&](size_t i) {
    return roles && i < roles.getRoles().size() ? roles.getRoles()[i] : ArgRole::Param;
  };
  FailureOr<std::map<std::string, json::Object>> workspaces = workspaceSpecs(func);
  if (failed(workspaces)) return failure();
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    json::Object arg{{"name", argName(i)}, {"role", argRoleName(role(i))}};
    auto spec = workspaces->find(argName(i));
    if (role(i) == ArgRole::Workspace) {
      if (spec == workspaces->end())
        return func.emitError() << "kernel '" << func.getName() << "': workspace argument '" << argName(i)
                                << "' has no 'tessera.workspaces' entry (its size in bytes)";
      arg["bytes"] = std::move(*spec->second.get("bytes"));
      arg["zero"] = spec->second.getBoolean("zero").value_or(false);
      workspaces->erase(spec);
    }
    if (isa<MemRefType>(type)) {
      arg["type"] = "ptr";
      arg["dtype"] = typeName(type);
    } else if (role(i) == ArgRole::TensorMap) {
      arg["type"] = "tensor_map";
    } else {
      arg["type"] = type.isIndex() ? "i64" : typeName(type);
    }
    args.push_back(std::move(arg));
  }
  auto gridAttr = func->getAttrOfType<StringAttr>(TesseraDialect::getGridAttrName());
  auto grid = json::parse(gridAttr ? gridAttr.str() : "null");
  auto directive = func->getAttrOfType<StringAttr>(TesseraDialect::getDirectiveAttrName());
  auto block = func.getKnownBlockSizeAttr();
  KernelResources r = compiled.resources;
  if (!r.ldsBytes) r.ldsBytes = workgroupBytes(func);
  int waves = block[0] / target.waveSize;
  std::optional<int> occupancy;
  if (r.vgpr && r.ldsBytes)
    occupancy = target.occupancy(*r.vgpr + r.agpr.value_or(0), *r.ldsBytes, waves);
  json::Object entry{
      {"name", name},
      {"directive", directive ? directive.str() : "gpu.func"},
      {"attributes", std::move(attrs)},
      {"entry", name},
      {"code_object", codeObjectFile.str()},
      {"isa", isaFile.str()},
      {"kernel_ir", name + ".kernel.mlir"},
      {"block", json::Array{block[0], block[1], block[2]}},
      {"grid", grid ? std::move(*grid) : json::Value(nullptr)},
      {"lds_bytes", optionalInt(r.ldsBytes)},
      {"registers", registersJson(target, r)},
      {"spills", spillsJson(target, r)},
      {"scratch_bytes", optionalInt(r.scratchBytes)},
      {"occupancy_waves_per_simd", optionalInt(occupancy)},
      {"args", std::move(args)},
  };
  if (auto dynamic =
          func->getAttrOfType<IntegerAttr>(TesseraDialect::getDynamicLdsBytesAttrName()))
    entry["dynamic_lds_bytes"] = dynamic.getInt();
  for (const char *key : {"tensor_maps", "divisible"})
    if (auto text = func->getAttrOfType<StringAttr>(std::string("tessera.") + key))
      if (auto parsed = json::parse(text.getValue())) entry[key] = std::move(*parsed);
  for (const char *key : {"fallback", "portable_twin", "twin_of"})
    if (auto value = func->getAttrOfType<StringAttr>(std::string("tessera.") + key))
      entry[key] = value.str();
  if (!workspaces->empty())
    return func.emitError() << "kernel '" << func.getName() << "': 'tessera.workspaces' names '"
                            << workspaces->begin()->first << "', which is not a workspace argument";
  return entry;
}

/// The manifest's "kernel_sets", from the kernels' #tessera.kernel_set: each set's kernels in
/// launch order (positions 0..n-1, once each), its directive and attributes those of its first.
FailureOr<json::Array> kernelSets(SmallVectorImpl<gpu::GPUFuncOp> &funcs,
                                   const std::vector<json::Object> &entries) {
  std::map<std::string, std::map<int64_t, size_t>> sets; // name -> position -> kernel
  std::vector<std::string> order;                         // set names, by first kernel
  for (auto [i, func] : llvm::enumerate(funcs)) {
    auto member = func->getAttrOfType<KernelSetAttr>(TesseraDialect::getKernelSetAttrName());
    if (!member) continue;
    std::string name = member.getName().str();
    if (!sets.count(name)) order.push_back(name);
    if (!sets[name].emplace(member.getPosition(), i).second)
      return func.emitError() << "kernels '" << funcs[sets[name][member.getPosition()]].getName()
                              << "' and '" << func.getName() << "' are both at position "
                              << member.getPosition() << " of kernel set '" << name << "'";
  }
  json::Array out;
  for (const std::string &name : order) {
    const std::map<int64_t, size_t> &members = sets[name];
    json::Array kernels;
    int64_t expected = 0;
    for (auto [position, i] : members) {
      if (position != expected++)
        return funcs[i].emitError() << "kernel set '" << name << "' has " << members.size()
                                    << " kernels but '" << funcs[i].getName() << "' is at position "
                                    << position << " (positions run from 0 to " << members.size() - 1 << ")";
      kernels.push_back(entries[i].getString("name")->str()); // owned: the entries move on
    }
    const json::Object &first = entries[members.begin()->second];
    out.push_back(json::Object{{"name", name},
                               {"directive", *first.get("directive")},
                               {"attributes", *first.get("attributes")},
                               {"kernels", std::move(kernels)}});
  }
  return out;
}

LogicalResult writeFile(Location loc, StringRef path, StringRef data) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (!ec) os << data;
  if (ec || os.has_error())
    return emitError(loc) << "cannot write " << path << ": " << ec.message();
  return success();
}

/// Replaces `dir` by the fully written `staging` directory.
LogicalResult publish(Location loc, StringRef staging, StringRef dir) {
  std::string old = (dir + ".old." + llvm::Twine(llvm::sys::Process::getProcessId())).str();
  bool hadOld = llvm::sys::fs::exists(dir);
  if (hadOld && llvm::sys::fs::rename(dir, old))
    return emitError(loc) << "cannot replace the existing " << dir;
  if (std::error_code ec = llvm::sys::fs::rename(staging, dir)) {
    if (hadOld) (void)llvm::sys::fs::rename(old, dir);
    return emitError(loc) << "cannot create " << dir << ": " << ec.message();
  }
  if (hadOld) (void)llvm::sys::fs::remove_directories(old);
  return success();
}

std::string printKernelIR(gpu::GPUModuleOp module) {
  OpBuilder b(module.getContext());
  OwningOpRef<ModuleOp> wrapper = ModuleOp::create(module.getLoc());
  (*wrapper)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  wrapper->getBody()->push_back(module.clone());
  std::string text;
  llvm::raw_string_ostream os(text);
  wrapper->print(os);
  return text;
}

} // namespace

/// Appends and loads what a kernel's lowering pipeline depends on, as running it first would.
static void loadLoweringDialects(MLIRContext *context, const TargetInfo &target) {
  OpPassManager lowering(gpu::GPUModuleOp::getOperationName());
  if (target.isAMD())
    buildROCDLLoweringPipeline(lowering, target.chip);
  else
    buildNVVMLoweringPipeline(lowering);
  DialectRegistry registry;
  lowering.getDependentDialects(registry);
  context->appendDialectRegistry(registry);
  for (StringRef name : registry.getDialectNames()) context->getOrLoadDialect(name);
}

LogicalResult compileToBundle(ModuleOp module, const TargetInfo &target, StringRef outDir) {
  Location loc = module.getLoc();
  PassManager generate(module.getContext());
  generate.addPass(tessera::createTesseraGenerateKernels({target.chip}));
  if (failed(generate.run(module))) return failure();

  llvm::SmallString<256> staging(outDir);
  staging += ".tmp." + std::to_string(llvm::sys::Process::getProcessId());
  (void)llvm::sys::fs::remove_directories(staging);
  if (std::error_code ec = llvm::sys::fs::create_directories(staging))
    return emitError(loc) << "cannot create " << staging << ": " << ec.message();
  auto fail = [&] {
    (void)llvm::sys::fs::remove_directories(staging);
    return failure();
  };
  auto inStaging = [&](const std::string &file) {
    llvm::SmallString<256> p(staging);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };

  // Each kernel is lowered from a copy in a module of its own, the kernels in parallel: one
  // kernel's lowering and code generation share nothing with another's once the dialects the
  // lowering needs are loaded (loading is not thread-safe). lld's hsaco links run after all of
  // them, one at a time (lld resets the process's llvm::cl options).
  loadLoweringDialects(module.getContext(), target);
  struct Job {
    gpu::GPUFuncOp func;
    std::string kernelIR;
    OwningOpRef<ModuleOp> copy;
    FailureOr<CompiledKernel> compiled = failure();
  };
  std::vector<Job> jobs;
  for (gpu::GPUModuleOp gpuModule : module.getOps<gpu::GPUModuleOp>()) {
    auto funcs = gpuModule.getOps<gpu::GPUFuncOp>();
    if (!llvm::hasSingleElement(funcs)) {
      emitError(gpuModule.getLoc())
          << "gpu.module '" << gpuModule.getName() << "' must hold exactly one gpu.func";
      return fail();
    }
    gpu::GPUFuncOp func = *funcs.begin();
    if (!func.getKnownBlockSizeAttr()) {
      func.emitError() << "kernel '" << func.getName()
                       << "' needs a known_block_size attribute: the runtime launches with it";
      return fail();
    }
    // Lower a copy so the recorded signature stays readable from `func`.
    OwningOpRef<ModuleOp> copy = ModuleOp::create(gpuModule.getLoc());
    (*copy)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                     UnitAttr::get(module.getContext()));
    copy->getBody()->push_back(gpuModule.clone());
    jobs.push_back({func, printKernelIR(gpuModule), std::move(copy)});
  }
  auto compile = [&](Job &job) {
    auto lowered = *job.copy->getOps<gpu::GPUModuleOp>().begin();
    job.compiled = target.isAMD() ? compileAMDGPUModule(lowered, target)
                                  : compileNVPTXModule(lowered, target);
    return success(succeeded(job.compiled));
  };
  if (failed(failableParallelForEach(module.getContext(), jobs, compile))) return fail();

  std::vector<json::Object> kernels;
  SmallVector<gpu::GPUFuncOp> kernelFuncs;
  for (Job &job : jobs) {
    CompiledKernel &compiled = *job.compiled;
    if (target.isAMD()) {
      FailureOr<std::string> hsaco = linkHsaco(job.func.getLoc(), compiled.codeObject);
      if (failed(hsaco)) return fail();
      compiled.codeObject = std::move(*hsaco);
    }
    std::string name = job.func.getName().str();
    // PTX is both the code object and the text to review: one file.
    std::string codeObjectFile = name + (target.isAMD() ? ".hsaco" : ".ptx");
    std::string isaFile = target.isAMD() ? name + ".s" : codeObjectFile;
    if (failed(writeFile(loc, inStaging(codeObjectFile), compiled.codeObject)) ||
        (target.isAMD() && failed(writeFile(loc, inStaging(isaFile), compiled.isa))) ||
        failed(writeFile(loc, inStaging(name + ".kernel.mlir"), job.kernelIR)))
      return fail();
    FailureOr<json::Object> entry =
        kernelEntry(job.func, target, compiled, codeObjectFile, isaFile);
    if (failed(entry)) return fail();
    kernels.push_back(std::move(*entry));
    kernelFuncs.push_back(job.func);
  }
  FailureOr<json::Array> sets = kernelSets(kernelFuncs, kernels);
  if (failed(sets)) return fail();
  json::Array kernelList;
  for (json::Object &k : kernels) kernelList.push_back(std::move(k));
  json::Object manifest{
      {"format", "tessera-bundle"},
      {"version", 1},
      {"target", target.chip},
      {"vendor", target.isAMD() ? "amd" : "nvidia"},
      {"code_object_format", target.isAMD() ? "hsaco" : "ptx"},
      {"code_object_version", kCodeObjectVersion},
      {"compiler", "tessera 0.1.0 (LLVM " LLVM_VERSION_STRING ")"},
      {"kernels", std::move(kernelList)},
  };
  // Only bundles with kernel sets have the field: other manifests stay as they were.
  if (!sets->empty()) manifest["kernel_sets"] = std::move(*sets);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", json::Value(std::move(manifest))) << "\n";
  if (failed(writeFile(loc, inStaging("manifest.json"), text))) return fail();
  if (failed(publish(loc, staging, outDir))) return fail();
  return success();
}

} // namespace tessera

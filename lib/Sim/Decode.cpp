// Decoding kernel IR into the simulator's instruction form: parsing, values and control flow, kernel signatures.
//
// Every supported operation becomes one Inst over value slots (the per-operation decoders are in
// DecodeOps.cpp); anything outside the kernel-IR contract (docs/simulator.md) is collected and
// reported with its name and location before anything runs. Only Decode.cpp and DecodeOps.cpp
// include MLIR.
#include "Decoder.h"

#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace mlir;

namespace tessera::sim::detail {

std::optional<ElemKind> elemKindOf(Type t) {
  if (isa<IndexType>(t))
    return ElemKind::I64;
  if (auto i = dyn_cast<IntegerType>(t)) {
    switch (i.getWidth()) {
    case 1: return ElemKind::I1;
    case 8: return ElemKind::I8;
    case 16: return ElemKind::I16;
    case 32: return ElemKind::I32;
    case 64: return ElemKind::I64;
    default: return std::nullopt;
    }
  }
  return TypeSwitch<Type, std::optional<ElemKind>>(t)
      .Case([](Float16Type) { return ElemKind::F16; })
      .Case([](BFloat16Type) { return ElemKind::BF16; })
      .Case([](Float32Type) { return ElemKind::F32; })
      .Case([](Float64Type) { return ElemKind::F64; })
      .Case([](Float8E4M3FNType) { return ElemKind::F8E4M3FN; })
      .Case([](Float8E4M3FNUZType) { return ElemKind::F8E4M3FNUZ; })
      .Case([](Float8E5M2Type) { return ElemKind::F8E5M2; })
      .Case([](Float8E5M2FNUZType) { return ElemKind::F8E5M2FNUZ; })
      .Default([](Type) { return std::nullopt; });
}

std::optional<ValueShape> shapeOf(Type t) {
  if (auto k = elemKindOf(t))
    return ValueShape{*k, 1, {}};
  if (auto v = dyn_cast<VectorType>(t)) {
    auto k = elemKindOf(v.getElementType());
    if (!k || v.isScalable())
      return std::nullopt;
    return ValueShape{*k, uint32_t(v.getNumElements()), SmallVector<int64_t>(v.getShape())};
  }
  if (auto s = dyn_cast<LLVM::LLVMStructType>(t)) {
    std::optional<ValueShape> all;
    for (Type member : s.getBody()) {
      auto m = shapeOf(member);
      if (!m || (all && all->kind != m->kind))
        return std::nullopt;
      if (!all)
        all = ValueShape{m->kind, 0, {}};
      all->count += m->count;
    }
    return all;
  }
  return std::nullopt;
}

std::string locString(Location loc) {
  if (auto f = loc->findInstanceOf<FileLineColLoc>())
    return (f.getFilename().str() + ":" + std::to_string(f.getLine()) + ":" + std::to_string(f.getColumn()));
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

namespace {

/// The tessera.attributes dictionary as JSON (types as MLIR spells them, unit attributes true).
llvm::json::Value attrToJson(Attribute a) {
  if (isa<UnitAttr>(a))
    return true;
  if (auto b = dyn_cast<BoolAttr>(a))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(a))
    return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(a))
    return s.getValue().str();
  if (auto t = dyn_cast<TypeAttr>(a))
    return typeString(t.getValue());
  if (auto d = dyn_cast<DictionaryAttr>(a)) {
    llvm::json::Object o;
    for (NamedAttribute n : d)
      o[n.getName().str()] = attrToJson(n.getValue());
    return llvm::json::Value(std::move(o));
  }
  if (auto arr = dyn_cast<ArrayAttr>(a)) {
    llvm::json::Array out;
    for (Attribute e : arr)
      out.push_back(attrToJson(e));
    return llvm::json::Value(std::move(out));
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  a.print(os);
  return s;
}

} // namespace

// ---- Values and instructions -------------------------------------------------------------------

void Decoder::problem(Operation *op, const Twine &what) {
  problemList.push_back(locString(op->getLoc()) + ": error: " + what.str());
}

void Decoder::unsupported(Operation *op, const Twine &detail) {
  problem(op, "unsupported operation '" + op->getName().getStringRef() + "'" +
                  (detail.isTriviallyEmpty() ? Twine("") : Twine(": ") + detail) +
                  " (the simulator runs the kernel-IR subset of docs/simulator.md)");
}

int32_t Decoder::site(Operation *op) {
  auto [it, inserted] = siteOf.try_emplace(op, int32_t(P.sites.size()));
  if (inserted)
    P.sites.push_back({locString(op->getLoc()), op->getName().getStringRef().str()});
  return it->second;
}

int32_t Decoder::newSlot(ElemKind kind, uint32_t count) {
  P.slots.push_back({kind, count, P.cellRows});
  P.cellRows += count;
  return int32_t(P.slots.size() - 1);
}

int32_t Decoder::def(Value v, Operation *owner) {
  auto s = shapeOf(v.getType());
  if (!s) {
    problem(owner, "value of type " + typeString(v.getType()) + " is not supported");
    s = ValueShape{ElemKind::I64, 1, {}};
  }
  int32_t slot = newSlot(s->kind, s->count);
  slotOf[v] = slot;
  return slot;
}

int32_t Decoder::use(Value v) {
  auto it = slotOf.find(v);
  if (it != slotOf.end())
    return it->second;
  // Only reachable after a reported problem (a value made by a rejected op).
  return slotOf[v] = newSlot(ElemKind::I64, 1);
}

Inst Decoder::make(Operation *op, Op code) {
  Inst I;
  I.op = code;
  I.site = site(op);
  return I;
}

Inst Decoder::elementwise(Operation *op, Op code) {
  Inst I = make(op, code);
  for (Value v : op->getOperands())
    I.in.push_back(use(v));
  I.srcKind = P.slots[I.in[0]].kind;
  I.out.push_back(def(op->getResult(0), op));
  I.kind = P.slots[I.out[0]].kind;
  I.count = P.slots[I.out[0]].count;
  return I;
}

Inst Decoder::compare(Operation *op, Op code, int64_t predicate) {
  Inst I = elementwise(op, code);
  I.kind = I.srcKind;
  I.imm = predicate;
  return I;
}

Inst Decoder::mathUnary(Operation *op, MathFn fn) {
  Inst I = elementwise(op, Op::MathUnary);
  I.imm = int64_t(fn);
  return I;
}

Inst Decoder::gather(Operation *op, ValueRange operands, ValueRange results, ArrayRef<int64_t> source) {
  Inst I = make(op, Op::Gather);
  std::vector<std::pair<int32_t, uint32_t>> in, out;
  for (Value v : operands)
    for (uint32_t e = 0; e < slot(v).count; ++e)
      in.push_back({use(v), e});
  for (Value v : results) {
    int32_t s = def(v, op);
    for (uint32_t e = 0; e < P.slots[s].count; ++e)
      out.push_back({s, e});
  }
  for (size_t j = 0; j < out.size() && j < source.size(); ++j) {
    if (source[j] < 0 || size_t(source[j]) >= in.size())
      continue; // a poison lane of vector.shuffle: left unwritten
    I.list.insert(I.list.end(), {in[source[j]].first, in[source[j]].second, out[j].first, out[j].second});
  }
  return I;
}

Inst Decoder::constant(Operation *op, Value result, std::vector<Cell> cells) {
  int32_t s = def(result, op);
  cells.resize(P.slots[s].count, cells.empty() ? Cell{0} : cells.back());
  P.constants.push_back({s, std::move(cells)});
  return make(op, Op::Nop);
}

// ---- Structured control flow -------------------------------------------------------------------

Inst Decoder::yield(Operation *op, ValueRange values, const YieldTargets &targets, bool condition) {
  Inst I = make(op, condition ? Op::Condition : Op::Yield);
  for (Value v : values)
    I.in.push_back(use(v));
  size_t first = condition ? 1 : 0;
  I.out = targets.dest;
  I.aux = targets.dest2;
  if (I.out.size() != I.in.size() - first)
    problem(op, "terminator operands do not match the enclosing operation");
  // A loop may yield its own iteration arguments in another order (a swap): copy through a
  // temporary then.
  for (size_t i = first; i < I.in.size(); ++i)
    for (size_t j = 0; j < I.out.size(); ++j)
      if (I.in[i] == I.out[j] && i - first != j)
        I.imm = 1;
  return I;
}

Inst Decoder::decodeIf(scf::IfOp op) {
  Inst I = make(op, Op::If);
  I.in.push_back(use(op.getCondition()));
  YieldTargets targets;
  for (Value r : op.getResults())
    targets.dest.push_back(def(r, op));
  I.out = targets.dest;
  I.region = decodeBlock(*op.thenBlock(), targets);
  if (Block *elseBlock = op.elseBlock())
    I.region2 = decodeBlock(*elseBlock, targets);
  return I;
}

Inst Decoder::decodeFor(scf::ForOp op) {
  Inst I = make(op, Op::For);
  I.in = {use(op.getLowerBound()), use(op.getUpperBound()), use(op.getStep())};
  for (Value v : op.getInitArgs())
    I.in.push_back(use(v));
  I.aux.push_back(def(op.getInductionVar(), op));
  I.kind = P.slots[I.aux[0]].kind;
  I.imm = op.getUnsignedCmp();
  YieldTargets targets;
  for (Value arg : op.getRegionIterArgs())
    targets.dest.push_back(def(arg, op));
  I.aux.insert(I.aux.end(), targets.dest.begin(), targets.dest.end());
  for (Value r : op.getResults())
    I.out.push_back(def(r, op));
  I.region = decodeBlock(*op.getBody(), targets);
  return I;
}

Inst Decoder::decodeWhile(scf::WhileOp op) {
  Inst I = make(op, Op::While);
  for (Value v : op.getInits())
    I.in.push_back(use(v));
  YieldTargets before, after;
  for (Value arg : op.getBeforeArguments())
    after.dest.push_back(def(arg, op)); // the after region's yield feeds the before arguments
  I.aux = after.dest;
  for (Value arg : op.getAfterArguments())
    before.dest.push_back(def(arg, op));
  for (Value r : op.getResults())
    before.dest2.push_back(def(r, op));
  I.out = before.dest2;
  I.region = decodeBlock(op.getBefore().front(), before);
  I.region2 = decodeBlock(op.getAfter().front(), after);
  I.imm2 = use(op.getConditionOp().getCondition());
  return I;
}

void Decoder::decodeOp(Operation *op, std::vector<Inst> &out, const YieldTargets &targets) {
  if (auto y = dyn_cast<scf::YieldOp>(op)) {
    out.push_back(yield(op, y.getResults(), targets, false));
    return;
  }
  if (auto c = dyn_cast<scf::ConditionOp>(op)) {
    SmallVector<Value> values{c.getCondition()};
    values.append(c.getArgs().begin(), c.getArgs().end());
    out.push_back(yield(op, values, targets, true));
    return;
  }
  if (isa<gpu::ReturnOp>(op))
    return;
  if (auto i = dyn_cast<scf::IfOp>(op)) {
    out.push_back(decodeIf(i));
    return;
  }
  if (auto f = dyn_cast<scf::ForOp>(op)) {
    out.push_back(decodeFor(f));
    return;
  }
  if (auto w = dyn_cast<scf::WhileOp>(op)) {
    out.push_back(decodeWhile(w));
    return;
  }
  size_t problemsBefore = problemList.size();
  std::optional<Inst> inst;
  for (auto decode : {&Decoder::decodeArith, &Decoder::decodeMath, &Decoder::decodeVector, &Decoder::decodeMemory,
                      &Decoder::decodeGpu, &Decoder::decodeMatrix, &Decoder::decodeLLVM}) {
    if ((inst = (this->*decode)(op)) || problemList.size() != problemsBefore)
      break;
  }
  if (!inst) {
    if (problemList.size() == problemsBefore)
      unsupported(op);
    // Keep decoding: give its results slots so later uses do not cascade into more reports.
    for (Value r : op->getResults())
      if (!slotOf.count(r))
        slotOf[r] = newSlot(ElemKind::I64, 1);
    return;
  }
  if (inst->op != Op::Nop)
    out.push_back(std::move(*inst));
}

int32_t Decoder::decodeBlock(Block &block, const YieldTargets &targets) {
  // Regions may be appended while this one is decoded: fill a local list, then store it.
  int32_t index = int32_t(P.regions.size());
  P.regions.emplace_back();
  std::vector<Inst> insts;
  for (Operation &op : block)
    decodeOp(&op, insts, targets);
  P.regions[index].insts = std::move(insts);
  return index;
}

void Decoder::decodeFunction(gpu::GPUFuncOp func) {
  KernelInfo &info = P.info;
  info.name = func.getName().str();
  auto names = func->getAttrOfType<ArrayAttr>(TesseraDialect::getArgNamesAttrName());
  auto roles = func->getAttrOfType<ArgRolesAttr>(TesseraDialect::getArgRolesAttrName());
  if (auto d = func->getAttrOfType<StringAttr>(TesseraDialect::getDirectiveAttrName()))
    info.directive = d.getValue().str();
  if (auto g = func->getAttrOfType<StringAttr>(TesseraDialect::getGridAttrName()))
    info.gridJson = g.getValue().str();
  llvm::json::Value attrs = llvm::json::Object();
  if (auto a = func->getAttrOfType<DictionaryAttr>(TesseraDialect::getAttributesAttrName()))
    attrs = attrToJson(a);
  info.attributesJson = llvm::formatv("{0}", attrs).str();
  if (auto known = func.getKnownBlockSizeAttr())
    for (int d = 0; d < 3 && d < int(known.size()); ++d)
      info.knownBlock[d] = uint32_t(known[d]);

  if (!func.getPrivateAttributions().empty())
    problem(func, "private memory attributions are not supported");
  if (func.getBody().getBlocks().size() != 1)
    problem(func, "kernels with unstructured control flow (more than one block) are not supported");

  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    BlockArgument arg = func.getArgument(i);
    ParamInfo param;
    param.name = names && i < names.size() ? cast<StringAttr>(names[i]).getValue().str() : "arg" + std::to_string(i);
    if (roles && i < roles.getRoles().size())
      param.role = roles.getRoles()[i];
    int32_t slot = -1, binding = -1;
    if (auto m = dyn_cast<MemRefType>(arg.getType())) {
      param.kind = ParamInfo::Kind::Buffer;
      param.elem = elemKindOf(m.getElementType()).value_or(ElemKind::I8);
      binding = int32_t(P.bindings.size());
      P.bindings.push_back({Binding::Space::Global, param.name, 0, int(i)});
      bindMemref(arg, binding, m, func);
    } else {
      param.kind = ParamInfo::Kind::Scalar;
      param.isIndex = isa<IndexType>(arg.getType());
      slot = def(arg, func);
      param.elem = P.slots[slot].kind;
      if (P.slots[slot].count != 1)
        problem(func, "vector kernel arguments are not supported");
    }
    info.params.push_back(param);
    P.paramSlot.push_back(slot);
    P.paramBinding.push_back(binding);
  }
  int index = 0;
  for (BlockArgument arg : func.getWorkgroupAttributions()) {
    auto m = cast<MemRefType>(arg.getType());
    auto kind = elemKindOf(m.getElementType());
    if (!m.hasStaticShape() || !kind) {
      problem(func, "workgroup attribution of type " + typeString(m) + " is not supported");
      continue;
    }
    uint64_t bytes = uint64_t(m.getNumElements()) * storageBytes(*kind);
    P.bindings.push_back({Binding::Space::Workgroup,
                          "workgroup buffer #" + std::to_string(index++) + " (" + typeString(m) + ")", bytes, -1});
    info.staticLdsBytes += bytes;
    bindMemref(arg, int32_t(P.bindings.size() - 1), m, func);
  }
  P.entry = decodeBlock(func.getBody().front(), YieldTargets{});
}
namespace {

/// The chip of the gpu.module's target attribute, or "".
std::string moduleChip(gpu::GPUModuleOp module) {
  if (ArrayAttr targets = module.getTargetsAttr())
    for (Attribute t : targets) {
      if (auto r = dyn_cast<ROCDL::ROCDLTargetAttr>(t))
        return r.getChip().str();
      if (auto n = dyn_cast<NVVM::NVVMTargetAttr>(t))
        return n.getChip().str();
    }
  return "";
}

llvm::Error fail(const Twine &message) { return llvm::createStringError(llvm::inconvertibleErrorCode(), message); }

} // namespace

llvm::Expected<std::unique_ptr<Program>> decodeProgram(llvm::StringRef source, llvm::StringRef bufferName,
                                                       const LoadOptions &options) {
  DialectRegistry registry;
  registry.insert<tessera::TesseraDialect, gpu::GPUDialect, amdgpu::AMDGPUDialect, ROCDL::ROCDLDialect,
                  NVVM::NVVMDialect, nvgpu::NVGPUDialect, LLVM::LLVMDialect, arith::ArithDialect, math::MathDialect,
                  memref::MemRefDialect, scf::SCFDialect, vector::VectorDialect, ub::UBDialect>();
  MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diagnostics += locString(d.getLocation()) + ": error: " + d.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, ParserConfig(&ctx), bufferName);
  if (!module)
    return fail("cannot parse kernel IR " + bufferName + ":\n" + diagnostics);

  std::vector<gpu::GPUFuncOp> kernels;
  module->walk([&](gpu::GPUFuncOp f) {
    if (f.isKernel())
      kernels.push_back(f);
  });
  std::string names;
  for (gpu::GPUFuncOp f : kernels)
    names += (names.empty() ? "" : ", ") + f.getName().str();
  gpu::GPUFuncOp func;
  for (gpu::GPUFuncOp f : kernels)
    if (options.kernel.empty() ? kernels.size() == 1 : f.getName() == options.kernel)
      func = f;
  if (!func)
    return fail(options.kernel.empty() ? bufferName + " holds " + std::to_string(kernels.size()) + " kernels (" +
                                             names + "): name the one to run"
                                       : bufferName + " has no kernel '" + options.kernel +
                                             "' (kernels: " + (names.empty() ? "none" : names) + ")");

  std::string chip = moduleChip(func->getParentOfType<gpu::GPUModuleOp>());
  if (!options.target.empty() && !chip.empty() && options.target != chip)
    return fail("kernel " + func.getName() + " was generated for " + chip + ", not " + options.target);
  if (chip.empty())
    chip = options.target;
  const TargetInfo *target = lookupTarget(chip);
  if (!target)
    return fail(chip.empty()
                    ? "kernel " + func.getName() + " names no target: give one (known: " + knownTargetNames() + ")"
                    : "unknown target '" + chip + "' (known: " + knownTargetNames() + ")");

  auto program = std::make_unique<Program>();
  program->info.target = chip;
  program->info.waveSize = target->waveSize;
  Decoder decoder(*program, *target);
  decoder.decodeFunction(func);
  if (std::string problems = decoder.problems(); !problems.empty())
    return fail(problems);
  return program;
}

} // namespace tessera::sim::detail

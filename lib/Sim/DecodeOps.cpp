// The per-operation decoders: arith, math, vector, memory, gpu, cross-lane, matrix and LLVM operations into Insts.
//
// Matrix operations are bound here to the vendor layouts of MatrixOps.cpp and checked against
// the instructions the simulated chip has.
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
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/TypeSwitch.h"

#include <numeric>

using namespace mlir;

namespace tessera::sim::detail {

// The simulator's enums mirror MLIR's numbering, so decoding is a cast.
static_assert(int(vector::CombiningKind::MINNUMF) == int(ReduceKind::MinNumF) &&
              int(vector::CombiningKind::MINIMUMF) == int(ReduceKind::MinimumF) &&
              int(vector::CombiningKind::MAXIMUMF) == int(ReduceKind::MaximumF));
static_assert(int(amdgpu::DPPPerm::wave_rol) == int(DppKind::WaveRol) &&
              int(amdgpu::DPPPerm::row_bcast_31) == int(DppKind::RowBcast31));

namespace {

/// Row-major strides of a shape.
SmallVector<int64_t> rowMajorStrides(ArrayRef<int64_t> dims) {
  SmallVector<int64_t> strides(dims.size(), 1);
  for (int d = int(dims.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dims[d + 1];
  return strides;
}

SmallVector<int64_t> intsOf(ArrayAttr list) {
  SmallVector<int64_t> ints;
  for (Attribute a : list)
    ints.push_back(cast<IntegerAttr>(a).getInt());
  return ints;
}

/// Coordinates of linear index `e` in `dims`.
SmallVector<int64_t> delinearize(int64_t e, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> c(dims.size());
  for (int d = int(dims.size()) - 1; d >= 0; --d) {
    c[d] = e % dims[d];
    e /= dims[d];
  }
  return c;
}

/// For each element of a result of shape `dims`, the linear index `index(coordinates)` of the
/// operand element it takes.
std::vector<int64_t> indexMap(ArrayRef<int64_t> dims, uint32_t count,
                              llvm::function_ref<int64_t(ArrayRef<int64_t>)> index) {
  std::vector<int64_t> source(count);
  for (int64_t e = 0; e < int64_t(count); ++e)
    source[e] = index(delinearize(e, dims));
  return source;
}

bool isWorkgroupMemory(MemRefType t) {
  if (auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(t.getMemorySpace()))
    return space.getValue() == gpu::AddressSpace::Workgroup;
  if (auto i = dyn_cast_or_null<IntegerAttr>(t.getMemorySpace()))
    return i.getInt() == 3;
  return false;
}

} // namespace

// ---- Constants and element-wise arithmetic ---------------------------------------------------

std::vector<Cell> Decoder::constantCells(Attribute value, ElemKind kind) {
  std::vector<Cell> cells;
  auto push = [&](Attribute a) {
    Cell c{0};
    if (auto i = dyn_cast<IntegerAttr>(a))
      c.i = signExtend(int64_t(i.getValue().getZExtValue()), bitWidth(kind));
    else if (auto f = dyn_cast<FloatAttr>(a))
      c.f = decodeFloat(f.getValue().bitcastToAPInt().getZExtValue(), kind);
    cells.push_back(c);
  };
  if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    if (dense.isSplat())
      push(dense.getSplatValue<Attribute>());
    else
      for (Attribute a : dense.getValues<Attribute>())
        push(a);
  } else {
    push(value);
  }
  return cells;
}

std::optional<Inst> Decoder::decodeArith(Operation *op) {
  using namespace arith;
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](ConstantOp o) -> std::optional<Inst> {
        auto s = shapeOf(o.getType());
        if (!s || (!isa<IntegerAttr, FloatAttr, DenseElementsAttr>(o.getValue()))) {
          unsupported(op, "constant of type " + typeString(o.getType()));
          return std::nullopt;
        }
        return constant(op, o.getResult(), constantCells(o.getValue(), s->kind));
      })
      .Case([&](AddIOp) { return elementwise(op, Op::AddI); })
      .Case([&](SubIOp) { return elementwise(op, Op::SubI); })
      .Case([&](MulIOp) { return elementwise(op, Op::MulI); })
      .Case([&](DivSIOp) { return elementwise(op, Op::DivSI); })
      .Case([&](DivUIOp) { return elementwise(op, Op::DivUI); })
      .Case([&](RemSIOp) { return elementwise(op, Op::RemSI); })
      .Case([&](RemUIOp) { return elementwise(op, Op::RemUI); })
      .Case([&](CeilDivSIOp) { return elementwise(op, Op::CeilDivSI); })
      .Case([&](CeilDivUIOp) { return elementwise(op, Op::CeilDivUI); })
      .Case([&](FloorDivSIOp) { return elementwise(op, Op::FloorDivSI); })
      .Case([&](AndIOp) { return elementwise(op, Op::AndI); })
      .Case([&](OrIOp) { return elementwise(op, Op::OrI); })
      .Case([&](XOrIOp) { return elementwise(op, Op::XOrI); })
      .Case([&](ShLIOp) { return elementwise(op, Op::ShLI); })
      .Case([&](ShRSIOp) { return elementwise(op, Op::ShRSI); })
      .Case([&](ShRUIOp) { return elementwise(op, Op::ShRUI); })
      .Case([&](MaxSIOp) { return elementwise(op, Op::MaxSI); })
      .Case([&](MinSIOp) { return elementwise(op, Op::MinSI); })
      .Case([&](MaxUIOp) { return elementwise(op, Op::MaxUI); })
      .Case([&](MinUIOp) { return elementwise(op, Op::MinUI); })
      .Case([&](CmpIOp o) { return compare(op, Op::CmpI, int64_t(o.getPredicate())); })
      .Case([&](CmpFOp o) { return compare(op, Op::CmpF, int64_t(o.getPredicate())); })
      .Case([&](ExtSIOp) { return elementwise(op, Op::ExtSI); })
      .Case([&](ExtUIOp) { return elementwise(op, Op::ExtUI); })
      .Case([&](TruncIOp) { return elementwise(op, Op::TruncI); })
      // index is i64 here: a cast widens (sign- or zero-extending) or truncates.
      .Case([&](IndexCastOp o) {
        Inst I = elementwise(op, Op::ExtSI);
        if (bitWidth(I.kind) < bitWidth(I.srcKind))
          I.op = Op::TruncI;
        return I;
      })
      .Case([&](IndexCastUIOp o) {
        Inst I = elementwise(op, Op::ExtUI);
        if (bitWidth(I.kind) < bitWidth(I.srcKind))
          I.op = Op::TruncI;
        return I;
      })
      .Case([&](AddFOp) { return elementwise(op, Op::AddF); })
      .Case([&](SubFOp) { return elementwise(op, Op::SubF); })
      .Case([&](MulFOp) { return elementwise(op, Op::MulF); })
      .Case([&](DivFOp) { return elementwise(op, Op::DivF); })
      .Case([&](RemFOp) { return elementwise(op, Op::RemF); })
      .Case([&](NegFOp) { return elementwise(op, Op::NegF); })
      .Case([&](MaxNumFOp) { return elementwise(op, Op::MaxNumF); })
      .Case([&](MinNumFOp) { return elementwise(op, Op::MinNumF); })
      .Case([&](MaximumFOp) { return elementwise(op, Op::MaximumF); })
      .Case([&](MinimumFOp) { return elementwise(op, Op::MinimumF); })
      .Case([&](ExtFOp) { return elementwise(op, Op::ExtF); })
      .Case([&](TruncFOp o) -> std::optional<Inst> {
        if (o.getRoundingmodeAttr() && o.getRoundingmode() != RoundingMode::to_nearest_even) {
          unsupported(op, "rounding modes other than to_nearest_even");
          return std::nullopt;
        }
        return elementwise(op, Op::TruncF);
      })
      .Case([&](SIToFPOp) { return elementwise(op, Op::SIToFP); })
      .Case([&](UIToFPOp) { return elementwise(op, Op::UIToFP); })
      .Case([&](FPToSIOp) { return elementwise(op, Op::FPToSI); })
      .Case([&](FPToUIOp) { return elementwise(op, Op::FPToUI); })
      .Case([&](BitcastOp) { return elementwise(op, Op::Bitcast); })
      .Case([&](SelectOp o) {
        Inst I = elementwise(op, Op::Select);
        I.imm = slot(o.getCondition()).count == 1 && I.count > 1;
        return I;
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<Inst> Decoder::decodeMath(Operation *op) {
  using namespace math;
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](Exp2Op) { return mathUnary(op, MathFn::Exp2); })
      .Case([&](ExpOp) { return mathUnary(op, MathFn::Exp); })
      .Case([&](ExpM1Op) { return mathUnary(op, MathFn::Expm1); })
      .Case([&](Log2Op) { return mathUnary(op, MathFn::Log2); })
      .Case([&](LogOp) { return mathUnary(op, MathFn::Log); })
      .Case([&](Log1pOp) { return mathUnary(op, MathFn::Log1p); })
      .Case([&](Log10Op) { return mathUnary(op, MathFn::Log10); })
      .Case([&](TanhOp) { return mathUnary(op, MathFn::Tanh); })
      .Case([&](SqrtOp) { return mathUnary(op, MathFn::Sqrt); })
      .Case([&](RsqrtOp) { return mathUnary(op, MathFn::Rsqrt); })
      .Case([&](AbsFOp) { return mathUnary(op, MathFn::Abs); })
      .Case([&](FloorOp) { return mathUnary(op, MathFn::Floor); })
      .Case([&](CeilOp) { return mathUnary(op, MathFn::Ceil); })
      .Case([&](RoundOp) { return mathUnary(op, MathFn::Round); })
      .Case([&](RoundEvenOp) { return mathUnary(op, MathFn::RoundEven); })
      .Case([&](TruncOp) { return mathUnary(op, MathFn::Trunc); })
      .Case([&](SinOp) { return mathUnary(op, MathFn::Sin); })
      .Case([&](CosOp) { return mathUnary(op, MathFn::Cos); })
      .Case([&](TanOp) { return mathUnary(op, MathFn::Tan); })
      .Case([&](AtanOp) { return mathUnary(op, MathFn::Atan); })
      .Case([&](ErfOp) { return mathUnary(op, MathFn::Erf); })
      .Case([&](SinhOp) { return mathUnary(op, MathFn::Sinh); })
      .Case([&](CoshOp) { return mathUnary(op, MathFn::Cosh); })
      .Case([&](AbsIOp) { return elementwise(op, Op::AbsI); })
      .Case([&](FmaOp) { return elementwise(op, Op::Fma); })
      .Case([&](CopySignOp) { return elementwise(op, Op::CopySign); })
      .Case([&](PowFOp) { return elementwise(op, Op::PowF); })
      .Default([](Operation *) { return std::nullopt; });
}

// ---- Vectors: data movement is decoded into Gather moves --------------------------------------

std::optional<Inst> Decoder::decodeVector(Operation *op) {
  using namespace vector;
  // Unsupported element types are reported when the result gets its slot.
  auto shape = [&](Value v) { return shapeOf(v.getType()).value_or(ValueShape{ElemKind::I64, 1, {1}}); };
  auto iota = [](int64_t n, int64_t from = 0) {
    std::vector<int64_t> v(n);
    std::iota(v.begin(), v.end(), from);
    return v;
  };
  // Static (offset, count) of a position prefix into a vector of `dims`.
  auto staticOffset = [](ArrayRef<int64_t> position, ArrayRef<int64_t> dims) {
    SmallVector<int64_t> strides = rowMajorStrides(dims);
    int64_t offset = 0;
    for (size_t d = 0; d < position.size(); ++d)
      offset += position[d] * strides[d];
    return offset;
  };
  // vector.extract/insert with dynamic positions: the `leading` operands, then the dynamic
  // indices; per position (static index or -1 for the next dynamic one, dimension size, stride).
  auto dynamicPosition = [&](Op code, ValueRange leading, ValueRange dynamic, ArrayRef<int64_t> staticPos,
                             ArrayRef<int64_t> dims, Value result, uint32_t count) {
    Inst I = make(op, code);
    for (ValueRange operands : {leading, dynamic})
      for (Value v : operands)
        I.in.push_back(use(v));
    SmallVector<int64_t> strides = rowMajorStrides(dims);
    for (size_t d = 0; d < staticPos.size(); ++d)
      I.list.insert(I.list.end(), {ShapedType::isDynamic(staticPos[d]) ? -1 : staticPos[d], dims[d], strides[d]});
    I.out.push_back(def(result, op));
    I.count = count;
    return I;
  };
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](BroadcastOp o) {
        ValueShape src = shape(o.getSource()), dst = shape(o.getResult());
        // Source dimensions align with the trailing result dimensions; size-1 ones stretch.
        size_t lead = dst.dims.size() - src.dims.size();
        SmallVector<int64_t> srcStrides = rowMajorStrides(src.dims);
        return gather(op, o->getOperands(), o->getResults(), indexMap(dst.dims, dst.count, [&](ArrayRef<int64_t> c) {
                        int64_t s = 0;
                        for (size_t d = 0; d < src.dims.size(); ++d)
                          s += (src.dims[d] == 1 ? 0 : c[lead + d]) * srcStrides[d];
                        return s;
                      }));
      })
      .Case(
          [&](FromElementsOp o) { return gather(op, o.getElements(), o->getResults(), iota(o.getElements().size())); })
      .Case([&](ToElementsOp o) { return gather(op, o->getOperands(), o.getElements(), iota(o.getElements().size())); })
      .Case([&](ShapeCastOp o) {
        return gather(op, o->getOperands(), o->getResults(), iota(shape(o.getResult()).count));
      })
      .Case([&](ShuffleOp o) {
        ValueShape v1 = shape(o.getV1());
        int64_t slice = v1.dims.size() > 1 ? v1.count / v1.dims[0] : 1;
        std::vector<int64_t> source;
        for (int64_t m : o.getMask())
          for (int64_t e = 0; e < slice; ++e)
            source.push_back(m == ShuffleOp::kPoisonIndex ? -1 : m * slice + e);
        return gather(op, o->getOperands(), o->getResults(), source);
      })
      .Case([&](ExtractOp o) -> std::optional<Inst> {
        ValueShape src = shape(o.getSource()), dst = shape(o.getResult());
        if (o.getDynamicPosition().empty())
          return gather(op, {o.getSource()}, o->getResults(),
                        iota(dst.count, staticOffset(o.getStaticPosition(), src.dims)));
        return dynamicPosition(Op::ExtractDyn, {o.getSource()}, o.getDynamicPosition(), o.getStaticPosition(), src.dims,
                               o.getResult(), dst.count);
      })
      .Case([&](InsertOp o) -> std::optional<Inst> {
        ValueShape dst = shape(o.getDest()), val = shape(o.getValueToStore());
        if (o.getDynamicPosition().empty()) {
          int64_t offset = staticOffset(o.getStaticPosition(), dst.dims);
          // Operands concatenate as [value..., dest...].
          std::vector<int64_t> source(dst.count);
          for (int64_t e = 0; e < int64_t(dst.count); ++e)
            source[e] = e >= offset && e < offset + int64_t(val.count) ? e - offset : val.count + e;
          return gather(op, {o.getValueToStore(), o.getDest()}, o->getResults(), source);
        }
        return dynamicPosition(Op::InsertDyn, {o.getValueToStore(), o.getDest()}, o.getDynamicPosition(),
                               o.getStaticPosition(), dst.dims, o.getResult(), val.count);
      })
      .Case([&](ExtractStridedSliceOp o) {
        ValueShape src = shape(o.getSource()), dst = shape(o.getResult());
        SmallVector<int64_t> offsets = intsOf(o.getOffsets()), strides = intsOf(o.getStrides());
        SmallVector<int64_t> srcStrides = rowMajorStrides(src.dims);
        return gather(op, {o.getSource()}, o->getResults(), indexMap(dst.dims, dst.count, [&](ArrayRef<int64_t> c) {
                        int64_t s = 0;
                        for (size_t d = 0; d < c.size(); ++d)
                          s += (d < offsets.size() ? offsets[d] + c[d] * strides[d] : c[d]) * srcStrides[d];
                        return s;
                      }));
      })
      .Case([&](InsertStridedSliceOp o) {
        ValueShape val = shape(o.getValueToStore()), dst = shape(o.getDest());
        SmallVector<int64_t> offsets = intsOf(o.getOffsets()), strides = intsOf(o.getStrides());
        // Operands concatenate as [value..., dest...]; the value's dims align with the trailing dest dims.
        std::vector<int64_t> source = iota(dst.count, val.count);
        SmallVector<int64_t> dstStrides = rowMajorStrides(dst.dims);
        size_t lead = dst.dims.size() - val.dims.size();
        for (int64_t e = 0; e < int64_t(val.count); ++e) {
          SmallVector<int64_t> c = delinearize(e, val.dims);
          int64_t at = 0;
          for (size_t d = 0; d < dst.dims.size(); ++d) {
            int64_t coord = d < lead ? offsets[d] : offsets[d] + c[d - lead] * strides[d - lead];
            at += coord * dstStrides[d];
          }
          source[at] = e;
        }
        return gather(op, {o.getValueToStore(), o.getDest()}, o->getResults(), source);
      })
      .Case([&](TransposeOp o) {
        ValueShape src = shape(o.getVector()), dst = shape(o.getResult());
        SmallVector<int64_t> srcStrides = rowMajorStrides(src.dims);
        return gather(op, o->getOperands(), o->getResults(), indexMap(dst.dims, dst.count, [&](ArrayRef<int64_t> c) {
                        int64_t s = 0;
                        for (size_t d = 0; d < c.size(); ++d)
                          s += c[d] * srcStrides[o.getPermutation()[d]];
                        return s;
                      }));
      })
      .Case([&](InterleaveOp o) {
        // Along the innermost dimension: result[..., 2i] = lhs[..., i], [2i + 1] = rhs[..., i].
        ValueShape lhs = shape(o.getLhs());
        int64_t inner = lhs.dims.back();
        std::vector<int64_t> source;
        for (int64_t row = 0; row < int64_t(lhs.count) / inner; ++row)
          for (int64_t i = 0; i < inner; ++i)
            source.insert(source.end(), {row * inner + i, lhs.count + row * inner + i});
        return gather(op, o->getOperands(), o->getResults(), source);
      })
      .Case([&](DeinterleaveOp o) {
        ValueShape src = shape(o.getSource());
        int64_t inner = src.dims.back(), rows = src.count / inner;
        std::vector<int64_t> source;
        for (int parity = 0; parity < 2; ++parity)
          for (int64_t row = 0; row < rows; ++row)
            for (int64_t i = parity; i < inner; i += 2)
              source.push_back(row * inner + i);
        return gather(op, o->getOperands(), o->getResults(), source);
      })
      .Case([&](StepOp o) {
        std::vector<Cell> cells;
        for (int64_t e = 0; e < int64_t(shape(o.getResult()).count); ++e)
          cells.push_back(Cell{e});
        return constant(op, o.getResult(), std::move(cells));
      })
      .Case([&](FMAOp) { return elementwise(op, Op::Fma); })
      .Case([&](BitCastOp) { return elementwise(op, Op::Bitcast); })
      .Case([&](ReductionOp o) {
        Inst I = elementwise(op, Op::Reduce);
        I.count = shape(o.getVector()).count; // the reduced vector's length
        I.imm = int64_t(o.getKind());         // ReduceKind follows CombiningKind's numbering
        return I;
      })
      .Default([](Operation *) { return std::nullopt; });
}

// ---- Memory ------------------------------------------------------------------------------------

int32_t Decoder::bindMemref(Value v, int32_t binding, MemRefType type, Operation *op, int64_t offset) {
  MemRefDesc desc{binding, ElemKind::I8, offset, {}};
  auto kind = elemKindOf(type.getElementType());
  SmallVector<int64_t> strides;
  int64_t layoutOffset = 0;
  if (!kind || failed(type.getStridesAndOffset(strides, layoutOffset)) ||
      llvm::any_of(strides, ShapedType::isDynamic) || ShapedType::isDynamic(layoutOffset)) {
    problem(op, "memref type " + typeString(type) + " is not supported (needs static strides)");
    return memrefOf[v] = -1;
  }
  desc.kind = *kind;
  desc.offset += layoutOffset;
  desc.strides.assign(strides.begin(), strides.end());
  P.memrefs.push_back(std::move(desc));
  return memrefOf[v] = int32_t(P.memrefs.size() - 1);
}

int32_t Decoder::memrefFor(Value memref, Operation *user) {
  auto it = memrefOf.find(memref);
  if (it != memrefOf.end())
    return it->second;
  problem(user, "memref operand is not a kernel argument, workgroup buffer or supported view");
  return memrefOf[memref] = -1;
}

Inst Decoder::memoryAccess(Operation *op, Op code, Value memref, ValueRange indices, Value value, Type accessType) {
  Inst I = make(op, code);
  I.mem = memrefFor(memref, op);
  auto access = shapeOf(accessType).value_or(ValueShape{ElemKind::I64, 1, {}});
  if (auto v = dyn_cast<VectorType>(accessType); v && v.getRank() != 1 && code != Op::LdMatrix)
    problem(op, "only 1-D vector accesses are supported, not " + typeString(accessType));
  if (I.mem >= 0 && !P.memrefs[I.mem].strides.empty() && P.memrefs[I.mem].strides.back() != 1 &&
      (access.count > 1 || code == Op::LdMatrix))
    problem(op, "vector access along a non-unit-stride dimension");
  I.kind = access.kind;
  I.count = access.count;
  if (code == Op::Store || code == Op::AtomicAddF)
    I.in.push_back(use(value));
  for (Value i : indices)
    I.in.push_back(use(i));
  if (code != Op::Store && code != Op::AtomicAddF)
    I.out.push_back(def(value, op));
  return I;
}

std::optional<Inst> Decoder::decodeMemory(Operation *op) {
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](memref::LoadOp o) {
        return memoryAccess(op, Op::Load, o.getMemRef(), o.getIndices(), o.getResult(), o.getType());
      })
      .Case([&](memref::StoreOp o) {
        return memoryAccess(op, Op::Store, o.getMemRef(), o.getIndices(), o.getValueToStore(),
                            o.getValueToStore().getType());
      })
      .Case([&](memref::AtomicRMWOp o) -> std::optional<Inst> {
        if (o.getKind() != arith::AtomicRMWKind::addf || !o.getType().isF32()) {
          unsupported(op, "atomic_rmw other than addf on f32");
          return std::nullopt;
        }
        Inst I = memoryAccess(op, Op::AtomicAddF, o.getMemref(), o.getIndices(), o.getValue(), o.getType());
        I.out.push_back(def(o.getResult(), op));
        return I;
      })
      .Case([&](::tessera::AtomicAddFOp o) {
        return memoryAccess(op, Op::AtomicAddF, o.getMemref(), o.getIndex(), o.getValue(),
                            o.getValue().getType());
      })
      .Case([&](vector::LoadOp o) {
        Inst I = memoryAccess(op, Op::Load, o.getBase(), o.getIndices(), o.getResult(), o.getVectorType());
        I.imm = int64_t(o.getAlignment().value_or(0));
        return I;
      })
      .Case([&](vector::StoreOp o) {
        Inst I = memoryAccess(op, Op::Store, o.getBase(), o.getIndices(), o.getValueToStore(), o.getVectorType());
        I.imm = int64_t(o.getAlignment().value_or(0));
        return I;
      })
      .Case([&](nvgpu::LdMatrixOp o) -> std::optional<Inst> {
        // Each lane gives the address of one 16-byte row; the warp gets the 8-row tiles back
        // in the mma.sync fragment order (8-bit elements: not transposed).
        Inst I = memoryAccess(op, Op::LdMatrix, o.getSrcMemref(), o.getIndices(), o.getRes(), o.getRes().getType());
        I.imm = o.getNumTiles();
        I.imm2 = o.getTranspose();
        const int bits = bitWidth(I.kind);
        if ((bits != 16 && (bits != 8 || I.imm2)) || I.count != 32 / bits * uint32_t(I.imm) ||
            target.waveSize != 32) {
          unsupported(op, "ldmatrix of 16-bit elements (8-bit ones not transposed), 4 bytes a "
                          "tile a lane, on a warp-32 target");
          return std::nullopt;
        }
        return I;
      })
      .Case([&](amdgpu::TransposeLoadOp o) -> std::optional<Inst> {
        // Each lane gives the address of 4 elements; every group of 16 lanes exchanges them.
        Inst I = memoryAccess(op, Op::TransposeLoad, o.getSrc(), o.getSrcIndices(), o.getResult(),
                              o.getResult().getType());
        if (bitWidth(I.kind) != 16 || I.count != 4 || target.waveSize % 16) {
          unsupported(op, "transpose_load other than 4 16-bit elements a lane (ds_read_b64_tr_b16)");
          return std::nullopt;
        }
        return I;
      })
      .Case([&](nvgpu::DeviceAsyncCopyOp o) -> std::optional<Inst> {
        // The token result is left undefined: only its use by a wait would need it.
        if (!o.getAsyncToken().use_empty()) {
          unsupported(op, "async tokens (wait with nvvm.cp.async.wait.group)");
          return std::nullopt;
        }
        Inst I = make(op, Op::AsyncCopy);
        I.mem = memrefFor(o.getDst(), op);
        I.srcMem = memrefFor(o.getSrc(), op);
        if (I.mem < 0 || I.srcMem < 0)
          return I;
        if (P.bindings[P.memrefs[I.mem].binding].space == Binding::Space::Global ||
            P.bindings[P.memrefs[I.srcMem].binding].space != Binding::Space::Global ||
            P.memrefs[I.mem].kind != P.memrefs[I.srcMem].kind) {
          unsupported(op, "only copies from a global buffer to LDS of the same element type");
          return std::nullopt;
        }
        I.kind = P.memrefs[I.mem].kind;
        I.imm = int64_t(o.getDstElements().getZExtValue());
        I.imm2 = int64_t(o.getDstIndices().size());
        for (Value i : o.getDstIndices())
          I.in.push_back(use(i));
        for (Value i : o.getSrcIndices())
          I.in.push_back(use(i));
        I.list.push_back(o.getSrcElements() ? 1 : 0);
        if (o.getSrcElements())
          I.in.push_back(use(o.getSrcElements()));
        return I;
      })
      .Case([&](amdgpu::GatherToLDSOp o) -> std::optional<Inst> {
        Inst I = make(op, Op::GatherToLds);
        I.mem = memrefFor(o.getDst(), op);
        I.srcMem = memrefFor(o.getSrc(), op);
        if (I.mem < 0 || I.srcMem < 0)
          return I;
        auto transfer = dyn_cast<VectorType>(o.getTransferType());
        Type elem = transfer ? transfer.getElementType() : o.getTransferType();
        if (P.bindings[P.memrefs[I.mem].binding].space == Binding::Space::Global ||
            P.bindings[P.memrefs[I.srcMem].binding].space != Binding::Space::Global ||
            P.memrefs[I.mem].kind != P.memrefs[I.srcMem].kind || elem != o.getDst().getType().getElementType() ||
            (transfer ? transfer.getNumElements() : 1) * elem.getIntOrFloatBitWidth() != 128) {
          unsupported(op, "only 16-byte loads from a global buffer to LDS of the same element type");
          return std::nullopt;
        }
        I.kind = P.memrefs[I.mem].kind;
        I.imm = transfer ? transfer.getNumElements() : 1;
        I.imm2 = int64_t(o.getDstIndices().size());
        for (Value i : o.getDstIndices())
          I.in.push_back(use(i));
        for (Value i : o.getSrcIndices())
          I.in.push_back(use(i));
        return I;
      })
      .Case([&](amdgpu::MemoryCounterWaitOp o) {
        // Only the load counter orders LDS DMA loads; the others are waits the simulator never needs.
        Inst I = make(op, o.getLoad() ? Op::AsyncWait : Op::Nop);
        I.imm = o.getLoad() ? int64_t(*o.getLoad()) : 0;
        return I;
      })
      .Case([&](NVVM::CpAsyncCommitGroupOp) { return make(op, Op::AsyncCommit); })
      .Case([&](NVVM::CpAsyncWaitGroupOp o) {
        Inst I = make(op, Op::AsyncWait);
        I.imm = o.getN();
        return I;
      })
      .Case([&](memref::CastOp o) -> std::optional<Inst> {
        memrefOf[o.getResult()] = memrefFor(o.getSource(), op);
        return make(op, Op::Nop);
      })
      .Case([&](memref::GetGlobalOp o) -> std::optional<Inst> {
        auto module = op->getParentOfType<gpu::GPUModuleOp>();
        auto global = module ? module.lookupSymbol<memref::GlobalOp>(o.getName()) : nullptr;
        if (!global || !isWorkgroupMemory(global.getType()) || !global.getType().hasStaticShape()) {
          unsupported(op, "only statically shaped workgroup-memory globals are simulated");
          return std::nullopt;
        }
        auto [it, inserted] = globalBinding.try_emplace(o.getName(), int32_t(P.bindings.size()));
        if (inserted) {
          MemRefType t = global.getType();
          uint64_t bytes =
              uint64_t(t.getNumElements()) * storageBytes(elemKindOf(t.getElementType()).value_or(ElemKind::I8));
          P.bindings.push_back({Binding::Space::Workgroup, "workgroup global @" + o.getName().str(), bytes, -1});
          P.info.staticLdsBytes += bytes;
        }
        bindMemref(o.getResult(), it->second, o.getType(), op);
        return make(op, Op::Nop);
      })
      .Case([&](gpu::DynamicSharedMemoryOp o) -> std::optional<Inst> {
        P.bindings.push_back({Binding::Space::DynamicWorkgroup, "dynamic shared memory", 0, -1});
        bindMemref(o.getResult(), int32_t(P.bindings.size() - 1), o.getType(), op);
        return make(op, Op::Nop);
      })
      .Case([&](memref::ViewOp o) -> std::optional<Inst> {
        // A typed view of an i8 buffer at a constant byte shift (the dynamic-shared-memory idiom).
        int32_t base = memrefFor(o.getSource(), op);
        auto shiftOp = o.getByteShift().getDefiningOp<arith::ConstantOp>();
        auto shiftAttr = shiftOp ? dyn_cast<IntegerAttr>(shiftOp.getValue()) : IntegerAttr();
        if (base < 0 || !shiftAttr || !o.getSizes().empty() || !o.getType().hasStaticShape()) {
          unsupported(op, "only views at a constant byte shift with a static shape are simulated");
          return std::nullopt;
        }
        APInt shift = shiftAttr.getValue();
        auto kind = elemKindOf(o.getType().getElementType());
        int64_t elemBytes = kind ? storageBytes(*kind) : 1;
        int64_t byteOffset = P.memrefs[base].offset * storageBytes(P.memrefs[base].kind) + shift.getSExtValue();
        if (byteOffset % elemBytes) {
          unsupported(op, "view offset is not a multiple of the element size");
          return std::nullopt;
        }
        bindMemref(o.getResult(), P.memrefs[base].binding, o.getType(), op, byteOffset / elemBytes);
        return make(op, Op::Nop);
      })
      .Default([](Operation *) { return std::nullopt; });
}

// ---- GPU geometry, synchronisation and cross-lane operations ----------------------------------

std::optional<Inst> Decoder::decodeGpu(Operation *op) {
  auto geometry = [&](Op code, int64_t dim) {
    Inst I = make(op, code);
    I.imm = dim;
    I.out.push_back(def(op->getResult(0), op));
    I.kind = P.slots[I.out[0]].kind;
    return I;
  };
  auto dimOf = [](gpu::Dimension d) { return int64_t(d); };
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](gpu::ThreadIdOp o) { return geometry(Op::ThreadId, dimOf(o.getDimension())); })
      .Case([&](gpu::BlockIdOp o) { return geometry(Op::BlockId, dimOf(o.getDimension())); })
      .Case([&](gpu::BlockDimOp o) { return geometry(Op::BlockDim, dimOf(o.getDimension())); })
      .Case([&](gpu::GridDimOp o) { return geometry(Op::GridDim, dimOf(o.getDimension())); })
      .Case([&](gpu::LaneIdOp) { return geometry(Op::LaneId, 0); })
      .Case([&](gpu::SubgroupIdOp) { return geometry(Op::SubgroupId, 0); })
      .Case([&](gpu::NumSubgroupsOp) { return geometry(Op::NumSubgroups, 0); })
      .Case([&](gpu::SubgroupSizeOp) { return geometry(Op::SubgroupSize, 0); })
      .Case([&](NVVM::ThreadIdXOp) { return geometry(Op::ThreadId, 0); })
      .Case([&](NVVM::ThreadIdYOp) { return geometry(Op::ThreadId, 1); })
      .Case([&](NVVM::ThreadIdZOp) { return geometry(Op::ThreadId, 2); })
      .Case([&](NVVM::BlockIdXOp) { return geometry(Op::BlockId, 0); })
      .Case([&](NVVM::BlockIdYOp) { return geometry(Op::BlockId, 1); })
      .Case([&](NVVM::BlockIdZOp) { return geometry(Op::BlockId, 2); })
      .Case([&](NVVM::BlockDimXOp) { return geometry(Op::BlockDim, 0); })
      .Case([&](NVVM::BlockDimYOp) { return geometry(Op::BlockDim, 1); })
      .Case([&](NVVM::BlockDimZOp) { return geometry(Op::BlockDim, 2); })
      .Case([&](NVVM::GridDimXOp) { return geometry(Op::GridDim, 0); })
      .Case([&](NVVM::GridDimYOp) { return geometry(Op::GridDim, 1); })
      .Case([&](NVVM::GridDimZOp) { return geometry(Op::GridDim, 2); })
      .Case([&](NVVM::LaneIdOp) { return geometry(Op::LaneId, 0); })
      .Case([&](NVVM::WarpSizeOp) { return geometry(Op::SubgroupSize, 0); })
      .Case<gpu::BarrierOp, amdgpu::LDSBarrierOp, NVVM::Barrier0Op, ROCDL::SBarrierOp>(
          [&](Operation *) { return make(op, Op::Barrier); })
      .Case([&](NVVM::SyncWarpOp o) {
        Inst I = make(op, Op::WarpSync);
        I.in.push_back(use(o.getMask()));
        return I;
      })
      .Case([&](NVVM::BarrierOp o) -> std::optional<Inst> {
        if (op->getNumOperands() || op->getNumResults()) {
          unsupported(op, "named or counted barriers");
          return std::nullopt;
        }
        return make(op, Op::Barrier);
      })
      // Scheduling hints change no value.
      .Case<amdgpu::SchedBarrierOp, ROCDL::SchedBarrier, ROCDL::SchedGroupBarrier, ROCDL::IglpOpt, ROCDL::SetPrioOp,
            ROCDL::SWaitcntOp>([&](Operation *) { return make(op, Op::Nop); })
      .Case([&](gpu::ShuffleOp o) {
        Inst I = make(op, Op::Shuffle);
        I.in = {use(o.getValue()), use(o.getOffset()), use(o.getWidth())};
        I.out = {def(o.getShuffleResult(), op), def(o.getValid(), op)};
        I.kind = P.slots[I.out[0]].kind;
        I.count = P.slots[I.out[0]].count;
        switch (o.getMode()) {
        case gpu::ShuffleMode::XOR: I.imm = int64_t(ShuffleMode::Xor); break;
        case gpu::ShuffleMode::DOWN: I.imm = int64_t(ShuffleMode::Down); break;
        case gpu::ShuffleMode::UP: I.imm = int64_t(ShuffleMode::Up); break;
        case gpu::ShuffleMode::IDX: I.imm = int64_t(ShuffleMode::Idx); break;
        }
        return I;
      })
      .Case([&](::tessera::SwapWaveHalvesOp o) {
        Inst I = make(op, Op::SwapHalves);
        I.in = {use(o.getA()), use(o.getB())};
        I.out = {def(o.getLo(), op), def(o.getHi(), op)};
        I.kind = P.slots[I.out[0]].kind;
        I.count = P.slots[I.out[0]].count;
        return I;
      })
      .Case([&](amdgpu::DPPOp o) -> std::optional<Inst> {
        Inst I = elementwise(op, Op::Dpp);
        auto kind = DppKind(int(o.getKind()));
        I.imm = int64_t(kind);
        I.imm2 = int64_t(o.getRowMask() & 0xf) | int64_t(o.getBankMask() & 0xf) << 4 | int64_t(o.getBoundCtrl()) << 8;
        if (auto arr = dyn_cast_or_null<ArrayAttr>(o.getPermArgumentAttr()))
          for (Attribute a : arr)
            I.list.push_back(cast<IntegerAttr>(a).getInt());
        else if (auto i = dyn_cast_or_null<IntegerAttr>(o.getPermArgumentAttr()))
          I.list.push_back(i.getInt());
        bool gfx9Only = kind >= DppKind::WaveShl && kind <= DppKind::WaveRol;
        bool bcast = kind == DppKind::RowBcast15 || kind == DppKind::RowBcast31;
        if ((gfx9Only || bcast) && target.waveSize != 64) {
          unsupported(op, "this DPP control exists only on wave64 (gfx9) targets, not " + target.chip);
          return std::nullopt;
        }
        if (kind == DppKind::QuadPerm && I.list.size() != 4) {
          unsupported(op, "quad_perm needs four lane indices");
          return std::nullopt;
        }
        return I;
      })
      .Default([](Operation *) { return std::nullopt; });
}

// ---- Matrix operations -------------------------------------------------------------------------

std::vector<ElemRef> Decoder::operandElems(ValueRange values, std::optional<ElemKind> packed) {
  std::vector<ElemRef> refs;
  for (Value v : values) {
    int32_t s = use(v);
    const Slot &sl = P.slots[s];
    if (packed && sl.kind == ElemKind::I32) {
      // Two 16-bit or four 8-bit values per 32-bit register, element 0 in the low bits (PTX
      // .bf16x2, .e4m3x4).
      const int8_t perRegister = int8_t(32 / bitWidth(*packed));
      for (uint32_t e = 0; e < sl.count; ++e)
        for (int8_t h = 0; h < perRegister; ++h)
          refs.push_back({s, e, h, *packed});
      continue;
    }
    for (uint32_t e = 0; e < sl.count; ++e)
      refs.push_back({s, e});
  }
  return refs;
}

Inst Decoder::matrixOp(Operation *op, MatrixFamily family, int m, int n, int k, int subword, std::vector<ElemRef> a,
                       std::vector<ElemRef> b, std::vector<ElemRef> c, Value d, ElemKind inKind) {
  Inst I = make(op, Op::Matrix);
  int32_t dSlot = def(d, op);
  const MatrixLayout *layout = findMatrixLayout(family, m, n, k, int(a.size()), int(c.size()), subword);
  std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  if (!layout || int(b.size()) != layout->bPerLane || int(P.slots[dSlot].count) != layout->cPerLane) {
    unsupported(op, "no modelled matrix instruction of shape " + shape + " with " + std::to_string(a.size()) + " " +
                        kindName(inKind) + " A elements and " + std::to_string(c.size()) +
                        " accumulator elements per lane");
    return make(op, Op::Nop);
  }
  ElemKind acc = P.slots[dSlot].kind;
  std::string mnemonic = matrixMnemonic(*layout, inKind, acc);
  // The instruction must exist on the simulated chip: f16/bf16 atoms by the target's list,
  // fp8 by the target's e4m3 flavour (FNUZ on gfx942, OCP on gfx950).
  bool fp8 = isFloat(inKind) && bitWidth(inKind) == 8;
  bool available = false;
  if (fp8 && target.fp8) {
    bool fnuz = *target.fp8 == ElemType::FP8E4M3FNUZ;
    available = fnuz ? (inKind == ElemKind::F8E4M3FNUZ || inKind == ElemKind::F8E5M2FNUZ)
                     : (inKind == ElemKind::F8E4M3FN || inKind == ElemKind::F8E5M2);
    available &= family == MatrixFamily::MFMA || family == MatrixFamily::MMASync;
  } else if (!fp8) {
    auto listed = [&](const std::string &name) {
      return llvm::any_of(target.atoms, [&](MMAIntrinsic i) { return getAtom(i).name == name; });
    };
    available = listed(mnemonic) ||
                // gfx11's f16-output WMMA shares its inputs with the f32 one the target lists.
                (family == MatrixFamily::WMMA && listed(matrixMnemonic(*layout, inKind, ElemKind::F32)));
  }
  if (!available || layout->waveSize != target.waveSize) {
    problem(op, mnemonic + " is not an instruction of " + target.chip);
    return make(op, Op::Nop);
  }
  MatrixOpDesc desc{layout, std::move(a), std::move(b), std::move(c), dSlot, acc, mnemonic};
  P.matrixOps.push_back(std::move(desc));
  I.matrix = int32_t(P.matrixOps.size() - 1);
  I.out.push_back(dSlot);
  for (const auto *refs : {&P.matrixOps.back().a, &P.matrixOps.back().b, &P.matrixOps.back().c})
    for (const ElemRef &r : *refs)
      if (!llvm::is_contained(I.in, r.slot))
        I.in.push_back(r.slot);
  return I;
}

std::optional<Inst> Decoder::decodeMatrix(Operation *op) {
  auto kindOf = [&](Value v) { return P.slots[use(v)].kind; };
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](amdgpu::MFMAOp o) -> std::optional<Inst> {
        if (o.getBlocks() != 1 || o.getCbsz() || o.getAbid() || o.getBlgp() != amdgpu::MFMAPermB::none ||
            o.getNegateA() || o.getNegateB() || o.getNegateC()) {
          unsupported(op, "multi-block MFMA and the cbsz/abid/blgp/negate controls are not modelled");
          return std::nullopt;
        }
        return matrixOp(op, MatrixFamily::MFMA, o.getM(), o.getN(), o.getK(), 0, operandElems(o.getSourceA(), {}),
                        operandElems(o.getSourceB(), {}), operandElems(o.getDestC(), {}), o.getDestD(),
                        kindOf(o.getSourceA()));
      })
      .Case([&](amdgpu::WMMAOp o) -> std::optional<Inst> {
        if (o.getClamp() || o.getUnsignedA() || o.getUnsignedB()) {
          unsupported(op, "integer WMMA and clamp are not modelled");
          return std::nullopt;
        }
        return matrixOp(op, MatrixFamily::WMMA, o.getM(), o.getN(), o.getK(), int(o.getSubwordOffset()),
                        operandElems(o.getSourceA(), {}), operandElems(o.getSourceB(), {}),
                        operandElems(o.getDestC(), {}), o.getDestD(), kindOf(o.getSourceA()));
      })
      .Case([&](NVVM::MmaOp o) -> std::optional<Inst> {
        NVVM::MMAShapeAttr s = o.getShape();
        auto type = o.getMultiplicandAPtxType();
        std::optional<ElemKind> packed;
        ElemKind in = ElemKind::F16;
        if (type == NVVM::MMATypes::bf16)
          packed = in = ElemKind::BF16;
        else if (type && type != NVVM::MMATypes::f16) {
          unsupported(op, "mma.sync with " + stringifyMMATypes(*type) + " inputs is not modelled");
          return std::nullopt;
        }
        if (o.getLayoutA() != NVVM::MMALayout::row || o.getLayoutB() != NVVM::MMALayout::col) {
          unsupported(op, "mma.sync layouts other than row.col");
          return std::nullopt;
        }
        return matrixOp(op, MatrixFamily::MMASync, s.getM(), s.getN(), s.getK(), 0,
                        operandElems(o.getOperandA(), packed), operandElems(o.getOperandB(), packed),
                        operandElems(o.getOperandC(), {}), o.getRes(), in);
      })
      .Case([&](LLVM::CallIntrinsicOp o) -> std::optional<Inst> {
        // The one LLVM intrinsic kernels call: mma.sync m16n8k32 on e4m3, which nvvm.mma.sync lacks
        // (A: 4 i32, B: 2 i32, C: 4 f32; a struct of 4 f32).
        if (o.getIntrin() != kMmaSyncE4M3Intrinsic || o.getNumResults() != 1 || o.getArgs().size() != 10) {
          unsupported(op, "llvm.call_intrinsic of " + o.getIntrin().str() + " (of the intrinsics only " +
                              kMmaSyncE4M3Intrinsic + " is modelled)");
          return std::nullopt;
        }
        OperandRange args = o.getArgs();
        const ElemKind e4m3 = ElemKind::F8E4M3FN;
        return matrixOp(op, MatrixFamily::MMASync, 16, 8, 32, 0, operandElems(args.slice(0, 4), e4m3),
                        operandElems(args.slice(4, 2), e4m3), operandElems(args.slice(6, 4), {}), o.getResult(0),
                        e4m3);
      })
      .Case([&](nvgpu::MmaSyncOp o) -> std::optional<Inst> {
        std::array<int64_t, 3> s = o.getMmaShapeAsArray();
        if (o.getTf32Enabled().value_or(false)) {
          unsupported(op, "tf32 mma.sync is not modelled");
          return std::nullopt;
        }
        return matrixOp(op, MatrixFamily::MMASync, int(s[0]), int(s[1]), int(s[2]), 0, operandElems(o.getMatrixA(), {}),
                        operandElems(o.getMatrixB(), {}), operandElems(o.getMatrixC(), {}), o.getRes(),
                        kindOf(o.getMatrixA()));
      })
      .Default([](Operation *) { return std::nullopt; });
}

// ---- LLVM dialect values (NVVM results are LLVM structs) --------------------------------------

std::optional<Inst> Decoder::decodeLLVM(Operation *op) {
  // Flattened element offset of member `index` of a struct (or array) type.
  auto memberOffset = [](Type t, ArrayRef<int64_t> position) -> std::optional<std::pair<int64_t, int64_t>> {
    int64_t offset = 0;
    for (int64_t p : position) {
      auto s = dyn_cast<LLVM::LLVMStructType>(t);
      if (!s || p >= int64_t(s.getBody().size()))
        return std::nullopt;
      for (int64_t i = 0; i < p; ++i)
        offset += shapeOf(s.getBody()[i])->count;
      t = s.getBody()[p];
    }
    auto shape = shapeOf(t);
    if (!shape)
      return std::nullopt;
    return std::make_pair(offset, int64_t(shape->count));
  };
  auto iota = [](int64_t n, int64_t from) {
    std::vector<int64_t> v(n);
    std::iota(v.begin(), v.end(), from);
    return v;
  };
  return TypeSwitch<Operation *, std::optional<Inst>>(op)
      .Case([&](LLVM::ExtractValueOp o) -> std::optional<Inst> {
        auto at = memberOffset(o.getContainer().getType(), o.getPosition());
        if (!at) {
          unsupported(op, "aggregate type " + typeString(o.getContainer().getType()));
          return std::nullopt;
        }
        return gather(op, {o.getContainer()}, o->getResults(), iota(at->second, at->first));
      })
      .Case([&](LLVM::InsertValueOp o) -> std::optional<Inst> {
        auto at = memberOffset(o.getContainer().getType(), o.getPosition());
        if (!at) {
          unsupported(op, "aggregate type " + typeString(o.getContainer().getType()));
          return std::nullopt;
        }
        int64_t total = shapeOf(o.getType())->count;
        std::vector<int64_t> source(total);
        for (int64_t e = 0; e < total; ++e)
          source[e] = e >= at->first && e < at->first + at->second ? e - at->first : at->second + e;
        return gather(op, {o.getValue(), o.getContainer()}, o->getResults(), source);
      })
      .Case([&](LLVM::BitcastOp) { return elementwise(op, Op::Bitcast); })
      .Case<LLVM::UndefOp, LLVM::PoisonOp, ub::PoisonOp>([&](Operation *) {
        Inst I = make(op, Op::Poison);
        I.out.push_back(def(op->getResult(0), op));
        I.kind = P.slots[I.out[0]].kind;
        I.count = P.slots[I.out[0]].count;
        return I;
      })
      .Case([&](LLVM::ZeroOp o) { return constant(op, o.getResult(), {Cell{0}}); })
      .Case([&](LLVM::ConstantOp o) -> std::optional<Inst> {
        auto s = shapeOf(o.getType());
        if (!s || !isa<IntegerAttr, FloatAttr, DenseElementsAttr>(o.getValue())) {
          unsupported(op, "constant of type " + typeString(o.getType()));
          return std::nullopt;
        }
        return constant(op, o.getResult(), constantCells(o.getValue(), s->kind));
      })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace tessera::sim::detail

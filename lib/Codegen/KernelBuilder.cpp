// Builders shared by every generator: kernel skeleton, index math, LDS tiles, tile copies,
// fragment loads, matrix-core ops and accumulator stores.
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Codegen/LdsLayout.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace tessera {

//===----------------------------------------------------------------------===//
// Grid expressions and the kernel skeleton
//===----------------------------------------------------------------------===//

GridExpr GridExpr::constant(int64_t v) { return {std::to_string(v)}; }
GridExpr GridExpr::arg(const std::string &name) { return {"\"" + name + "\""}; }
GridExpr GridExpr::apply(grid::Op op, const GridExpr &a, const GridExpr &b) {
  return {std::string("[\"") + grid::opName(op) + "\", " + a.json + ", " + b.json + "]"};
}
GridExpr GridExpr::ceilDiv(const GridExpr &a, const GridExpr &b) { return apply(grid::Op::CeilDiv, a, b); }
GridExpr GridExpr::min(const GridExpr &a, const GridExpr &b) { return apply(grid::Op::Min, a, b); }
GridExpr GridExpr::max(const GridExpr &a, const GridExpr &b) { return apply(grid::Op::Max, a, b); }
GridExpr GridExpr::add(const GridExpr &a, const GridExpr &b) { return apply(grid::Op::Add, a, b); }
GridExpr GridExpr::floorDiv(const GridExpr &a, const GridExpr &b) { return apply(grid::Op::Div, a, b); }
GridExpr GridExpr::mul(const GridExpr &a, const GridExpr &b) { return apply(grid::Op::Mul, a, b); }
GridExpr GridExpr::smCount() { return {std::string("\"") + grid::kSmCount + "\""}; }

TensorMapRecipe TensorMapRecipe::tiled(const std::string &mapArg, const std::string &tensorArg,
                                       const std::vector<GridExpr> &dims,
                                       const std::vector<GridExpr> &strides,
                                       const std::vector<int> &box) {
  auto list = [](auto items, auto str) {
    std::string out;
    for (const auto &x : items) out += (out.empty() ? "" : ", ") + str(x);
    return "[" + out + "]";
  };
  auto expr = [](const GridExpr &e) { return e.json; };
  auto num = [](int v) { return std::to_string(v); };
  return {"{\"arg\": \"" + mapArg + "\", \"tensor\": \"" + tensorArg +
          "\", \"dims\": " + list(dims, expr) + ", \"strides\": " + list(strides, expr) +
          ", \"box\": " + list(box, num) + ", \"swizzle\": \"128B\"}"};
}

static Attribute targetAttr(MLIRContext *ctx, const TargetInfo &t) {
  if (t.isAMD())
    // Code object version 5: what the HIP runtimes of ROCm 6.x load.
    return ROCDL::ROCDLTargetAttr::get(ctx, /*optLevel=*/3, "amdgcn-amd-amdhsa", t.chip, "",
                                       "500");
  return NVVM::NVVMTargetAttr::get(ctx, /*optLevel=*/3, "nvptx64-nvidia-cuda", t.chip,
                                   "+ptx80");
}

DictionaryAttr directiveAttributes(Operation *directive) {
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute a : directive->getAttrs())
    if (a.getName() != SymbolTable::getSymbolAttrName()) attrs.push_back(a);
  return DictionaryAttr::get(directive->getContext(), attrs);
}

gpu::GPUFuncOp createKernel(OpBuilder &b, Location loc, const TargetInfo &target,
                            const KernelSignature &sig) {
  MLIRContext *ctx = b.getContext();
  auto module = gpu::GPUModuleOp::create(b, loc, sig.name, ArrayRef<Attribute>{targetAttr(ctx, target)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(module.getBody());

  SmallVector<Type> types;
  SmallVector<Attribute> names;
  SmallVector<ArgRole> roles;
  for (const KernelArg &a : sig.args) {
    types.push_back(a.type);
    names.push_back(b.getStringAttr(a.name));
    roles.push_back(a.role);
  }
  auto func = gpu::GPUFuncOp::create(b, loc, sig.name, b.getFunctionType(types, {}));
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({sig.blockThreads, 1, 1}));
  func->setAttr(TesseraDialect::getDirectiveAttrName(), b.getStringAttr(sig.directive));
  func->setAttr(TesseraDialect::getAttributesAttrName(), sig.directiveAttrs);
  func->setAttr(TesseraDialect::getArgNamesAttrName(), b.getArrayAttr(names));
  func->setAttr(TesseraDialect::getArgRolesAttrName(), ArgRolesAttr::get(ctx, roles));
  func->setAttr(TesseraDialect::getGridAttrName(), b.getStringAttr("[" + sig.grid[0].json + ", " +
                                                sig.grid[1].json + ", " + sig.grid[2].json +
                                                "]"));
  if (!sig.tensorMaps.empty()) {
    std::string maps;
    for (const TensorMapRecipe &m : sig.tensorMaps) maps += (maps.empty() ? "" : ", ") + m.json;
    func->setAttr(TesseraDialect::getTensorMapsAttrName(), b.getStringAttr("[" + maps + "]"));
  }
  if (!sig.divisible.empty()) {
    std::string rules;
    for (const auto &[arg, by] : sig.divisible)
      rules += (rules.empty() ? "" : ", ") + ("{\"arg\": \"" + arg + "\", \"by\": " + by.json + "}");
    func->setAttr(TesseraDialect::getDivisibleAttrName(), b.getStringAttr("[" + rules + "]"));
  }
  if (sig.dynamicSharedBytes)
    func->setAttr(TesseraDialect::getDynamicLdsBytesAttrName(), b.getI64IntegerAttr(sig.dynamicSharedBytes));
  if (!sig.workspaces.empty()) {
    std::string specs;
    for (const WorkspaceSpec &w : sig.workspaces)
      specs += (specs.empty() ? "" : ", ") + ("{\"arg\": \"" + w.arg + "\", \"bytes\": " + w.bytes.json +
                                              ", \"zero\": " + (w.zero ? "true" : "false") + "}");
    func->setAttr(TesseraDialect::getWorkspacesAttrName(), b.getStringAttr("[" + specs + "]"));
  }
  b.setInsertionPointToEnd(&func.getBody().front());
  gpu::ReturnOp::create(b, loc);
  return func;
}

void recordKernelSet(const KernelSet &set) {
  auto hasWorkspace = [](gpu::GPUFuncOp func) {
    auto roles = func->getAttrOfType<ArgRolesAttr>(TesseraDialect::getArgRolesAttrName());
    return roles && llvm::is_contained(roles.getRoles(), ArgRole::Workspace);
  };
  if (set.kernels.size() == 1 && !hasWorkspace(set.kernels.front())) return;
  for (auto [position, kernel] : llvm::enumerate(set.kernels)) {
    gpu::GPUFuncOp func = kernel;
    func->setAttr(TesseraDialect::getKernelSetAttrName(), KernelSetAttr::get(func.getContext(), set.name, position));
  }
}

//===----------------------------------------------------------------------===//
// Index arithmetic
//===----------------------------------------------------------------------===//

static std::optional<int64_t> constIndex(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantIndexOp>()) return c.value();
  return std::nullopt;
}

Value KernelBuilder::f32(double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value KernelBuilder::fadd(Value a, Value c) { return arith::AddFOp::create(b, loc, a, c); }
Value KernelBuilder::fsub(Value a, Value c) { return arith::SubFOp::create(b, loc, a, c); }
Value KernelBuilder::fmul(Value a, Value c) { return arith::MulFOp::create(b, loc, a, c); }
Value KernelBuilder::fmax(Value a, Value c) {
  return arith::MaxNumFOp::create(b, loc, a, c, arith::FastMathFlags::nnan);
}
Value KernelBuilder::loadIndex(Value memref, Value i) {
  Value x = memref::LoadOp::create(b, loc, memref, ValueRange{i});
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), x);
}

Value KernelBuilder::select(Value cond, Value a, Value c) {
  return arith::SelectOp::create(b, loc, cond, a, c);
}

Value KernelBuilder::idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

Value KernelBuilder::add(Value a, Value c) {
  if (constIndex(c) == 0) return a;
  if (constIndex(a) == 0) return c;
  if (auto x = constIndex(a), y = constIndex(c); x && y) return idx(*x + *y);
  return arith::AddIOp::create(b, loc, a, c);
}
Value KernelBuilder::add(Value a, int64_t c) { return c == 0 ? a : add(a, idx(c)); }
Value KernelBuilder::sub(Value a, Value c) {
  if (constIndex(c) == 0) return a;
  return arith::SubIOp::create(b, loc, a, c);
}
Value KernelBuilder::mul(Value a, Value c) {
  if (constIndex(c) == 1) return a;
  if (constIndex(a) == 1) return c;
  return arith::MulIOp::create(b, loc, a, c);
}
Value KernelBuilder::mul(Value a, int64_t c) {
  if (c == 0) return idx(0);
  if (auto x = constIndex(a)) return idx(*x * c);
  return c == 1 ? a : arith::MulIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::divui(Value a, int64_t c) {
  if (c == 1) return a;
  if (auto x = constIndex(a)) return idx(*x / c);
  return arith::DivUIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::remui(Value a, int64_t c) {
  if (auto x = constIndex(a)) return idx(*x % c);
  return arith::RemUIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::divui(Value a, Value c) {
  if (auto x = constIndex(c)) return divui(a, *x);
  return arith::DivUIOp::create(b, loc, a, c);
}
Value KernelBuilder::remui(Value a, Value c) {
  if (auto x = constIndex(c)) return remui(a, *x);
  return arith::RemUIOp::create(b, loc, a, c);
}
Value KernelBuilder::shrui(Value a, int64_t c) {
  if (c == 0) return a;
  if (auto x = constIndex(a)) return idx(*x >> c);
  return arith::ShRUIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::andi(Value a, int64_t c) {
  if (auto x = constIndex(a)) return idx(*x & c);
  return arith::AndIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::xori(Value a, Value c) {
  if (constIndex(c) == 0) return a;
  return arith::XOrIOp::create(b, loc, a, c);
}
Value KernelBuilder::minsi(Value a, Value c) { return arith::MinSIOp::create(b, loc, a, c); }
Value KernelBuilder::maxsi(Value a, Value c) { return arith::MaxSIOp::create(b, loc, a, c); }
Value KernelBuilder::floorDivsi(Value a, int64_t c) {
  return arith::FloorDivSIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::ceilDivsi(Value a, int64_t c) { return ceilDivsi(a, idx(c)); }
Value KernelBuilder::ceilDivsi(Value a, Value c) {
  return arith::CeilDivSIOp::create(b, loc, a, c);
}
Value KernelBuilder::ceilDiv(Value a, int64_t c) {
  return arith::CeilDivUIOp::create(b, loc, a, idx(c));
}
Value KernelBuilder::cmpLt(Value a, Value c) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, a, c);
}
Value KernelBuilder::cmpLe(Value a, Value c) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, a, c);
}
Value KernelBuilder::cmpEq(Value a, Value c) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, a, c);
}
Value KernelBuilder::andb(Value a, Value c) { return arith::AndIOp::create(b, loc, a, c); }
Value KernelBuilder::zero(Type t) {
  if (auto vt = dyn_cast<VectorType>(t))
    return arith::ConstantOp::create(
        b, loc, vt, DenseElementsAttr::get(vt, b.getZeroAttr(vt.getElementType())));
  return arith::ConstantOp::create(b, loc, t, b.getZeroAttr(t));
}

//===----------------------------------------------------------------------===//
// Thread geometry
//===----------------------------------------------------------------------===//

Value KernelBuilder::threadId() { return gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x); }
Value KernelBuilder::laneId() { return remui(threadId(), target.waveSize); }
Value KernelBuilder::waveId() { return divui(threadId(), target.waveSize); }
Value KernelBuilder::blockId(gpu::Dimension d) { return gpu::BlockIdOp::create(b, loc, d); }

SmallVector<Value> KernelBuilder::laneAllReduce(ArrayRef<Value> values, ArrayRef<int> masks,
                                               vector::CombiningKind kind) {
  assert((kind == vector::CombiningKind::ADD || kind == vector::CombiningKind::MAXNUMF) &&
         "laneAllReduce combines by ADD or MAXNUMF");
  SmallVector<Value> out(values);
  for (int mask : masks)
    for (Value &v : out) {
      // Swapped with itself, v's lower halves are in one result and its upper ones in the
      // other: combined, every lane holds its pair's result.
      auto [x, other] =
          target.hasHalfWaveSwap && 2 * mask == target.waveSize
              ? swapWaveHalves(v, v)
              : std::pair{v, gpu::ShuffleOp::create(b, loc, v, mask, target.waveSize,
                                                    gpu::ShuffleMode::XOR)
                                 .getShuffleResult()};
      v = kind == vector::CombiningKind::ADD ? fadd(x, other) : fmax(x, other);
    }
  return out;
}

std::pair<Value, Value> KernelBuilder::swapWaveHalves(Value a, Value b2) {
  auto op = tessera::SwapWaveHalvesOp::create(b, loc, a.getType(), a.getType(), a, b2);
  return {op.getLo(), op.getHi()};
}

std::pair<Value, Value> KernelBuilder::laneCoord(const OperandLayout &layout, Value lane) {
  // One `(lane >> b) & mask` term per run of lane bits (`lane & 31`, `(lane >> 5) * 4`), not
  // one term per bit.
  Value row = idx(0), col = idx(0);
  for (const LaneField &f : layout.laneFields()) {
    Value term = mul(andi(shrui(lane, f.lowBit), (1 << f.bits) - 1), f.step);
    (f.alongRows ? row : col) = add(f.alongRows ? row : col, term);
  }
  return {row, col};
}

//===----------------------------------------------------------------------===//
// LDS tiles and copies
//===----------------------------------------------------------------------===//

static LdsTile ldsTileShape(const TargetInfo &target, Type elemType, int rows, int cols) {
  LdsTile tile;
  tile.rows = rows;
  tile.cols = cols;
  tile.swizzle = target.ldsSwizzle;
  tile.chunk = ldsChunkElems(elemType.getIntOrFloatBitWidth());
  // Padding by one 16-byte chunk shifts each row by four banks, so the rows a fragment load
  // touches fall in different banks; the XOR swizzle permutes 16-byte chunks per row instead.
  tile.rowStride = ldsRowStride(target, elemType.getIntOrFloatBitWidth(), cols);
  return tile;
}

LdsTile KernelBuilder::allocLds(gpu::GPUFuncOp func, Type elemType, int rows, int cols) {
  LdsTile tile = ldsTileShape(target, elemType, rows, cols);
  auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto type = MemRefType::get({tile.elements()}, elemType, MemRefLayoutAttrInterface{}, space);
  tile.memref = func.addWorkgroupAttribution(type, loc);
  return tile;
}

LdsTile KernelBuilder::ldsTileIn(Value arena, int64_t byteOffset, Type elemType, int rows,
                                 int cols) {
  LdsTile tile = ldsTileShape(target, elemType, rows, cols);
  auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto type = MemRefType::get({tile.elements()}, elemType, MemRefLayoutAttrInterface{}, space);
  tile.memref = memref::ViewOp::create(b, loc, type, arena, idx(byteOffset), ValueRange{});
  return tile;
}

// `v` as a part computed at run time plus a constant, looking through additions and
// multiplications by constants (a null part: none).
static std::pair<Value, int64_t> splitConstant(KernelBuilder &kb, Value v) {
  if (auto c = getConstantIntValue(v)) return {Value(), *c};
  auto join = [&](Value x, Value y) { return !x ? y : !y ? x : kb.add(x, y); };
  if (auto add = v.getDefiningOp<arith::AddIOp>()) {
    auto [x, cx] = splitConstant(kb, add.getLhs());
    auto [y, cy] = splitConstant(kb, add.getRhs());
    return cx || cy ? std::pair{join(x, y), cx + cy} : std::pair{v, int64_t(0)};
  }
  if (auto mul = v.getDefiningOp<arith::MulIOp>()) {
    std::optional<int64_t> k = getConstantIntValue(mul.getRhs());
    Value other = mul.getLhs();
    if (!k) k = getConstantIntValue(mul.getLhs()), other = mul.getRhs();
    if (!k) return {v, 0};
    auto [x, cx] = splitConstant(kb, other);
    if (!cx) return {v, 0};
    return {x ? kb.mul(x, *k) : Value(), cx * *k};
  }
  return {v, 0};
}

static int64_t floorMod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

// The offset is a base plus a constant: the constant parts of row and col leave the base (but
// for their residues modulo the swizzle's period), so the fragments of one tile at constant
// offsets share a few bases and the constants fold into the loads' immediates.
Value KernelBuilder::ldsOffset(const LdsTile &tile, Value row, Value col) {
  auto [rowVar, rowConst] = splitConstant(*this, row);
  auto [colVar, colConst] = splitConstant(*this, col);
  if (!rowVar) rowVar = idx(0);
  if (!colVar) colVar = idx(0);
  // The variable part plus the buffer's origin, then the constant (folded into addresses).
  auto offset = [&](Value var, int64_t constant) {
    return add(tile.origin ? add(var, tile.origin) : var, constant);
  };
  // XOR with bits of the row permutes the chunks within aligned groups of `group` chunks: the
  // largest power of two dividing the chunk count, at most 8 (128 bytes, every bank), so the
  // swizzled chunk stays inside the row. Eight consecutive rows then read one chunk column
  // from eight different 16-byte bank groups (one wavefront): the row stride itself spreads them
  // over 8 / group positions (a row of 96 halves, 12 chunks, starts 4 chunks past the previous
  // one modulo 8), and the XOR with row / (8 / group) covers the rest.
  int chunks = tile.cols / tile.chunk;
  int group = tile.swizzle == LdsSwizzle::Pad ? 1 : std::min(chunks & -chunks, 8);
  if (group <= 1)
    return offset(add(mul(rowVar, tile.rowStride), colVar), rowConst * tile.rowStride + colConst);
  // Whole periods (8 rows, group chunks) shift the swizzled offset by a constant.
  int64_t rowLo = floorMod(rowConst, 8), colLo = floorMod(colConst, group * tile.chunk);
  Value r = add(rowVar, rowLo), c = add(colVar, colLo);
  Value rowBits = andi(divui(r, 8 / group), group - 1);
  Value chunk = xori(divui(c, tile.chunk), rowBits);
  Value base = add(add(mul(r, tile.rowStride), mul(chunk, tile.chunk)), remui(c, tile.chunk));
  return offset(base, (rowConst - rowLo) * tile.rowStride + (colConst - colLo));
}

LdsTile KernelBuilder::buffer(const LdsTile &tiles, int buffers, Value which) {
  LdsTile one = tiles;
  one.rows = tiles.rows / buffers;
  if (buffers > 1) {
    Value offset = mul(which, one.elements());
    one.origin = tiles.origin ? add(tiles.origin, offset) : offset;
  }
  return one;
}

LdsTile KernelBuilder::columns(const LdsTile &tile, int parts, Value which) {
  assert(tile.swizzle == LdsSwizzle::Pad && "column parts of an XOR-swizzled tile");
  LdsTile part = tile;
  part.cols = tile.cols / parts;
  Value offset = mul(which, part.cols);
  part.origin = tile.origin ? add(tile.origin, offset) : offset;
  return part;
}

void KernelBuilder::enterIf(Value cond) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  b.setInsertionPointToStart(ifOp.thenBlock());
}

// Thread `tid` moves the 16-byte vectors tid, tid + threads, ... of the tile, numbered row by
// row in the global tile's orientation.
namespace {
struct TileVector {
  Value index, row, col; ///< vector number, and its first element's (row, col)
  bool partial;          ///< some threads have no vector in this round
  int total;             ///< vectors in the tile
};
} // namespace

/// Whether this thread's vector `t` is in the tile (always, unless t.partial).
static Value inTile(KernelBuilder &kb, const TileVector &t) {
  return kb.cmpLt(t.index, kb.idx(t.total));
}

/// Opens `if (inTile(t))` where some threads have no vector `t`; the caller's InsertionGuard
/// closes it.
static void enterTile(KernelBuilder &kb, const TileVector &t) {
  if (t.partial) kb.enterIf(inTile(kb, t));
}

static SmallVector<TileVector> tileVectors(KernelBuilder &kb, int rows, int cols, int vec,
                                           int threads) {
  const int vectorsPerRow = cols / vec, total = rows * vectorsPerRow;
  SmallVector<TileVector> out;
  Value tid = kb.threadId();
  for (int first = 0; first < total; first += threads) {
    Value v = kb.add(tid, first);
    out.push_back({v, kb.divui(v, vectorsPerRow), kb.mul(kb.remui(v, vectorsPerRow), vec),
                   first + threads > total, total});
  }
  return out;
}

static int vectorElems(Type elemType) { return 128 / elemType.getIntOrFloatBitWidth(); }

namespace {
/// A vector of a row narrower than its tile by whole vectors: whether it lies in the row, and the
/// column to load it from (past the row, column 0, inside it; the load is then replaced by zeros,
/// so such a vector needs no branch of its own).
struct NarrowRowColumn {
  Value inRow, col;
};
} // namespace

/// For `validCols` a constant below `tileCols` and a multiple of `vec`, the vector at `col`;
/// nothing for a row as wide as its tile (or one that ends inside a vector).
static std::optional<NarrowRowColumn> narrowRowColumn(KernelBuilder &kb, Value validCols,
                                                      int tileCols, int vec, Value col) {
  std::optional<int64_t> rowCols = validCols ? getConstantIntValue(validCols) : std::nullopt;
  if (!rowCols || *rowCols >= tileCols || *rowCols % vec) return std::nullopt;
  Value inRow = kb.cmpLt(col, validCols);
  return NarrowRowColumn{inRow, kb.select(inRow, col, kb.idx(0))};
}

Value KernelBuilder::loadTileVector(Value memref, Value rowOk, Value col, Value validCols,
                                    Value vectorOk, int tileCols,
                                    llvm::function_ref<Value(Value)> offset,
                                    bool offsetInBranches) {
  Type elemType = cast<MemRefType>(memref.getType()).getElementType();
  const int vec = vectorElems(elemType);
  auto vecType = VectorType::get({vec}, elemType);
  // A row narrower than the tile by whole vectors: a vector past it takes no branch of its own
  // (a lane of a wave there would otherwise run the element-wise path beside the others' vectors).
  std::optional<NarrowRowColumn> narrow = narrowRowColumn(*this, validCols, tileCols, vec, col);
  if (narrow) col = narrow->col;
  Value fullVector = narrow ? andb(rowOk, vectorOk)
                            : andb(andb(rowOk, cmpLe(add(col, vec), validCols)), vectorOk);
  Value shared = offsetInBranches ? Value() : offset(col);
  auto at = [&] { return shared ? shared : offset(col); };
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{vecType}, fullVector, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Value load = vector::LoadOp::create(b, loc, vecType, memref, ValueRange{at()},
                                      /*nontemporal=*/false, llvm::Align(16));
  scf::YieldOp::create(b, loc, load);
  // Tail or misaligned vector: element by element, zero outside the matrix.
  b.setInsertionPointToStart(ifOp.elseBlock());
  SmallVector<Value> elems;
  for (int j = 0; j < vec; ++j) {
    Value ok = narrow ? rowOk : andb(rowOk, cmpLt(add(col, j), validCols));
    auto e = scf::IfOp::create(b, loc, TypeRange{elemType}, ok, /*withElse=*/true);
    b.setInsertionPointToStart(e.thenBlock());
    Value x = memref::LoadOp::create(b, loc, memref, ValueRange{add(at(), j)});
    scf::YieldOp::create(b, loc, x);
    b.setInsertionPointToStart(e.elseBlock());
    scf::YieldOp::create(b, loc, zero(elemType));
    b.setInsertionPointAfter(e);
    elems.push_back(e.getResult(0));
  }
  scf::YieldOp::create(b, loc, vector::FromElementsOp::create(b, loc, vecType, elems).getResult());
  b.setInsertionPointAfter(ifOp);
  return narrow ? select(narrow->inRow, ifOp.getResult(0), zero(vecType)) : ifOp.getResult(0);
}

void KernelBuilder::storeVector(Value x, Value memref, Value at, Value vectorOk) {
  auto type = cast<VectorType>(x.getType());
  auto ifOp = scf::IfOp::create(b, loc, vectorOk, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  vector::StoreOp::create(b, loc, x, memref, ValueRange{at}, false,
                          llvm::Align(type.getNumElements() *
                                      type.getElementType().getIntOrFloatBitWidth() / 8));
  b.setInsertionPointToStart(ifOp.elseBlock());
  for (int j = 0; j < type.getNumElements(); ++j)
    memref::StoreOp::create(b, loc, vector::ExtractOp::create(b, loc, x, j), memref,
                            ValueRange{add(at, j)});
}

Value KernelBuilder::loadVector(VectorType type, Value memref, Value at, Value vectorOk) {
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{type}, vectorOk, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  Value whole = vector::LoadOp::create(
      b, loc, type, memref, ValueRange{at}, false,
      llvm::Align(type.getNumElements() * type.getElementType().getIntOrFloatBitWidth() / 8));
  scf::YieldOp::create(b, loc, whole);
  b.setInsertionPointToStart(ifOp.elseBlock());
  SmallVector<Value> elems;
  for (int j = 0; j < type.getNumElements(); ++j)
    elems.push_back(memref::LoadOp::create(b, loc, memref, ValueRange{add(at, j)}));
  scf::YieldOp::create(b, loc, vector::FromElementsOp::create(b, loc, type, elems).getResult());
  return ifOp.getResult(0);
}

Value KernelBuilder::allMultiplesOf(ValueRange values, int64_t n) {
  Value ok = arith::ConstantIntOp::create(b, loc, 1, 1);
  for (Value v : values)
    ok = andb(ok, cmpEq(remui(v, n), idx(0)));
  return ok;
}

SmallVector<Value> KernelBuilder::loadGlobalTile(const GlobalTile &src, int rows, int cols,
                                                 int threads) {
  Type elemType = cast<MemRefType>(src.memref.getType()).getElementType();
  const int vec = vectorElems(elemType);
  SmallVector<Value> out;
  for (const TileVector &t : tileVectors(*this, rows, cols, vec, threads)) {
    if (src.inBounds) {
      // Threads past the tile read its last row (their vector is never stored).
      Value row = t.partial ? minsi(t.row, idx(rows - 1)) : t.row;
      std::optional<NarrowRowColumn> narrow =
          narrowRowColumn(*this, src.validCols, cols, vec, t.col);
      Value col = narrow ? narrow->col : t.col;
      Value load = vector::LoadOp::create(b, loc, VectorType::get({vec}, elemType), src.memref,
                                          ValueRange{add(src.base, add(mul(row, src.ld), col))},
                                          /*nontemporal=*/false, llvm::Align(16));
      out.push_back(narrow ? select(narrow->inRow, load, zero(load.getType())) : load);
      continue;
    }
    Value rowOk = cmpLt(t.row, src.validRows);
    // Threads past the tile (when `threads` does not divide it) load nothing.
    if (t.partial) rowOk = andb(rowOk, inTile(*this, t));
    out.push_back(loadTileVector(src.memref, rowOk, t.col, src.validCols, src.vectorOk, cols,
                                 [&](Value col) { return add(src.base, add(mul(t.row, src.ld), col)); },
                                 /*offsetInBranches=*/false));
  }
  return out;
}

SmallVector<Value> KernelBuilder::loadGlobalRows(Value memref,
                                                 llvm::function_ref<Value(Value)> rowStart,
                                                 Value validRows, Value validCols,
                                                 Value vectorOk, int rows, int cols,
                                                 int threads) {
  Type elemType = cast<MemRefType>(memref.getType()).getElementType();
  const int vec = vectorElems(elemType);
  SmallVector<Value> out;
  for (const TileVector &t : tileVectors(*this, rows, cols, vec, threads)) {
    Value rowOk = cmpLt(t.row, validRows);
    if (t.partial) rowOk = andb(rowOk, inTile(*this, t));
    // rowStart runs only where the row is loaded (it may read an index table).
    out.push_back(loadTileVector(memref, rowOk, t.col, validCols, vectorOk, cols,
                                 [&](Value col) { return add(rowStart(t.row), col); },
                                 /*offsetInBranches=*/true));
  }
  return out;
}

void KernelBuilder::storeLdsTile(ArrayRef<Value> vectors, const LdsTile &dst, int rows, int cols,
                                 bool transpose, int threads) {
  auto type = cast<VectorType>(vectors.front().getType());
  // The vectors' length is the loads' (a widened fp8 vector spans several 16-byte parts, a
  // narrowed one, queries rounded to fp8, part of one).
  const int vec = int(type.getNumElements());
  const int part = std::min(vec, vectorElems(type.getElementType()));
  const int partBytes = part * int(type.getElementTypeBitWidth()) / 8;
  for (auto [t, data] : llvm::zip(tileVectors(*this, rows, cols, vec, threads), vectors)) {
    OpBuilder::InsertionGuard g(b);
    enterTile(*this, t);
    if (!transpose) {
      for (int j = 0; j < vec; j += part) {
        Value x = data;
        if (vec != part) {
          auto lanes = llvm::to_vector(llvm::seq<int64_t>(j, j + part));
          x = vector::ShuffleOp::create(b, loc, data, data, lanes);
        }
        vector::StoreOp::create(b, loc, x, dst.memref,
                                ValueRange{ldsOffset(dst, t.row, add(t.col, j))},
                                /*nontemporal=*/false, llvm::Align(partBytes));
      }
      continue;
    }
    for (int j = 0; j < vec; ++j) {
      Value x = vector::ExtractOp::create(b, loc, data, j);
      memref::StoreOp::create(b, loc, x, dst.memref,
                              ValueRange{ldsOffset(dst, add(t.col, j), t.row)});
    }
  }
}

SmallVector<std::pair<Value, Value>>
KernelBuilder::tileVectorStarts(int rows, int cols, Type elemType, int threads,
                                int vectorBytes) {
  SmallVector<std::pair<Value, Value>> out;
  const int vec = vectorBytes * 8 / elemType.getIntOrFloatBitWidth();
  for (const TileVector &t : tileVectors(*this, rows, cols, vec, threads)) {
    if (!t.partial) {
      out.push_back({t.row, t.col});
      continue;
    }
    Value in = inTile(*this, t);
    out.push_back({select(in, t.row, idx(0)), select(in, t.col, idx(cols))});
  }
  return out;
}

SmallVector<Value> KernelBuilder::loadLdsTile(const LdsTile &src, int rows, int cols, int threads,
                                              int vectorBytes) {
  Type elemType = cast<MemRefType>(src.memref.getType()).getElementType();
  const int vec = vectorBytes * 8 / elemType.getIntOrFloatBitWidth();
  auto type = VectorType::get({vec}, elemType);
  SmallVector<Value> out;
  for (const TileVector &t : tileVectors(*this, rows, cols, vec, threads)) {
    // A partial last round reads row 0 (in bounds); storeLdsTile skips its store.
    Value row = t.partial ? select(inTile(*this, t), t.row, idx(0)) : t.row;
    out.push_back(vector::LoadOp::create(b, loc, type, src.memref,
                                         ValueRange{ldsOffset(src, row, t.col)}, false,
                                         llvm::Align(vectorBytes)));
  }
  return out;
}

void KernelBuilder::copyGlobalToLds(const GlobalTile &src, const LdsTile &dst, int rows,
                                    int cols, bool transpose, int threads) {
  storeLdsTile(loadGlobalTile(src, rows, cols, threads), dst, rows, cols, transpose, threads);
}

void KernelBuilder::copyGlobalToLdsAsync(const GlobalTile &src, const LdsTile &dst, int rows,
                                         int cols, int threads) {
  assert(target.hasAsyncCopy && "copyGlobalToLdsAsync on a target without async copies");
  Type elemType = cast<MemRefType>(src.memref.getType()).getElementType();
  const int vec = vectorElems(elemType);
  for (const TileVector &t : tileVectors(*this, rows, cols, vec, threads)) {
    OpBuilder::InsertionGuard gv(b);
    enterTile(*this, t);
    // A row past the valid ones copies nothing from row 0 (in bounds): zeros only.
    Value rowOk = cmpLt(t.row, src.validRows);
    Value row = select(rowOk, t.row, idx(0));
    Value inRow = minsi(maxsi(sub(src.validCols, t.col), idx(0)), idx(vec));
    Value count = select(rowOk, inRow, idx(0));
    asyncCopy(dst.memref, ldsOffset(dst, t.row, t.col), src.memref,
              add(src.base, add(mul(row, src.ld), t.col)), vec, count);
  }
}

void KernelBuilder::copyGlobalRowsToLdsAsync(Value memref,
                                             llvm::function_ref<Value(Value)> rowStart,
                                             Value validRows, const LdsTile &dst, int rows,
                                             int cols, int threads) {
  assert(target.hasAsyncCopy && "copyGlobalRowsToLdsAsync on a target without async copies");
  Type elemType = cast<MemRefType>(memref.getType()).getElementType();
  const int vec = vectorElems(elemType);
  for (const TileVector &t : tileVectors(*this, rows, cols, vec, threads)) {
    OpBuilder::InsertionGuard gv(b);
    enterTile(*this, t);
    // A row past the valid ones copies nothing (zeros) from element 0, its start never computed.
    Value rowOk = cmpLt(t.row, validRows);
    auto start = scf::IfOp::create(b, loc, TypeRange{b.getIndexType()}, rowOk, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard gs(b);
      b.setInsertionPointToStart(start.thenBlock());
      scf::YieldOp::create(b, loc, add(rowStart(t.row), t.col));
      b.setInsertionPointToStart(start.elseBlock());
      scf::YieldOp::create(b, loc, idx(0));
    }
    asyncCopy(dst.memref, ldsOffset(dst, t.row, t.col), memref, start.getResult(0), vec,
              select(rowOk, idx(vec), idx(0)));
  }
}

void KernelBuilder::asyncCopy(Value dst, Value dstIndex, Value src, Value srcIndex, int elements,
                              Value srcElements) {
  Type elemType = cast<MemRefType>(src.getType()).getElementType();
  // 16-byte copies skip L1 (cp.async.cg): the tile is read once, from LDS.
  bool wholeLine = elements * elemType.getIntOrFloatBitWidth() == 128;
  nvgpu::DeviceAsyncCopyOp::create(b, loc, dst, ValueRange{dstIndex}, src, ValueRange{srcIndex},
                                   b.getIndexAttr(elements), srcElements,
                                   wholeLine ? b.getUnitAttr() : UnitAttr());
}

void KernelBuilder::asyncCommit() { NVVM::CpAsyncCommitGroupOp::create(b, loc); }

void KernelBuilder::asyncWait(int pending) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, b.getI32IntegerAttr(pending));
}

//===----------------------------------------------------------------------===//
// Fragments and matrix-core ops
//===----------------------------------------------------------------------===//

Value KernelBuilder::concat(ArrayRef<Value> pieces) {
  Value acc = pieces.front();
  for (Value piece : pieces.drop_front()) {
    int64_t n = cast<VectorType>(acc.getType()).getNumElements() +
                cast<VectorType>(piece.getType()).getNumElements();
    SmallVector<int64_t> mask(n);
    for (int64_t i = 0; i < n; ++i) mask[i] = i;
    acc = vector::ShuffleOp::create(b, loc, acc, piece, mask);
  }
  return acc;
}

Value KernelBuilder::loadFragment(const LdsTile &tile, const OperandLayout &layout, bool isB,
                                  Value lane, Value outerBase, int kBase) {
  Type elemType = cast<MemRefType>(tile.memref.getType()).getElementType();
  // Elements of one lane that are consecutive along K are one vector load, at most one
  // 16-byte chunk so that XOR-swizzled rows stay contiguous.
  int run = std::min(isB ? layout.contiguousAlongRows() : layout.contiguousAlongCols(),
                     tile.chunk);
  auto [laneRow, laneCol] = laneCoord(layout, lane);
  Value laneOuter = isB ? laneCol : laneRow, laneK = isB ? laneRow : laneCol;
  SmallVector<Value> pieces;
  for (int e = 0; e < layout.elementsPerLane(); e += run) {
    Coord c = layout.at(0, e);
    int outer = isB ? c.col : c.row, k = isB ? c.row : c.col;
    Value offset = ldsOffset(tile, add(add(outerBase, laneOuter), outer), add(laneK, kBase + k));
    int bytes = run * elemType.getIntOrFloatBitWidth() / 8;
    pieces.push_back(vector::LoadOp::create(b, loc, VectorType::get({run}, elemType),
                                            tile.memref, ValueRange{offset},
                                            /*nontemporal=*/false, llvm::Align(bytes)));
  }
  return concat(pieces);
}

Value KernelBuilder::loadOperand(const LdsTile &tile, const MMAAtom &atom, Operand which,
                                 Value lane, Value outerBase, int kBase, bool kAlongRows) {
  if (atom.kind == AtomKind::MMASync)
    return ldmatrixOperand(tile, atom, which, lane, outerBase, kBase, kAlongRows, false);
  bool isB = which == Operand::B;
  const OperandLayout &layout = isB ? atom.b : atom.a;
  if (!kAlongRows) return loadFragment(tile, layout, isB, lane, outerBase, kBase);
  Type elemType = cast<MemRefType>(tile.memref.getType()).getElementType();
  if (target.transposingLoads(atom)) {
    // ds_read_b64_tr_b16 (OperandLayout::transposeReadsFit): lane s reads 4 elements of the row
    // n = (s / 4) % 4 of the runs its group's lanes l0 .. l0 + 3 receive, l0 = 16 (s / 16) +
    // 4 (s % 4); each lane then holds its own run down a column.
    Value l0 = add(andi(lane, ~int64_t(15)), mul(remui(lane, 4), 4));
    Value n = remui(divui(lane, 4), 4);
    auto [laneRow, laneCol] = laneCoord(layout, l0);
    Value laneOuter = isB ? laneCol : laneRow, laneK = add(isB ? laneRow : laneCol, n);
    auto type = VectorType::get({4}, elemType);
    SmallVector<Value> pieces;
    for (int e = 0; e < layout.elementsPerLane(); e += 4) {
      Coord c = layout.at(0, e);
      Value row = add(laneK, kBase + (isB ? c.row : c.col));
      Value col = add(add(outerBase, laneOuter), isB ? c.col : c.row);
      pieces.push_back(amdgpu::TransposeLoadOp::create(b, loc, type, tile.memref,
                                                       ValueRange{ldsOffset(tile, row, col)}));
    }
    return concat(pieces);
  }
  // A [K][outer] tile without transposing matrix loads: the lane's elements run down a column,
  // one LDS read each.
  auto [laneRow, laneCol] = laneCoord(layout, lane);
  Value laneOuter = isB ? laneCol : laneRow, laneK = isB ? laneRow : laneCol;
  SmallVector<Value> elems;
  for (int e = 0; e < layout.elementsPerLane(); ++e) {
    Coord c = layout.at(0, e);
    Value row = add(laneK, kBase + (isB ? c.row : c.col));
    Value col = add(add(outerBase, laneOuter), isB ? c.col : c.row);
    elems.push_back(memref::LoadOp::create(b, loc, tile.memref, ValueRange{ldsOffset(tile, row, col)}));
  }
  auto type = VectorType::get({int64_t(elems.size())}, elemType);
  return vector::FromElementsOp::create(b, loc, type, elems);
}

void KernelBuilder::atomicAdd(Value value, Value memref, Value index) {
  memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf, value, memref, ValueRange{index});
}

void KernelBuilder::atomicAddContiguous(ArrayRef<Value> values, Value memref, Value index) {
  auto type = VectorType::get({int64_t(values.size())}, b.getF32Type());
  tessera::AtomicAddFOp::create(b, loc, vector::FromElementsOp::create(b, loc, type, values),
                                memref, index);
}

// ldmatrix moves blocks of 8 rows of 16 bytes (8 x 8 16-bit elements, 8 x 16 8-bit ones): lane
// 8j + r gives the address of row r of block j, and every lane receives the 4 bytes at
// 4 (lane % 4) of each block's row lane / 4 (two 16-bit elements, four 8-bit ones), or with
// .trans (16-bit only) of its column. For the mma.sync operands (m16n8k16, the 8-bit m16n8k32)
// this is exactly the fragment layout when the blocks are taken in register order, `kb` the
// block's K extent (8 or 16):
//   A (16 x 2kb): blocks (rows 0-7 | 8-15) x (k 0.. | kb..), row-block fastest;
//   B (2kb x 8):  blocks k 0.., k kb..; two B tiles side by side (x4): the second's after.
// Block origins below are in stored-tile coordinates (tile row, tile column).
Value KernelBuilder::ldmatrixOperand(const LdsTile &tile, const MMAAtom &atom, Operand which,
                                     Value lane, Value outerBase, int kBase, bool kAlongRows,
                                     bool pair) {
  Type elem = cast<MemRefType>(tile.memref.getType()).getElementType();
  const int bits = int(elem.getIntOrFloatBitWidth());
  assert((bits == 16 || (bits == 8 && !kAlongRows)) && "ldmatrix transposes 16-bit elements only");
  const int kBlock = 128 / bits;
  bool isA = which == Operand::A;
  int blocks = isA || pair ? 4 : 2;
  SmallVector<std::pair<int, int>> origin; // (outer offset, k offset) per block
  for (int j = 0; j < blocks; ++j)
    origin.push_back(isA ? std::pair{8 * (j % 2), kBlock * (j / 2)}
                         : std::pair{8 * (j / 2), kBlock * (j % 2)});
  Value laneInBlocks = remui(lane, 8 * blocks);
  Value block = divui(laneInBlocks, 8), row = remui(laneInBlocks, 8);
  // The block origin of this lane, as index arithmetic over its block number.
  Value outerOff = idx(0), kOff = idx(0);
  for (int j = 1; j < blocks; ++j) {
    Value isJ = cmpEq(block, idx(j));
    outerOff = arith::SelectOp::create(b, loc, isJ, idx(origin[j].first), outerOff);
    kOff = arith::SelectOp::create(b, loc, isJ, idx(origin[j].second), kOff);
  }
  Value outer = add(outerBase, outerOff), k = add(idx(kBase), kOff);
  // Stored [outer][k]: the lane's row runs along outer. Stored [k][outer] (.trans): along k.
  Value tileRow = kAlongRows ? add(k, row) : add(outer, row);
  Value tileCol = kAlongRows ? outer : k;
  auto type = VectorType::get({blocks, 32 / bits}, elem);
  Value frag = nvgpu::LdMatrixOp::create(b, loc, type, tile.memref,
                                         ValueRange{ldsOffset(tile, tileRow, tileCol)},
                                         b.getBoolAttr(kAlongRows), b.getI32IntegerAttr(blocks));
  // Rows of the 2-D result, concatenated (an n-D shape_cast does not lower to NVVM directly).
  SmallVector<Value> rows;
  for (int j = 0; j < blocks; ++j) rows.push_back(vector::ExtractOp::create(b, loc, frag, j));
  return concat(rows);
}

SmallVector<Value> KernelBuilder::loadOperands(const LdsTile &tile, const MMAAtom &atom,
                                               Operand which, Value lane,
                                               ArrayRef<Value> outerBases, int kBase,
                                               bool kAlongRows) {
  SmallVector<Value> frags;
  bool pairs = atom.kind == AtomKind::MMASync && which == Operand::B;
  for (size_t i = 0; i < outerBases.size(); ++i) {
    if (!pairs || i + 1 == outerBases.size()) {
      frags.push_back(loadOperand(tile, atom, which, lane, outerBases[i], kBase, kAlongRows));
      continue;
    }
    Value both = ldmatrixOperand(tile, atom, which, lane, outerBases[i], kBase, kAlongRows,
                                 /*pair=*/true);
    const int half = atom.b.elementsPerLane();
    for (int t = 0; t < 2; ++t) {
      SmallVector<int64_t> mask;
      for (int e = 0; e < half; ++e) mask.push_back(t * half + e);
      frags.push_back(vector::ShuffleOp::create(b, loc, both, both, mask));
    }
    ++i;
  }
  return frags;
}

VectorType KernelBuilder::accType(const MMAAtom &atom) {
  return VectorType::get({atom.c.elementsPerLane()}, b.getF32Type());
}

Value KernelBuilder::mma(const MMAAtom &atom, Value a, Value bFrag, Value c) {
  switch (atom.kind) {
  case AtomKind::MFMA:
    return amdgpu::MFMAOp::create(b, loc, accType(atom), atom.m, atom.n, atom.k, /*blocks=*/1,
                                  a, bFrag, c);
  case AtomKind::WMMA:
    return amdgpu::WMMAOp::create(b, loc, accType(atom), b.getI32IntegerAttr(atom.m),
                                  b.getI32IntegerAttr(atom.n), b.getI32IntegerAttr(atom.k), a,
                                  bFrag, c);
  case AtomKind::MMASync:
    return mmaSync(atom, a, bFrag, c);
  }
  llvm_unreachable("unknown atom kind");
}

// nvvm.mma.sync takes A and B as 32-bit registers of two elements each (f16 pairs as
// vector<2xf16>, bf16 pairs as i32) and C as scalars, and returns a struct of scalars. Its dense
// form has no fp8 inputs (MLIR 22); those go to LLVM's intrinsic directly, four bytes an i32.
Value KernelBuilder::mmaSync(const MMAAtom &atom, Value a, Value bFrag, Value c) {
  const bool bf16 = atom.inputType == ElemType::BF16;
  const int perRegister = 32 / elemTypeBits(atom.inputType);
  auto registers = [&](Value frag) {
    SmallVector<Value> regs;
    int n = cast<VectorType>(frag.getType()).getNumElements();
    for (int i = 0; i < n; i += perRegister) {
      auto lanes = llvm::to_vector(llvm::seq<int64_t>(i, i + perRegister));
      Value part = vector::ShuffleOp::create(b, loc, frag, frag, lanes);
      if (bf16 || perRegister == 4) {
        auto word = vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()), part);
        part = vector::ExtractOp::create(b, loc, word, 0);
      }
      regs.push_back(part);
    }
    return regs;
  };
  int accElems = atom.c.elementsPerLane();
  SmallVector<Value> accIn;
  for (int i = 0; i < accElems; ++i) accIn.push_back(vector::ExtractOp::create(b, loc, c, i));
  SmallVector<Type> fields(accElems, b.getF32Type());
  auto resultType = LLVM::LLVMStructType::getLiteral(b.getContext(), fields);
  Value d;
  if (perRegister == 4) {
    assert(atom.inputType == ElemType::FP8E4M3FN && atom.k == 32 && "mma.sync e4m3 m16n8k32 only");
    SmallVector<Value> operands = registers(a);
    operands.append(registers(bFrag));
    operands.append(accIn);
    d = LLVM::CallIntrinsicOp::create(b, loc, resultType,
                                      b.getStringAttr(kMmaSyncE4M3Intrinsic), operands)
            .getResult(0);
  } else {
    auto ptx = bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
    d = NVVM::MmaOp::create(b, loc, resultType, registers(a), registers(bFrag), accIn,
                            ArrayRef<int64_t>{atom.m, atom.n, atom.k}, std::nullopt, std::nullopt,
                            std::array<NVVM::MMATypes, 2>{ptx, ptx},
                            std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                                           NVVM::MMALayout::col});
  }
  SmallVector<Value> out;
  for (int i = 0; i < accElems; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, d, i));
  return vector::FromElementsOp::create(b, loc, accType(atom), out);
}

void KernelBuilder::storeAccumulator(const MMAAtom &atom, Value acc, const GlobalTile &dst,
                                     Value lane, Value rowBase, Value colBase) {
  Type outType = cast<MemRefType>(dst.memref.getType()).getElementType();
  auto [laneRow, laneCol] = laneCoord(atom.c, lane);
  Value row0 = add(rowBase, laneRow), col0 = add(colBase, laneCol);
  for (int e = 0; e < atom.c.elementsPerLane(); ++e) {
    Coord c = atom.c.at(0, e);
    Value row = add(row0, c.row), col = add(col0, c.col);
    Value ok = andb(cmpLt(row, dst.validRows), cmpLt(col, dst.validCols));
    auto ifOp = scf::IfOp::create(b, loc, ok, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value x = convert(vector::ExtractOp::create(b, loc, acc, e), outType);
    memref::StoreOp::create(b, loc, x, dst.memref, ValueRange{add(dst.base, add(mul(row, dst.ld), col))});
  }
}

Value KernelBuilder::convert(Value v, Type to) {
  Type from = v.getType();
  if (from == to) return v;
  if (from.getIntOrFloatBitWidth() > to.getIntOrFloatBitWidth())
    return arith::TruncFOp::create(b, loc, to, v);
  return arith::ExtFOp::create(b, loc, to, v);
}

Value KernelBuilder::convertFinite(Value v, Type to) {
  if (target.hasBf16Convert || !v.getType().isF32() || !to.isBF16()) return convert(v, to);
  // Round to nearest even: add 0x7fff plus the kept part's lowest bit, keep the upper half.
  Type i32 = b.getI32Type();
  auto c = [&](int64_t x) { return arith::ConstantIntOp::create(b, loc, x, 32).getResult(); };
  Value bits = arith::BitcastOp::create(b, loc, i32, v);
  Value lsb = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bits, c(16)), c(1));
  Value rounded = arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, bits, c(0x7fff)), lsb);
  Value high = arith::TruncIOp::create(b, loc, b.getI16Type(),
                                       arith::ShRUIOp::create(b, loc, rounded, c(16)));
  return arith::BitcastOp::create(b, loc, to, high);
}

void KernelBuilder::barrier() { gpu::BarrierOp::create(b, loc); }

void KernelBuilder::memoryScheduleFence() {
  if (!target.isAMD()) {
    // bar.warp.sync: ptxas moves no memory operation across it (its arithmetic may).
    NVVM::SyncWarpOp::create(b, loc, arith::ConstantIntOp::create(b, loc, -1, 32));
    return;
  }
  using amdgpu::sched_barrier_opt_enum;
  auto computeMayCross = sched_barrier_opt_enum::non_mem_non_sideffect |
                         sched_barrier_opt_enum::valu | sched_barrier_opt_enum::salu |
                         sched_barrier_opt_enum::mfma_wmma |
                         sched_barrier_opt_enum::transcendental;
  amdgpu::SchedBarrierOp::create(
      b, loc, amdgpu::sched_barrier_opt_enumAttr::get(b.getContext(), computeMayCross));
}

std::optional<ElemType> toElemType(Type t) {
  if (t.isF16()) return ElemType::F16;
  if (t.isBF16()) return ElemType::BF16;
  if (t.isF32()) return ElemType::F32;
  if (isa<Float8E4M3FNUZType>(t)) return ElemType::FP8E4M3FNUZ;
  if (isa<Float8E4M3FNType>(t)) return ElemType::FP8E4M3FN;
  return std::nullopt;
}

Type toMlirType(MLIRContext *ctx, ElemType t) {
  switch (t) {
  case ElemType::F16: return Float16Type::get(ctx);
  case ElemType::BF16: return BFloat16Type::get(ctx);
  case ElemType::F32: return Float32Type::get(ctx);
  case ElemType::FP8E4M3FNUZ: return Float8E4M3FNUZType::get(ctx);
  case ElemType::FP8E4M3FN: return Float8E4M3FNType::get(ctx);
  }
  return {};
}

} // namespace tessera

#include "tessera/Codegen/Hopper/Epilogue.h"
#include "tessera/Codegen/Hopper/Descriptors.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace tessera::hopper {
namespace {

/// `smem` viewed as memref<bytes / size(elem) x elem> in workgroup memory.
Value sharedAs(KernelBuilder &kb, const StagedTile &tile, Type elem) {
  OpBuilder &b = kb.builder();
  auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  int bytes = elem.getIntOrFloatBitWidth() / 8;
  auto type = MemRefType::get({tile.smemBytes / bytes}, elem, MemRefLayoutAttrInterface(), space);
  return memref::ViewOp::create(b, kb.location(), type, tile.smem, kb.idx(0), ValueRange{});
}

/// The widest wgmma accumulator; narrower ones are its first N / 2 registers.
const OperandLayout &accumulator() {
  static const OperandLayout layout = *wgmmaAccumulatorLayout(256);
  return layout;
}

/// Thread t's row (or column) of value 0, summed over the layout's lane fields: a field within
/// a warp's 32 lanes reads the lane t % 32, one above it the warp t / 32 (one across both, t);
/// each higher field is the left operand (the IR of the formula this replaced: warp * 16 + lane / 4).
Value threadCoord(KernelBuilder &kb, Value t, bool alongRows) {
  constexpr int warpBits = 5;
  const int bits = int(accumulator().laneBases.size());
  Value sum;
  for (const LaneField &f : accumulator().laneFields()) {
    if (f.alongRows != alongRows) continue;
    Value v = t;
    int low = f.lowBit, width = bits;
    if (f.lowBit + f.bits <= warpBits) {
      v = kb.remui(t, 1 << warpBits), width = warpBits;
    } else if (f.lowBit >= warpBits) {
      v = kb.divui(t, 1 << warpBits), low -= warpBits, width -= warpBits;
    }
    if (low + f.bits < width) v = kb.remui(v, 1 << (low + f.bits));
    v = kb.mul(kb.divui(v, 1 << low), f.step);
    sum = sum ? kb.add(v, sum) : v;
  }
  return sum ? sum : kb.idx(0);
}

} // namespace

int AccumulatorLayout::group(int i) { return accumulator().at(0, i).col / 8; }
int AccumulatorLayout::half(int i) { return accumulator().at(0, i).row / 8; }
int AccumulatorLayout::index(int group, int half, int e) {
  return *accumulator().elementAt({8 * half, 8 * group + e});
}
Value AccumulatorLayout::firstRow(KernelBuilder &kb, Value t) { return threadCoord(kb, t, true); }
Value AccumulatorLayout::firstColumn(KernelBuilder &kb, Value t) {
  return threadCoord(kb, t, false);
}

Value EpilogueBuilder::chunkOffset(const StagedTile &tile, Value row, Value chunk) {
  Value swizzled = kb.xori(kb.remui(chunk, 8), kb.remui(row, 8));
  return kb.add(kb.add(tile.base, kb.mul(kb.divui(chunk, 8), 64 * kSwizzleBytes)),
                kb.add(kb.mul(row, kSwizzleBytes), kb.mul(swizzled, 16)));
}

void EpilogueBuilder::stage(const StagedTile &tile, ArrayRef<Value> acc, const Value rowScale[2],
                            Value t) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value words = sharedAs(kb, tile, b.getI32Type());
  auto pair = VectorType::get({2}, b.getF32Type());
  auto half = VectorType::get({2}, tile.elem);
  Value firstRow = AccumulatorLayout::firstRow(kb, t);
  Value columnBytes = kb.mul(AccumulatorLayout::firstColumn(kb, t), 2);
  for (int h = 0; h < 2; ++h) {
    Value row = kb.add(firstRow, h * 8);
    Value rowBase = kb.add(kb.add(tile.base, kb.mul(row, kSwizzleBytes)), columnBytes);
    // Column group j (8 columns, 16 bytes) is chunk j % 8 of panel j / 8.
    for (int j = 0; j < tile.columns / 8; ++j) {
      int panel = j / 8, chunk = j % 8;
      Value swizzled = kb.mul(kb.xori(kb.remui(row, 8), kb.idx(chunk)), 16);
      Value byte = kb.add(kb.add(rowBase, swizzled), panel * 64 * kSwizzleBytes);
      Value x0 = kb.fmul(acc[AccumulatorLayout::index(j, h, 0)], rowScale[h]);
      Value x1 = kb.fmul(acc[AccumulatorLayout::index(j, h, 1)], rowScale[h]);
      Value v = vector::FromElementsOp::create(b, loc, pair, ValueRange{x0, x1});
      Value bits = vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()),
                                             arith::TruncFOp::create(b, loc, half, v));
      memref::StoreOp::create(b, loc, vector::ExtractOp::create(b, loc, bits, int64_t(0)), words,
                              ValueRange{kb.divui(byte, 4)});
    }
  }
}

void EpilogueBuilder::storeByTma(const StagedTile &tile, Value map, ArrayRef<int64_t> box,
                                 llvm::function_ref<SmallVector<Value>(int)> coords) {
  for (int panel = 0; panel < tile.panels(); ++panel) {
    Value src = tma.view(tile.smem, kb.add(tile.base, panel * 64 * kSwizzleBytes), box, tile.elem);
    tma.tmaStore(src, map, coords(panel));
  }
  tma.commitBulkStores();
}

void EpilogueBuilder::storeByThreads(const StagedTile &tile, Value t, Value rows, Value dst,
                                     Value dstBase, Value rowStride, Value aligned) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  Value staged = sharedAs(kb, tile, tile.elem);
  auto chunkType = VectorType::get({8}, tile.elem);
  const int chunksPerRow = tile.columns / 8;
  // Consecutive threads take consecutive 16-byte chunks of a row: coalesced stores.
  for (int pass = 0; pass < StagedTile::rows * chunksPerRow / 128; ++pass) {
    Value linear = kb.add(t, pass * 128);
    Value row = kb.divui(linear, chunksPerRow), chunk = kb.remui(linear, chunksPerRow);
    Value data = vector::LoadOp::create(b, loc, chunkType, staged,
                                        ValueRange{kb.divui(chunkOffset(tile, row, chunk), 2)},
                                        /*nontemporal=*/false, llvm::Align(16));
    auto inside = scf::IfOp::create(b, loc, kb.cmpLt(row, rows), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(inside.thenBlock());
    Value at = kb.add(dstBase, kb.add(kb.mul(row, rowStride), kb.mul(chunk, 8)));
    auto vectorStore = scf::IfOp::create(b, loc, aligned, /*withElse=*/true);
    b.setInsertionPointToStart(vectorStore.thenBlock());
    vector::StoreOp::create(b, loc, data, dst, ValueRange{at}, /*nontemporal=*/false,
                            llvm::Align(16));
    b.setInsertionPointToStart(vectorStore.elseBlock());
    for (int e = 0; e < 8; ++e)
      memref::StoreOp::create(b, loc, vector::ExtractOp::create(b, loc, data, int64_t(e)), dst,
                              ValueRange{kb.add(at, e)});
  }
}

} // namespace tessera::hopper

// The flash_attn generator for sm_90a: a FlashAttention-3-style forward kernel.
//
// One workgroup of 3 warpgroups owns 128 queries of one (batch, head) (4 warpgroups and 192
// queries at head_dim 64 without a window or softcap):
//  - warpgroup 0 (producer, 24 registers): one elected thread issues TMA loads of Q and of K and
//    V into two-stage rings, guarded by full (transaction-count) and empty mbarriers;
//  - the consumers (240 registers; 160 with three), 64 queries each: S = Q K^T by SS wgmma, the
//    online softmax in registers, O += P V by RS wgmma with P straight from the S registers.
//    QK^T of tile n is in flight with PV of tile n-1 (intra-warpgroup overlap), and with two
//    consumers named barriers alternate their wgmma issue (pingpong) so one's softmax hides
//    under the other's GEMMs. The epilogue stages O through shared memory and stores it by TMA.
// Visibility, sequence lengths, scores, the online softmax and the ABI are the shared Attention/
// pieces;
// Q/K/V/O tails read as zero / are clipped by TMA bounds. Varlen batches: the tensor maps span
// the packed rows (total_q, total_k); rows a tile reads past its sequence's end belong to the
// next one and are masked (keys) or not stored (queries), and O is stored by the threads,
// row by row, since a TMA box would overwrite the next sequence.
#include "tessera/Codegen/Attention/Signature.h"
#include "tessera/Codegen/Attention/Softmax.h"
#include "tessera/Codegen/Attention/Visibility.h"
#include "tessera/Codegen/Generators.h"
#include "tessera/Codegen/Hopper.h"
#include "tessera/Codegen/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cassert>
#include <cmath>

using namespace mlir;

namespace tessera {
namespace {

using hopper::HopperBuilder;
using Acc = hopper::AccumulatorLayout; // which query row and key column each S/O value is
using CK = vector::CombiningKind;

/// The arguments of the sm_90a kernel: the flash_attn ABI, its TMA maps and the tile counter.
struct Sm90Args {
  attn::FlashAttnArgs attn;
  ArgHandle qTma, kTma, vTma, oTma; // oTma: not varlen
  ArgHandle tileCounter;            // persistent kernels
};

/// A window or chunks: each query's keys start past 0, and the kernel keeps the values that say
/// where (a chunk's are a window's for this kernel's shape and registers).
bool localMask(tessera::FlashAttnOp op) { return op.getSlidingWindow() || op.getAttentionChunk(); }

/// Every query block has the same key range (no causal mask, no window or chunks).
bool equalWorkTiles(tessera::FlashAttnOp op) {
  return op.getMask() == tessera::MaskKind::None && !localMask(op);
}

/// Kernels with a tile loop (persistent): not with a window, varlen, nor a causal mask with
/// softcap, whose extra live values spill in it (the ptxas gate shows it); the others launch one
/// workgroup per tile. Each workgroup's producer claims its next tile from the runtime's counter
/// `tile_counter` (FlashAttention-3's dynamic persistent scheduler): tiles differ in work
/// (causal tiles; the partial query block, whose idle consumers step over their key tiles), and
/// any static order leaves some workgroups idle at the end (bench/NOTES.md).
bool persistentCode(tessera::FlashAttnOp op) {
  return !localMask(op) && !op.getVarlen() &&
         (op.getMask() == tessera::MaskKind::None || !op.getSoftcap());
}

/// The tile plan of the sm_90a kernel.
struct Sm90Plan {
  int headDim = 0, blockN = 0;
  // Query heads per tile (pack_gqa): a consumer's 64 rows are `pack` heads x 64 / pack
  // queries, head-major, all reading one KV head.
  int pack = 1;
  int queriesPerConsumer() const { return consumerRows / pack; }
  int tileQueries() const { return blockM() / pack; }
  int stages = 2;  // of the K and V rings
  // Q buffers: with 2 the next tile's Q loads during this one, which pays on short causal
  // tiles (bench/NOTES.md).
  int qStages = 2;
  // Consumer warpgroups of 64 rows each, and the producer's.
  int consumers = 2;
  static constexpr int consumerRows = 64;
  int blockM() const { return consumers * consumerRows; }
  int threads() const { return (consumers + 1) * 128; }
  int consumerThreads() const { return consumers * 128; }
  /// setmaxnreg split. The workgroup starts at 64K / threads registers per thread (rounded down
  /// to 8); the consumers' increase is served from what the producer's decrease frees: 2
  /// consumers, (168 - 24) x 128 = 2 x (240 - 168) x 128 exactly; 3, (128 - 24) x 128 >=
  /// 3 x (160 - 128) x 128. A producer above 24 starves the consumers' allocation, which then
  /// spins forever (measured: a hang at 32 with 2 consumers).
  static constexpr int producerRegisters = 24;
  int consumerRegisters() const { return consumers == 2 ? 240 : 160; }
  int startRegisters() const { return 65536 / threads() / 8 * 8; }
  ElemType in = ElemType::BF16;
  Type elem;
  int panels() const { return headDim / hopper::kPanelElems; }
  int qBytesPerConsumer() const { return panels() * consumerRows * hopper::kSwizzleBytes; }
  int kvStageBytes() const { return panels() * blockN * hopper::kSwizzleBytes; }
  int qStageBytes() const { return consumers * qBytesPerConsumer(); }
  int qOffset() const { return 0; }
  int kOffset() const { return qStages * qStageBytes(); }
  int vOffset() const { return kOffset() + stages * kvStageBytes(); }
  /// O is staged apart from Q, so the next tile's Q loads while this tile's O is stored.
  int oOffset() const { return vOffset() + stages * kvStageBytes(); }
  /// The tile index each Q buffer holds (i32), or past the last tile when the producer is
  /// done: the consumers learn their tiles from it.
  int tileIdOffset() const { return oOffset() + consumers * qBytesPerConsumer(); }
  int sharedBytes() const { return tileIdOffset() + 16; }
  int sValues() const { return blockN / 2; }  // f32 S accumulators per thread
  int oValues() const { return headDim / 2; } // f32 O accumulators per thread
};


class Sm90Emitter {
public:
  Sm90Emitter(tessera::FlashAttnOp op, const Sm90Plan &p, OpBuilder &b, gpu::GPUFuncOp func,
              const TargetInfo &t, const Sm90Args &args)
      : op(op), p(p), b(b), loc(op.getLoc()), kb(b, loc, t), hb(kb), func(func), args(args),
        a(args.attn) {
    persistent = persistentCode(op);
    varlen = op.getVarlen();
  }
  void emit();

private:
  Value arg(ArgHandle h) { return argValue(func, h); }
  Value eq(Value x, int64_t c) {
    return kb.cmpEq(x, kb.idx(c));
  }
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 64); }
  Value addI64(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }

  // Tile and ring counters are i32: the consumers run at their register limit, and every
  // 64-bit value live through the key loop costs two registers.
  Value c32(int64_t v) { return hb.i32(v); }
  Value toI32(Value v) { return arith::IndexCastUIOp::create(b, loc, b.getI32Type(), v); }
  Value toIndex(Value v) { return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), v); }
  Value add32(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  /// i64 descriptor of K-major step k of a tile at byte offset `dynOffset` (i64 >> 4, may be
  /// null) + `constOffset` of the dynamic shared memory.
  Value kMajorDesc(Value dynOffset16, int constOffset, int rows, int k) {
    Value base = dynOffset16 ? addI64(smemBase16, dynOffset16) : smemBase16;
    return addI64(base, i64(int64_t(hopper::kMajorDescriptor(constOffset, rows, k))));
  }
  Value vDesc(Value dynOffset16, int k) {
    Value base = addI64(smemBase16, dynOffset16);
    return addI64(base, i64(int64_t(hopper::mnMajorDescriptor(p.vOffset(), p.blockN,
                                                              p.headDim, k))));
  }
  /// Byte offset >> 4 of ring stage `stage` (index) as i64.
  Value stageOffset16(Value stage) {
    Value s = arith::IndexCastOp::create(b, loc, b.getI64Type(), stage);
    return arith::MulIOp::create(b, loc, s, i64(p.kvStageBytes() >> 4));
  }

  /// The (query block, head, batch) of tile `t` (i32): query blocks fastest, so the
  /// workgroups running together share K/V in L2; with a causal mask or a window the longest
  /// tiles (last query blocks) go first, within sections of heads whose K/V fit in L2.
  void decodeTile(Value t);
  /// The queries (and with packing, heads) of this consumer thread's two accumulator rows
  /// (the second 8 below the first) in the current tile: consumer cw's 64 rows, 16 per warp,
  /// 8 lane groups of 4; packed, row r is query r % (64 / pack) of head r / (64 / pack).
  void setThreadRows(Value cw) {
    Value ltid = kb.remui(kb.threadId(), 128);
    Value first = hopper::AccumulatorLayout::firstRow(kb, ltid);
    Value consumerQ0 = kb.add(q0, kb.mul(cw, p.queriesPerConsumer()));
    for (int h = 0; h < 2; ++h) {
      if (p.pack == 1) {
        threadQuery[h] = kb.add(kb.add(consumerQ0, first), h * 8);
        threadHead[h] = head;
        continue;
      }
      Value row = kb.add(first, h * 8);
      threadQuery[h] = kb.add(consumerQ0, kb.remui(row, p.queriesPerConsumer()));
      threadHead[h] = kb.add(head, kb.divui(row, p.queriesPerConsumer()));
    }
  }
  /// The first query block is the partial one (decodeTile): causal without a window, and not
  /// varlen (whose O rows are stored by the threads, counted from the block's first). Consumers
  /// whose rows are all before query 0 load no Q, store no O and (three consumers) walk no key
  /// tile: no TMA box starts before row 0.
  bool partialBlockFirst() {
    return op.getMask() != tessera::MaskKind::None && !localMask(op) && !varlen;
  }
  /// The last query of the current tile.
  Value lastQuery() { return kb.add(q0, p.tileQueries() - 1); }
  /// Per role, after its setmaxnreg: shared memory, tensor maps, sizes and the tile count.
  void setUpRole();
  /// The visibility rule of the current (batch, head) (per tile for varlen batches).
  void setVisibility();
  /// TMA boxes (outermost first) of one 64-column panel: `heads` x `rows`, and the
  /// coordinates (innermost first) of a box at (col, row, head). The maps are over (D, S, H, B),
  /// or (D, rows, H) for varlen batches (one head per box), whose `row` includes the sequence's
  /// first row.
  SmallVector<int64_t> boxOf(int rows, int heads) const;
  /// A K or V stage; a consumer's Q or O tile (64 rows, or `pack` heads of 64 / pack queries).
  SmallVector<int64_t> kvBox() const { return boxOf(p.blockN, 1); }
  SmallVector<int64_t> qoBox() const { return boxOf(p.queriesPerConsumer(), p.pack); }
  SmallVector<Value> coords(Value col, Value row, Value h);
  /// The key tiles of the current tile: first and count (none for a varlen query block past
  /// its sequence's end).
  std::pair<Value, Value> keyTiles();

  /// The next tile (i32) of this workgroup: claimed when persistent, else past the last.
  Value nextTile();
  /// The tile index slot of Q buffer `stage` (index), as memref<1xi32>.
  Value tileIdSlot(Value stage) {
    Value at = kb.add(kb.mul(stage, 4), p.tileIdOffset());
    return hb.view(smem, at, {1}, b.getI32Type());
  }
  /// Persistent: `tile_counter` holds {tiles claimed, workgroups done}; the last workgroup to
  /// finish leaves it zero for the next launch.
  void resetTileCounter();
  /// Of the tile's `nIter` key tiles, how many consumer `cw`'s rows see (a prefix: no window).
  /// With three consumers each walks only its own: in a 192-row tile the last consumer's
  /// diagonal is 1-2 key tiles past the first's, and at S 1024 the last tile of each head has
  /// one consumer of rows. With two, the pingpong pairs their key loops: all walk all.
  Value ownKeyTiles(Value cw, Value nIter);
  /// Consumer side of ring iterations [start, start + count) this consumer does not compute:
  /// waits for each K and V stage and frees it, so the ring's phases stay in step.
  void stepOver(Value start, Value count);
  /// The producer's and consumers' loops over this workgroup's tiles.
  void emitProducer();
  void emitConsumers();
  /// The consumers' key loop of one tile from ring iteration `ring`; returns O values, row max
  /// (2), row sums (2).
  SmallVector<Value> emitTileMainLoop(Value lo, Value nIter, Value ring, Value qPhase, Value cw);
  void emitEpilogue(ArrayRef<Value> state, Value cw);

  /// S = Q K^T for the ring stage of iteration i (issued, not waited).
  SmallVector<Value> issueQK(Value stage16);
  /// O += P V (issued, not waited).
  SmallVector<Value> issuePV(ArrayRef<Value> o, ArrayRef<Value> pRegs, Value stage16);
  /// Masks S (edge tiles only) and applies the score transform; returns log2-domain factor
  /// to use in the softmax (scaleLog2, or 1 when S is already transformed).
  SmallVector<Value> maskedScores(SmallVector<Value> s, Value keyTile);
  /// ALiBi: the scores in the log2 domain plus -slope |i + off - j| per element.
  SmallVector<Value> alibiScores(SmallVector<Value> s, Value keyTile);
  /// One online-softmax step over S of this thread's two rows.
  struct SoftmaxStep {
    SmallVector<Value> probs;           ///< P (f32), in S's order
    SmallVector<Value> max, sum, alpha; ///< per row: running max and sum, rescale factor
  };
  /// `mOld` and `lOld` empty: the first key tile (no rescale).
  SoftmaxStep softmaxStep(ArrayRef<Value> s, ArrayRef<Value> mOld, ArrayRef<Value> lOld);
  SmallVector<Value> packP(ArrayRef<Value> probs);
  /// Combines a row's values across the 4 lanes of a quad that hold its columns.
  Value rowReduce(Value x, CK kind) { return kb.laneAllReduce({x}, rowLaneMasks(), kind)[0]; }
  static std::vector<int> rowLaneMasks();

  tessera::FlashAttnOp op;
  const Sm90Plan &p;
  OpBuilder &b;
  Location loc;
  KernelBuilder kb;
  HopperBuilder hb;
  gpu::GPUFuncOp func;
  const Sm90Args &args;
  const attn::FlashAttnArgs &a;
  std::optional<attn::Visibility> visibility;
  std::optional<attn::OnlineSoftmax> online;
  Value smem, smemBase16, bars, tmQ, tmK, tmV, tmO;
  // The Q buffers (the next tile's Q loads during this one; a phase per tile) and the K and V
  // rings, which advance together (their ring iterations are the key tiles walked so far).
  std::optional<hopper::MbarrierRing> qRing, kRing, vRing;
  Value head, batch, kvHead, q0, seqQ, seqK, scaleLog2, softmaxScale, cap;
  Value rowQ0, rowK0; // varlen: the first packed row of this tile's sequence in q/o and k/v
  Value threadQuery[2], threadHead[2]; // of this thread's two accumulator rows (setThreadRows)
  Value alibiSlope[2];                  // ALiBi: their heads' slopes times log2(e)
  Value colInTile;                      // this thread's first accumulator key column
  Value qDescBase16;        // this consumer's Q tile in Q buffer 0 (>> 4, i64)
  Value qDesc16;            // ... in the current tile's Q buffer
  Value numM, numTiles, barMine, barOther;
  Value wholeLo, wholeHi; // this tile's key tiles that need no mask: [wholeLo, wholeHi)
  bool persistent = false; // persistentCode
  bool pingpong() const { return p.consumers == 2; }
  bool varlen = false;
};

void Sm90Emitter::emit() {
  b.setInsertionPoint(func.getBody().front().getTerminator());
  // Before the role split only the barriers are set up: ptxas spills every value live across
  // setmaxnreg, so each role computes what it needs after its own.
  Value wg = hb.uniformWarpgroupId();
  // Barriers: Q full, the K and V rings' full ones, their empty ones, Q empty.
  const int n = p.stages, q = p.qStages;
  bars = hb.createBarriers(2 * q + 4 * n);
  const int arrivals = p.consumerThreads();
  qRing.emplace(kb, hb, bars, 0, q + 4 * n, q, arrivals);
  kRing.emplace(kb, hb, bars, q, q + 2 * n, n, arrivals);
  vRing.emplace(kb, hb, bars, q + n, q + 3 * n, n, arrivals);
  auto init = scf::IfOp::create(b, loc, eq(kb.threadId(), 0), false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(init.thenBlock());
    for (hopper::MbarrierRing *r : {&*qRing, &*kRing, &*vRing}) r->init();
    hb.fenceBarrierInit();
  }
  kb.barrier();

  auto roles = scf::IfOp::create(b, loc, eq(wg, 0), /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(roles.thenBlock());
  assert(p.startRegisters() - Sm90Plan::producerRegisters >=
             p.consumers * (p.consumerRegisters() - p.startRegisters()) &&
         "setmaxnreg: the consumers' increase exceeds what the producer frees");
  hb.setMaxRegisters(Sm90Plan::producerRegisters, /*increase=*/false);
  setUpRole();
  emitProducer();
  b.setInsertionPointToStart(roles.elseBlock());
  hb.setMaxRegisters(p.consumerRegisters(), /*increase=*/true);
  setUpRole();
  emitConsumers();
}

void Sm90Emitter::setUpRole() {
  smem = hb.dynamicSharedMemory(func, p.sharedBytes());
  smemBase16 = hb.descriptorBase(smem);
  auto map = [&](ArgHandle h, ArrayRef<int64_t> box) -> Value {
    Type t = hb.tensorMapType(box, p.elem);
    return UnrealizedConversionCastOp::create(b, loc, t, arg(h)).getResult(0);
  };
  tmQ = map(args.qTma, qoBox());
  tmK = map(args.kTma, kvBox());
  tmV = map(args.vTma, kvBox());
  if (!varlen) tmO = map(args.oTma, qoBox());
  // Varlen: the longest sequences; decodeTile sets each tile's own.
  seqQ = arg(a.seqQ);
  seqK = arg(a.seqK);
  if (!varlen) setVisibility();
  numM = kb.ceilDiv(seqQ, p.tileQueries());
  Value headGroups = p.pack == 1 ? arg(a.headsQ) : kb.divui(arg(a.headsQ), p.pack);
  numTiles = kb.mul(numM, kb.mul(headGroups, arg(a.batch)));
}

void Sm90Emitter::setVisibility() {
  visibility.emplace(attn::flashAttnVisibility(op, kb, func, a, seqQ, seqK));
}

std::vector<int> Sm90Emitter::rowLaneMasks() {
  // The lanes of a warpgroup that hold one row of the m64nN accumulator (any N: a prefix).
  return wgmmaAccumulatorLayout(8)->rowReductionLaneMasks();
}

SmallVector<int64_t> Sm90Emitter::boxOf(int rows, int heads) const {
  assert((!varlen || heads == 1) && "varlen maps have no head dimension in a box");
  if (varlen) return {1, rows, hopper::kPanelElems};
  return {1, heads, rows, hopper::kPanelElems};
}

SmallVector<Value> Sm90Emitter::coords(Value col, Value row, Value h) {
  if (varlen) return {col, row, h};
  return {col, row, h, batch};
}

std::pair<Value, Value> Sm90Emitter::keyTiles() {
  auto [lo, hi] = visibility->keyTiles(q0, lastQuery(), p.blockN);
  Value n = kb.sub(hi, lo);
  // The grid covers the longest sequence: shorter ones have query blocks with nothing to do.
  if (varlen) n = kb.select(kb.cmpLt(q0, seqQ), n, kb.idx(0));
  return {lo, n};
}

void Sm90Emitter::decodeTile(Value t) {
  // In 32 bits: 64-bit division by a runtime value is a long subroutine that spills in the
  // producer's 24 registers. Every quantity here (tiles, heads, sequence positions) fits.
  auto div = [&](Value x, Value y) { return arith::DivUIOp::create(b, loc, x, y); };
  auto rem = [&](Value x, Value y) { return arith::RemUIOp::create(b, loc, x, y); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); };
  auto sub = [&](Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); };
  auto umin = [&](Value x, Value y) { return arith::MinUIOp::create(b, loc, x, y); };
  auto umax = [&](Value x, Value y) { return arith::MaxUIOp::create(b, loc, x, y); };
  Value tile = t, blocks = toI32(numM), hq = toI32(arg(a.headsQ)); // t is i32 already
  Value groups = p.pack == 1 ? hq : div(hq, c32(p.pack));    // of `pack` query heads
  Value heads = mul(groups, toI32(arg(a.batch)));
  Value mBlock, headBatch;
  if (equalWorkTiles(op)) {
    mBlock = rem(tile, blocks);
    headBatch = div(tile, blocks);
  } else {
    // Sections of `group` (batch, head) pairs whose K/V take about 32 MiB of L2; in a section
    // the query blocks run from the last (most keys) to the first, heads fastest.
    Value kvKiB = umax(div(mul(toI32(arg(a.seqK)), c32(4 * p.headDim)), c32(1024)), c32(1));
    Value group = umin(umax(div(c32(32 << 10), kvKiB), c32(1)), heads);
    Value sectionTiles = mul(group, blocks);
    Value section = div(tile, sectionTiles), r = rem(tile, sectionTiles);
    Value first = mul(section, group);
    Value width = umin(group, sub(heads, first)); // the last section may be narrower
    mBlock = sub(sub(blocks, c32(1)), div(r, width));
    headBatch = arith::AddIOp::create(b, loc, first, rem(r, width));
  }
  Value head32 = rem(headBatch, groups); // the tile's first query head
  if (p.pack > 1) head32 = mul(head32, c32(p.pack));
  head = toIndex(head32);
  batch = toIndex(div(headBatch, groups));
  kvHead = toIndex(div(head32, div(hq, toI32(arg(a.headsKv)))));
  q0 = kb.mul(toIndex(mBlock), p.tileQueries());
  // Under a causal mask the query blocks start before query 0 by the whole consumers the last
  // block would have past Sq: the partial block is the first, whose idle consumers then idle
  // through the fewest key tiles instead of the most (D64 S 1024: 192-row tiles, 1024 = 64 +
  // 5 x 192). Rows past Sq short of a consumer stay in the last block.
  if (partialBlockFirst()) {
    Value idleRows = kb.sub(kb.mul(numM, p.tileQueries()), seqQ);
    q0 = kb.sub(q0, kb.mul(kb.divui(idleRows, p.queriesPerConsumer()), p.queriesPerConsumer()));
  }
  if (!varlen) return;
  attn::SeqInfo seq = attn::SeqInfo::packed(kb, arg(a.cuSeqlensQ), arg(a.cuSeqlensK), batch);
  rowQ0 = seq.rowQ0, rowK0 = seq.rowK0, seqQ = seq.seqQ, seqK = seq.seqK;
  setVisibility();
}

void Sm90Emitter::emitProducer() {
  Value warp = kb.divui(kb.threadId(), 32);
  auto ifWarp = scf::IfOp::create(b, loc, eq(warp, 0), false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifWarp.thenBlock());
  auto elected = scf::IfOp::create(b, loc, hb.electOne(), false);
  b.setInsertionPointToStart(elected.thenBlock());
  // Each tile goes to the consumers through a Q buffer: its index in the buffer's slot, then Q
  // itself (nothing for a tile without keys). (tile, Q phases used, ring iterations used).
  Type i32 = b.getI32Type();
  Value numTiles32 = toI32(numTiles);
  auto loop = scf::WhileOp::create(b, loc, TypeRange{i32, i32, i32},
                                   ValueRange{toI32(kb.blockId(gpu::Dimension::x)), c32(0), c32(0)});
  {
    OpBuilder::InsertionGuard g2(b);
    Block *before = b.createBlock(&loop.getBefore(), {}, {i32, i32, i32}, {loc, loc, loc});
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, before->getArgument(0),
                                       numTiles32);
    scf::ConditionOp::create(b, loc, more, before->getArguments());
    Block *after = b.createBlock(&loop.getAfter(), {}, {i32, i32, i32}, {loc, loc, loc});
    Value tile = after->getArgument(0), qPhase = after->getArgument(1);
    Value ring = after->getArgument(2);
    Value next = nextTile(); // the counter's round trip overlaps this tile's loads
    decodeTile(tile);
    auto [lo, nIter] = keyTiles();
    Value busy = kb.cmpLt(kb.idx(0), nIter);
    // Q of the consumers, once they finished the previous tile's QK^T: of those whose rows
    // start at or after query 0 (partialBlockFirst).
    auto qSlot = qRing->slot(qPhase);
    qRing->waitEmpty(qSlot);
    memref::StoreOp::create(b, loc, tile, tileIdSlot(qSlot.stage), ValueRange{kb.idx(0)});
    SmallVector<Value> firstRow, loadsQ;
    Value qBytes = kb.idx(0);
    for (int w = 0; w < p.consumers; ++w) {
      firstRow.push_back(kb.add(q0, w * p.queriesPerConsumer()));
      loadsQ.push_back(kb.cmpLe(kb.idx(0), firstRow[w]));
      qBytes = kb.add(qBytes, kb.select(loadsQ[w], kb.idx(p.qBytesPerConsumer()), kb.idx(0)));
    }
    qRing->announce(qSlot, kb.select(busy, qBytes, kb.idx(0)));
    auto work = scf::IfOp::create(b, loc, busy, false);
    {
      OpBuilder::InsertionGuard g3(b);
      b.setInsertionPointToStart(work.thenBlock());
      Value qBuffer = kb.mul(qSlot.stage, p.qStageBytes());
      for (int w = 0; w < p.consumers; ++w) {
        auto load = scf::IfOp::create(b, loc, loadsQ[w], false);
        OpBuilder::InsertionGuard g4(b);
        b.setInsertionPointToStart(load.thenBlock());
        for (int panel = 0; panel < p.panels(); ++panel) {
          int offset = p.qOffset() + w * p.qBytesPerConsumer() +
                       panel * Sm90Plan::consumerRows * hopper::kSwizzleBytes;
          Value dst = hb.view(smem, kb.add(qBuffer, offset), qoBox(), p.elem);
          Value row = varlen ? kb.add(rowQ0, firstRow[w]) : firstRow[w];
          hb.tmaLoad(tmQ, coords(kb.idx(panel * hopper::kPanelElems), row, head), dst, bars,
                     qRing->fullBarrier(qSlot));
        }
      }
      // K and V through the two-stage ring, each stage once the consumers freed it.
      auto kv = scf::ForOp::create(b, loc, kb.idx(0), nIter, kb.idx(1));
      b.setInsertionPointToStart(kv.getBody());
      Value i = kv.getInductionVar();
      auto slot = kRing->slot(add32(ring, toI32(i))); // the V ring's too
      Value row = kb.mul(kb.add(lo, i), p.blockN);
      if (varlen) row = kb.add(rowK0, row);
      for (auto [tm, r, base] : {std::tuple{tmK, &*kRing, p.kOffset()},
                                 std::tuple{tmV, &*vRing, p.vOffset()}}) {
        r->acquire(slot, p.kvStageBytes());
        Value fullBar = r->fullBarrier(slot);
        Value stageBase = kb.add(kb.mul(slot.stage, p.kvStageBytes()), base);
        for (int panel = 0; panel < p.panels(); ++panel) {
          Value dst = hb.view(smem, kb.add(stageBase, panel * p.blockN * hopper::kSwizzleBytes),
                              kvBox(), p.elem);
          hb.tmaLoad(tm, coords(kb.idx(panel * hopper::kPanelElems), row, kvHead), dst, bars, fullBar);
        }
      }
    }
    scf::YieldOp::create(b, loc, ValueRange{next, add32(qPhase, c32(1)), add32(ring, toI32(nIter))});
  }
  if (!persistent) return;
  // No more tiles: the consumers read an index past the last.
  auto qSlot = qRing->slot(loop.getResult(1));
  qRing->waitEmpty(qSlot);
  memref::StoreOp::create(b, loc, numTiles32, tileIdSlot(qSlot.stage), ValueRange{kb.idx(0)});
  qRing->announce(qSlot, kb.idx(0));
  resetTileCounter();
}

Value Sm90Emitter::nextTile() {
  if (!persistent) return toI32(numTiles);
  Value grid = toI32(gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
  // The first tiles are the workgroups' own (blockIdx.x); claims count on from the grid.
  Value claimed = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, c32(1),
                                              arg(args.tileCounter), ValueRange{kb.idx(0)});
  return add32(claimed, grid);
}

void Sm90Emitter::resetTileCounter() {
  // Every workgroup made its last claim before counting itself done (the fences order the
  // relaxed atomics), so the last to count itself done may zero both.
  Value counter = arg(args.tileCounter);
  NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
  Value done = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, c32(1), counter,
                                           ValueRange{kb.idx(1)});
  Value grid = toI32(gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
  auto last = scf::IfOp::create(b, loc, kb.cmpEq(add32(done, c32(1)), grid), false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(last.thenBlock());
  NVVM::MembarOp::create(b, loc, NVVM::MemScopeKind::GPU);
  for (int i : {0, 1})
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::assign, c32(0), counter,
                                ValueRange{kb.idx(i)});
}

Value Sm90Emitter::ownKeyTiles(Value cw, Value nIter) {
  if (p.consumers == 2) return nIter;
  assert(!localMask(op) && p.pack == 1 && "three consumers: no window, one head per tile");
  Value first = kb.add(q0, kb.mul(cw, p.queriesPerConsumer()));
  Value last = kb.minsi(kb.add(first, p.queriesPerConsumer() - 1), kb.sub(seqQ, kb.idx(1)));
  // Without a window every range starts at key tile 0.
  Value own = visibility->keyTiles(first, last, p.blockN).hi;
  own = kb.minsi(own, nIter);
  // Rows in [0, Sq) only: past the last query, or before the first (partialBlockFirst).
  Value rows = kb.andb(kb.cmpLt(first, seqQ), kb.cmpLe(kb.idx(0), last));
  return kb.select(rows, own, kb.idx(0));
}

void Sm90Emitter::stepOver(Value start, Value count) {
  if (p.consumers == 2) return;
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), count, kb.idx(1));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value at = add32(start, toI32(loop.getInductionVar()));
  for (hopper::MbarrierRing *r : {&*kRing, &*vRing}) {
    auto slot = r->slot(at);
    r->waitFull(slot);
    r->release(slot);
  }
}

void Sm90Emitter::emitConsumers() {
  Value cw = kb.sub(hb.uniformWarpgroupId(), kb.idx(1));
  scaleLog2 = kb.fmul(arg(a.scale), kb.f32(M_LOG2E));
  cap = op.getSoftcap() ? arg(a.softcap) : Value();
  // Softcap and ALiBi make S log2-domain values (maskedScores): the softmax factor is then 1.
  softmaxScale = cap || op.getAlibi() ? kb.f32(1.0) : scaleLog2;
  online.emplace(kb, softmaxScale);
  Value cw64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), cw);
  qDescBase16 = addI64(smemBase16, arith::MulIOp::create(b, loc, cw64,
                                                          i64(p.qBytesPerConsumer() >> 4)));
  // Pingpong (two consumers): named barriers 1 and 2 order the consumers' GEMM issue; consumer
  // 0 goes first. A tile's key loop pairs each consumer's syncs with the other's arrives, so
  // exactly one arrive (this first one, then consumer 1's last) is pending between tiles. Three
  // consumers interleave without it (FlashAttention-3 pingpongs two).
  if (pingpong()) {
    Value cw32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), cw);
    barMine = arith::AddIOp::create(b, loc, cw32, hb.i32(1));
    barOther = arith::SubIOp::create(b, loc, hb.i32(2), cw32);
    auto first = scf::IfOp::create(b, loc, eq(cw, 0), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(first.thenBlock());
    hb.namedBarrierArrive(hb.i32(1), p.consumerThreads());
  }
  // One tile (i32) from Q phase and ring iteration qPhase, ring (i32); returns the ring
  // iterations it used.
  auto tileBody = [&](Value tile, Value qPhase, Value ring) {
    decodeTile(tile);
    auto [lo, nIter] = keyTiles();
    SmallVector<Value> state = emitTileMainLoop(lo, ownKeyTiles(cw, nIter), ring, qPhase, cw);
    // Decode the tile again for the epilogue rather than keep its coordinates live through
    // the key loop (the consumers are at their register limit); the asm keeps CSE from
    // merging the two decodes.
    decodeTile(hb.registerFence({tile})[0]);
    std::tie(lo, nIter) = keyTiles();
    Value own = ownKeyTiles(cw, nIter);
    stepOver(add32(ring, toI32(own)), kb.sub(nIter, own));
    setThreadRows(cw);
    emitEpilogue(state, cw);
    return toI32(nIter);
  };
  if (!persistent) {
    // The workgroup's own tile, straight: a tile index loaded from shared memory would stay
    // live through the key loop, where blockIdx.x is re-read (spills at 240 registers).
    qRing->waitFull(qRing->slot(c32(0)));
    (void)tileBody(toI32(kb.blockId(gpu::Dimension::x)), c32(0), c32(0));
  } else {
    // Tiles as the producer hands them over: each Q buffer's phase brings its tile's index,
    // the last one an index past the last tile. (Q phases used, ring iterations used).
    Type i32 = b.getI32Type();
    auto loop = scf::WhileOp::create(b, loc, TypeRange{i32, i32, i32}, ValueRange{c32(0), c32(0)});
    OpBuilder::InsertionGuard g2(b);
    Block *before = b.createBlock(&loop.getBefore(), {}, {i32, i32}, {loc, loc});
    auto qSlot = qRing->slot(before->getArgument(0));
    qRing->waitFull(qSlot);
    Value tile = memref::LoadOp::create(b, loc, tileIdSlot(qSlot.stage), ValueRange{kb.idx(0)});
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, tile, toI32(numTiles));
    scf::ConditionOp::create(b, loc, more,
                             ValueRange{tile, before->getArgument(0), before->getArgument(1)});
    Block *after = b.createBlock(&loop.getAfter(), {}, {i32, i32, i32}, {loc, loc, loc});
    Value qPhase = after->getArgument(1), ring = after->getArgument(2);
    Value used = tileBody(after->getArgument(0), qPhase, ring);
    scf::YieldOp::create(b, loc, ValueRange{add32(qPhase, c32(1)), add32(ring, used)});
  }
  if (varlen) return; // O was stored by the threads
  // The last O stores must have read shared memory before the workgroup exits.
  auto leader = scf::IfOp::create(b, loc, eq(kb.remui(kb.threadId(), 128), 0), false);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(leader.thenBlock());
  hb.waitBulkStoresRead();
}

SmallVector<Value> Sm90Emitter::issueQK(Value stage16) {
  SmallVector<Value> s(p.sValues(), kb.f32(0));
  for (int k = 0; k < p.headDim / 16; ++k) {
    Value descQ = addI64(qDesc16, i64(int64_t(hopper::kMajorDescriptor(
                                          0, Sm90Plan::consumerRows, k))));
    Value descK = kMajorDesc(stage16, p.kOffset(), p.blockN, k);
    s = hb.wgmmaSS(s, descQ, descK, p.blockN, p.in, /*accumulate=*/k > 0);
  }
  hb.commitGroup();
  return s;
}

SmallVector<Value> Sm90Emitter::issuePV(ArrayRef<Value> o, ArrayRef<Value> pRegs, Value stage16) {
  SmallVector<Value> out(o.begin(), o.end());
  for (int c = 0; c < p.blockN / 16; ++c)
    out = hb.wgmmaRS(out, pRegs.slice(4 * c, 4), vDesc(stage16, c), p.headDim, p.in);
  hb.commitGroup();
  return out;
}

SmallVector<Value> Sm90Emitter::maskedScores(SmallVector<Value> s, Value keyTile) {
  // Scores transform (softcap): S becomes log2-domain values and the softmax factor is 1.
  if (cap) {
    auto vt = VectorType::get({int64_t(s.size())}, b.getF32Type());
    Value vec = vector::FromElementsOp::create(b, loc, vt, s);
    vec = attn::scaledScores(kb, vec, scaleLog2, cap);
    for (size_t i = 0; i < s.size(); ++i) s[i] = vector::ExtractOp::create(b, loc, vec, int64_t(i));
  }
  if (op.getAlibi()) s = alibiScores(s, keyTile);
  SmallVector<Type> types(s.size(), b.getF32Type());
  Value needMask = attn::isEdgeTile(kb, keyTile, {wholeLo, wholeHi});
  auto masked = scf::IfOp::create(b, loc, types, needMask, true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(masked.thenBlock());
  // Each row sees one key interval: bounds relative to this thread's first key column, as
  // i32, so each element costs two compares against its constant column offset.
  SmallVector<Value> out;
  Value negInf = kb.f32(-INFINITY);
  Value base = kb.add(kb.mul(keyTile, p.blockN), colInTile);
  auto rel = [&](Value key) {
    return arith::IndexCastOp::create(b, loc, b.getI32Type(), kb.sub(key, base));
  };
  Value lowest[2], highest[2];
  for (int h = 0; h < 2; ++h) {
    auto [first, last] = visibility->keyInterval(threadQuery[h]);
    lowest[h] = rel(first), highest[h] = rel(last);
  }
  // Without a window or chunk the first visible key is 0, which every column is past.
  const bool lowerBound = localMask(op);
  for (int i = 0; i < p.sValues(); ++i) {
    int j = Acc::group(i), h = Acc::half(i), e = i % 2;
    Value column = hb.i32(8 * j + e);
    Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, column, highest[h]);
    if (lowerBound)
      ok = kb.andb(ok, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, lowest[h], column));
    out.push_back(kb.select(ok, s[i], negInf));
  }
  scf::YieldOp::create(b, loc, out);
  b.setInsertionPointToStart(masked.elseBlock());
  scf::YieldOp::create(b, loc, s);
  return SmallVector<Value>(masked.getResults());
}

SmallVector<Value> Sm90Emitter::alibiScores(SmallVector<Value> s, Value keyTile) {
  // Per row, d = key - (query + off) at the thread's first column as f32 (exact below 2^24);
  // each element's key is a constant column past it. Causal: the visible keys have d <= 0, so
  // the bias -slope |d| is slope d (the others are masked).
  const bool causal = visibility->causal();
  Value rowD[2];
  for (int h = 0; h < 2; ++h) {
    Value d = kb.sub(kb.add(kb.mul(keyTile, p.blockN), colInTile),
                     kb.add(threadQuery[h], visibility->diagonalOffset()));
    rowD[h] = arith::SIToFPOp::create(
        b, loc, b.getF32Type(), arith::IndexCastOp::create(b, loc, b.getI32Type(), d).getResult());
  }
  for (int i = 0; i < p.sValues(); ++i) {
    int j = Acc::group(i), h = Acc::half(i), e = i % 2;
    Value d = kb.fadd(rowD[h], kb.f32(8 * j + e));
    Value slope = alibiSlope[h];
    if (!causal) {
      d = kb.fmax(d, arith::NegFOp::create(b, loc, d));
      slope = arith::NegFOp::create(b, loc, slope);
    }
    Value scaled = cap ? s[i] : kb.fmul(s[i], scaleLog2); // log2 domain already when capped
    s[i] = math::FmaOp::create(b, loc, slope, d, scaled);
  }
  return s;
}

Sm90Emitter::SoftmaxStep Sm90Emitter::softmaxStep(ArrayRef<Value> s, ArrayRef<Value> mOld,
                                                  ArrayRef<Value> lOld) {
  const bool first = mOld.empty();
  SoftmaxStep step;
  SmallVector<Value> &probs = step.probs, &mNew = step.max, &lNew = step.sum, &alpha = step.alpha;
  probs.assign(s.size(), Value());
  for (int h = 0; h < 2; ++h) {
    Value mx;
    for (int i = 0; i < p.sValues(); ++i)
      if (Acc::half(i) == h) mx = mx ? kb.fmax(mx, s[i]) : s[i];
    mx = rowReduce(mx, CK::MAXNUMF);
    if (!first) mx = kb.fmax(mx, mOld[h]);
    if (!first) alpha.push_back(online->rescaleFactor(mOld[h], mx));
    Value shift = online->shiftFor(mx);
    mNew.push_back(mx);
    Value sum;
    for (int i = 0; i < p.sValues(); ++i) {
      if (Acc::half(i) != h) continue;
      probs[i] = online->exp2Shifted(s[i], shift);
      sum = sum ? kb.fadd(sum, probs[i]) : probs[i];
    }
    lNew.push_back(first ? sum : online->nextSum(lOld[h], alpha[h], sum));
  }
  return step;
}

SmallVector<Value> Sm90Emitter::packP(ArrayRef<Value> probs) {
  // A-operand register r of k-chunk c is pack(S[8c + 2r], S[8c + 2r + 1]).
  SmallVector<Value> regs;
  auto pair = VectorType::get({2}, b.getF32Type());
  auto half = VectorType::get({2}, p.elem);
  for (size_t i = 0; i < probs.size(); i += 2) {
    Value v = vector::FromElementsOp::create(b, loc, pair, ValueRange{probs[i], probs[i + 1]});
    Value t = arith::TruncFOp::create(b, loc, half, v);
    regs.push_back(vector::BitCastOp::create(b, loc, VectorType::get({1}, b.getI32Type()), t));
    regs.back() = vector::ExtractOp::create(b, loc, regs.back(), int64_t(0));
  }
  // Pinned so LLVM keeps P packed across the loop (no conversion sunk into the next step).
  return hb.registerFence(regs);
}

SmallVector<Value> Sm90Emitter::emitTileMainLoop(Value lo, Value nIter, Value ring, Value qPhase,
                                                  Value cw) {
  setThreadRows(cw);
  colInTile = hopper::AccumulatorLayout::firstColumn(kb, kb.remui(kb.threadId(), 128));
  if (op.getAlibi())
    for (int h = 0; h < 2; ++h) {
      Value at = kb.add(kb.mul(batch, arg(a.alibiStrideB)), threadHead[h]);
      Value slope = memref::LoadOp::create(b, loc, arg(a.alibiSlopes), ValueRange{at});
      alibiSlope[h] = kb.fmul(slope, kb.f32(M_LOG2E));
    }
  attn::TileRange whole = visibility->unmaskedKeyTiles(q0, lastQuery(), p.blockN);
  wholeLo = whole.lo, wholeHi = whole.hi;

  SmallVector<Type> stateTypes(p.oValues() + 4, b.getF32Type());
  auto any = scf::IfOp::create(b, loc, stateTypes, kb.cmpLt(kb.idx(0), nIter), true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(any.elseBlock());
    qRing->release(qRing->slot(qPhase)); // Q was never read
    SmallVector<Value> empty(p.oValues(), kb.f32(0));
    empty.append({kb.f32(-INFINITY), kb.f32(-INFINITY), kb.f32(0), kb.f32(0)});
    scf::YieldOp::create(b, loc, empty);
  }
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(any.thenBlock());
  auto qSlot = qRing->slot(qPhase); // waited for by the tile loop
  Value buffer = arith::IndexCastOp::create(b, loc, b.getI64Type(), qSlot.stage);
  qDesc16 = addI64(qDescBase16,
                   arith::MulIOp::create(b, loc, buffer, i64(p.qStageBytes() >> 4)));

  // Prologue: S of the first key tile, its softmax.
  auto first = kRing->slot(ring);
  kRing->waitFull(first);
  hb.fence();
  SmallVector<Value> s = issueQK(stageOffset16(first.stage));
  hb.waitGroup(0);
  s = hb.registerFence(s);
  kRing->release(first);
  s = maskedScores(s, lo);
  SoftmaxStep start = softmaxStep(s, {}, {});
  SmallVector<Value> pRegs = packP(start.probs);

  // Steady state: QK(i) and PV(i - 1) in flight together.
  SmallVector<Value> iterInit(p.oValues(), kb.f32(0));
  iterInit.append(pRegs);
  iterInit.append(start.max);
  iterInit.append(start.sum);
  auto loop = scf::ForOp::create(b, loc, kb.idx(1), nIter, kb.idx(1), iterInit);
  {
    OpBuilder::InsertionGuard g2(b);
    b.setInsertionPointToStart(loop.getBody());
    auto it = loop.getRegionIterArgs();
    SmallVector<Value> o(it.begin(), it.begin() + p.oValues());
    SmallVector<Value> pIn(it.begin() + p.oValues(), it.begin() + p.oValues() + pRegs.size());
    SmallVector<Value> mOld(it.end() - 4, it.end() - 2), lOld(it.end() - 2, it.end());
    Value i = loop.getInductionVar();
    Value at = add32(ring, toI32(i));
    auto cur = kRing->slot(at);
    auto prev = vRing->slot(arith::SubIOp::create(b, loc, at, c32(1)));
    kRing->waitFull(cur);
    if (pingpong()) hb.namedBarrierSync(barMine, p.consumerThreads());
    hb.fence();
    SmallVector<Value> sNext = issueQK(stageOffset16(cur.stage));
    vRing->waitFull(prev);
    hb.fence();
    o = issuePV(o, pIn, stageOffset16(prev.stage));
    if (pingpong()) hb.namedBarrierArrive(barOther, p.consumerThreads());
    hb.waitGroup(1); // S ready, PV still running
    sNext = hb.registerFence(sNext);
    kRing->release(cur);
    sNext = maskedScores(sNext, kb.add(lo, i));
    SoftmaxStep step = softmaxStep(sNext, mOld, lOld);
    hb.waitGroup(0);
    o = hb.registerFence(o);
    vRing->release(prev);
    SmallVector<Value> pPacked = packP(step.probs); // after the wait: the old P is no longer read
    SmallVector<Value> next;
    for (int idx = 0; idx < p.oValues(); ++idx)
      next.push_back(kb.fmul(o[idx], step.alpha[Acc::half(idx)]));
    next.append(pPacked);
    next.append(step.max);
    next.append(step.sum);
    scf::YieldOp::create(b, loc, next);
  }
  // The last tile's PV.
  SmallVector<Value> res(loop.getResults());
  SmallVector<Value> o(res.begin(), res.begin() + p.oValues());
  SmallVector<Value> pLast(res.begin() + p.oValues(), res.begin() + p.oValues() + pRegs.size());
  // Every QK^T of the tile is done: the producer may load the next tile's Q.
  qRing->release(qSlot);
  auto last = vRing->slot(arith::SubIOp::create(b, loc, add32(ring, toI32(nIter)), c32(1)));
  vRing->waitFull(last);
  hb.fence();
  o = issuePV(o, pLast, stageOffset16(last.stage));
  hb.waitGroup(0);
  o = hb.registerFence(o);
  vRing->release(last);
  SmallVector<Value> out(o);
  out.append(res.end() - 4, res.end());
  scf::YieldOp::create(b, loc, out);
  return SmallVector<Value>(any.getResults());
}

void Sm90Emitter::emitEpilogue(ArrayRef<Value> state, Value cw) {
  ArrayRef<Value> o = state.take_front(p.oValues());
  Value m[2] = {state[p.oValues()], state[p.oValues() + 1]};
  Value l[2] = {rowReduce(state[p.oValues() + 2], CK::ADD), rowReduce(state[p.oValues() + 3], CK::ADD)};
  // Per row: the factor O takes and the LSE (sinks: each row's head's logit joins its sum).
  Value inv[2], lse[2];
  for (int h = 0; h < 2; ++h) {
    if (op.getSinks()) {
      Value sink = memref::LoadOp::create(b, loc, arg(a.sinks), ValueRange{threadHead[h]});
      attn::OnlineSoftmax::Finish f = online->finishWithSink(m[h], l[h], sink);
      inv[h] = f.outputFactor, lse[h] = f.lse;
    } else {
      inv[h] = online->inverseSum(l[h]);
      if (op.getReturnLse()) lse[h] = online->logSumExp(m[h], l[h]);
    }
  }
  // O / l into this consumer's staged O tile, once the previous tile's TMA store has read it.
  Value ltid = kb.remui(kb.threadId(), 128);
  Value cw32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), cw);
  Value epilogueBarrier = arith::AddIOp::create(b, loc, cw32, hb.i32(3)); // ids 3, 4 (and 5)
  if (!varlen) {
    auto leader = scf::IfOp::create(b, loc, eq(ltid, 0), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(leader.thenBlock());
    hb.waitBulkStoresRead();
  }
  hb.namedBarrierSync(epilogueBarrier, 128);
  hopper::StagedTile tile{smem, kb.add(kb.mul(cw, p.qBytesPerConsumer()), p.oOffset()),
                          p.sharedBytes(), p.headDim, p.elem};
  hopper::EpilogueBuilder epilogue(kb, hb);
  epilogue.stage(tile, o, inv, ltid);
  Value rowO = kb.add(q0, kb.mul(cw, p.queriesPerConsumer()));
  if (varlen) {
    // By the threads: a TMA box would overwrite the next sequence's rows.
    hb.namedBarrierSync(epilogueBarrier, 128);
    Value out = arg(a.o.ptr);
    // 16-byte stores need 16-byte aligned rows; Python picks the portable twin otherwise, and
    // a caller of the runtime that does not gets element stores, not a misaligned fault.
    Value address = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, out);
    const int elems16 = 128 / p.elem.getIntOrFloatBitWidth(); // elements per 16 bytes
    Value strideS = arg(a.o.strideS), strideH = arg(a.o.strideH);
    Value aligned = kb.andb(kb.andb(eq(kb.remui(strideS, elems16), 0),
                                    eq(kb.remui(strideH, elems16), 0)),
                            eq(kb.remui(address, 16), 0));
    Value base = kb.add(kb.mul(kb.add(rowQ0, rowO), strideS), kb.mul(head, strideH));
    epilogue.storeByThreads(tile, ltid, kb.sub(seqQ, rowO), out, base, strideS, aligned);
  } else {
    hb.fenceProxyAsyncShared();
    hb.namedBarrierSync(epilogueBarrier, 128);
    auto leader = scf::IfOp::create(
        b, loc, kb.andb(eq(ltid, 0), kb.cmpLe(kb.idx(0), rowO)), false); // rows from query 0
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(leader.thenBlock());
    // Waited for before the next write of the O tile, and at the end.
    epilogue.storeByTma(tile, tmO, qoBox(), [&](int panel) {
      return coords(kb.idx(panel * hopper::kPanelElems), rowO, head);
    });
  }
  if (!op.getReturnLse()) return;
  // LSE (natural log) per row from the lanes holding column 0 of it.
  for (int h = 0; h < 2; ++h) {
    Value base = kb.mul(threadHead[h], arg(a.lseStrideH));
    base = varlen ? kb.add(base, rowQ0) : kb.add(kb.mul(batch, arg(a.lseStrideB)), base);
    Value row = threadQuery[h];
    Value value = lse[h];
    Value writer = eq(hopper::AccumulatorLayout::firstColumn(kb, ltid), 0);
    Value inside = kb.andb(kb.cmpLe(kb.idx(0), row), kb.cmpLt(row, seqQ));
    auto write = scf::IfOp::create(b, loc, kb.andb(writer, inside), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(write.thenBlock());
    memref::StoreOp::create(b, loc, value, arg(a.lse), ValueRange{kb.add(base, row)});
  }
}

} // namespace

/// Why `op` cannot take the sm_90a kernel, or empty when it can.
std::string sm90FlashAttnUnsupported(tessera::FlashAttnOp op) {
  if (op.getHeadDim() != 64 && op.getHeadDim() != 128)
    return "head_dim " + std::to_string(op.getHeadDim()) +
           " does not fit the wgmma kernel's registers (64 and 128 do)";
  if (op.getTileAttr()) return "an explicit tile selects the portable kernel";
  if (op.getSeqused())
    return "seqused leaves rows inside a sequence's range that the wgmma kernel's TMA tiles would "
           "read";
  if (op.getDropout())
    return "dropout draws its mask per score element, which the wgmma kernel does not yet";
  if (op.getPagedKv())
    return "paged K/V rows come through the block table, which the wgmma kernel's TMA copies "
           "do not read";
  return {};
}

FailureOr<gpu::GPUFuncOp> generateFlashAttnSm90(tessera::FlashAttnOp op, const TargetInfo &target) {
  Sm90Plan p;
  p.headDim = op.getHeadDim();
  p.blockN = 128;
  // Three consumers (192 query rows) at head_dim 64 without a window or softcap: a D64 GEMM is
  // too short to hide a softmax behind one other warpgroup (FlashAttention-3 runs D64 with 192
  // rows; measured in bench/NOTES.md). Softcap and window spill at 160 registers.
  if (p.headDim == 64 && !localMask(op) && !op.getSoftcap() && !op.getAlibi() &&
      op.getPackGqa() == 1)
    p.consumers = 3;
  p.pack = int(op.getPackGqa());
  p.elem = op.getDtype();
  p.in = *toElemType(p.elem);
  OpBuilder b(op);
  attn::FlashAttnSignature attnSig = attn::flashAttnSignature(op, p.blockM(), p.threads());
  KernelSignature &sig = attnSig.sig;
  Sm90Args args{attnSig.args, {}, {}, {}, {}, {}};
  const attn::FlashAttnArgs &a = args.attn;
  // A tile's `pack` query heads must share their KV head.
  if (p.pack > 1)
    sig.divisible.push_back({sig.args[a.headsQ.index].name,
                             GridExpr::mul(sig.expr(a.headsKv), GridExpr::constant(p.pack))});
  // TMA tensor maps over (D, S, H, B), or for varlen batches over the packed (D, rows, H);
  // strides in elements (innermost first). Varlen O is stored without one (emitEpilogue).
  Type ptr = LLVM::LLVMPointerType::get(op.getContext());
  const bool varlen = op.getVarlen();
  auto tensorMap = [&](const attn::TensorArg &t, ArgHandle seq, ArgHandle rows, ArgHandle heads,
                       int boxRows, int boxHeads) {
    std::string tensor = sig.args[t.ptr.index].name; // a copy: add() may move the list
    ArgHandle map = sig.add(tensor + "_tma", ptr, ArgRole::TensorMap);
    std::vector<GridExpr> dims = {GridExpr::constant(p.headDim), sig.expr(varlen ? rows : seq),
                                  sig.expr(heads)};
    std::vector<GridExpr> strides = {sig.expr(t.strideS), sig.expr(t.strideH)};
    std::vector<int> boxShape = {hopper::kPanelElems, boxRows, boxHeads};
    if (!varlen) {
      dims.push_back(sig.expr(a.batch));
      strides.push_back(sig.expr(t.strideB));
      boxShape.push_back(1);
    }
    sig.tensorMaps.push_back(
        TensorMapRecipe::tiled(sig.args[map.index].name, tensor, dims, strides, boxShape));
    return map;
  };
  args.qTma = tensorMap(a.q, a.seqQ, a.totalQ, a.headsQ, p.queriesPerConsumer(), p.pack);
  args.kTma = tensorMap(a.k, a.seqK, a.totalK, a.headsKv, p.blockN, 1);
  args.vTma = tensorMap(a.v, a.seqK, a.totalK, a.headsKv, p.blockN, 1);
  if (!varlen)
    args.oTma = tensorMap(a.o, a.seqQ, a.totalQ, a.headsQ, p.queriesPerConsumer(), p.pack);
  // Every plan sm90FlashAttnUnsupported admits fits (D 128: 224 KiB of 227).
  assert(p.sharedBytes() <= TargetInfo::hopperSharedBytes && "sm_90a plan exceeds shared memory");
  sig.dynamicSharedBytes = p.sharedBytes();
  // Persistent kernels launch min(tiles, SMs) workgroups that claim tiles, so the next tile's
  // loads overlap this one's epilogue (bench/NOTES.md has the measurements).
  if (persistentCode(op))
    args.tileCounter = sig.add("tile_counter",
                               MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
                               ArgRole::TileCounter);
  GridExpr headGroups = p.pack == 1 ? sig.expr(a.headsQ)
                                    : GridExpr::floorDiv(sig.expr(a.headsQ),
                                                         GridExpr::constant(p.pack));
  GridExpr tiles = GridExpr::mul(
      GridExpr::ceilDiv(sig.expr(a.seqQ), GridExpr::constant(p.tileQueries())),
      GridExpr::mul(headGroups, sig.expr(a.batch)));
  sig.grid[0] = persistentCode(op) ? GridExpr::min(tiles, GridExpr::smCount()) : tiles;
  sig.grid[1] = sig.grid[2] = GridExpr::constant(1);
  gpu::GPUFuncOp func = createKernel(b, op.getLoc(), target, sig);
  // setmaxnreg needs the register count at entry fixed: one workgroup per SM.
  func->setAttr("nvvm.minctasm", b.getI32IntegerAttr(1));
  Sm90Emitter(op, p, b, func, target, args).emit();
  return func;
}

} // namespace tessera

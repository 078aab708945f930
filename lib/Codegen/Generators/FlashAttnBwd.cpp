// The flash_attn_bwd generator: FlashAttention-2's backward on the matrix cores, as a kernel set
// sharing the call's workspaces (FlashAttnBwdPlan.h has the tiles).
//
// Recipe:
//   pre      per query row and head: Delta = rowsum(dO * O) and the LSE as the shift of the
//            recomputed probabilities (-inf rows shift by +inf, so their P is exactly 0);
//   main     a workgroup owns a key block of one KV head: K and V stay in LDS, dK and dV in
//            registers, while it walks the visible query blocks of every query head of the GQA
//            group (no expanded copies, no dK/dV workspace). Per query block: S^T and dP^T on
//            the matrix cores, P^T = exp2(S^T - lse) and dS^T = P^T (dP^T - Delta) (times the
//            soft cap's derivative) through LDS, dV += P^T dO, dK += dS^T Q, and unless
//            deterministic dQ += dS K added in f32 to the dq_accum workspace;
//   dq       (deterministic) a workgroup owns a query block and walks its visible key blocks in
//            order, recomputing S and dP: no atomics, runs are bitwise identical;
//   dq_convert (otherwise) dq = dq_accum * scale in the output type.
// Where the atom cannot read an operand along its rows in vectors (WMMA), the kernels also keep
// K^T, Q^T, dO^T and dS in LDS (plan.transposedCopies).
// dK is scaled once at the end, dQ in its last kernel. Visibility, sequence lengths, the softmax's
// shift and the ABI are the shared Attention/ pieces.
#include "tessera/Codegen/Attention/AccView.h"
#include "tessera/Codegen/Attention/Dropout.h"
#include "tessera/Codegen/Attention/Signature.h"
#include "tessera/Codegen/Attention/Softmax.h"
#include "tessera/Codegen/Attention/Visibility.h"
#include "tessera/Codegen/FlashAttnBwdPlan.h"
#include "tessera/Codegen/Generators.h"
#include "tessera/Codegen/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;

namespace tessera {
namespace {

using attn::AccView;
using attn::QueryAxis;
using Operand = KernelBuilder::Operand;

/// An LDS tile as one operand of a product: stored with K along its columns, or along its rows.
struct LdsOperand {
  const LdsTile *tile;
  bool kAlongRows = false;
};

enum class Stat { LseShift = 0, Delta = 1 };

/// The statistics of a staged query block in LDS: the LSE shift of each row, then its Delta;
/// from `origin` (null: 0) in `memref` when it is one of several buffers.
struct StatsTile {
  Value memref;
  int rows = 0;
  Value origin;
  /// The element of statistic `s` (an index) of row `local`.
  Value at(KernelBuilder &kb, Value s, Value local) const {
    Value i = kb.add(kb.mul(s, rows), local);
    return origin ? kb.add(origin, i) : i;
  }
  Value at(KernelBuilder &kb, Stat s, Value local) const { return at(kb, kb.idx(int(s)), local); }
  StatsTile buffer(KernelBuilder &kb, int buffers, Value which) const {
    StatsTile one{memref, rows / buffers};
    if (buffers > 1) one.origin = kb.mul(which, 2 * one.rows);
    return one;
  }
};

/// Independent memory operations emitted a few at a time between the k-steps of later products
/// (blockProduct's `spread`), each group behind a memory scheduling fence: issued in one burst
/// (dQ's 32 atomic adds a lane, where the scheduler puts them as soon as their data is ready)
/// they fill the memory queue and stall the wave, interleaved they drain under the products.
class SpreadWork {
public:
  void add(std::function<void()> item) { items.push_back(std::move(item)); }
  /// An equal share after each of the `steps` k-steps to come.
  void spreadOver(int steps) { perStep = llvm::divideCeil(items.size(), std::max(steps, 1)); }
  void afterStep(KernelBuilder &kb) {
    if (next == items.size()) return;
    kb.memoryScheduleFence();
    emit(perStep);
  }
  /// Emits what is left.
  void finish() { emit(items.size()); }

private:
  void emit(size_t n) {
    for (; n && next < items.size(); --n) items[next++]();
  }
  SmallVector<std::function<void()>> items;
  size_t next = 0, perStep = 1;
};

/// A staged block of Q and dO (the main kernel's step) with its statistics and, where the plan
/// keeps them, Q^T and dO^T.
struct QueryBlock {
  LdsTile q, dO;
  StatsTile stats;
  std::optional<LdsTile> qT, dOT;
};

/// What every kernel of the set shares: the arguments, the batch item, the tensors and the
/// per-head workspace indexing.
class BwdKernel {
public:
  BwdKernel(tessera::FlashAttnBwdOp op, const AttnBwdPlan &p, const TargetInfo &t, OpBuilder &b,
            gpu::GPUFuncOp func, const attn::FlashAttnBwdArgs &args)
      : op(op), p(p), t(t), b(b), loc(op.getLoc()), kb(b, loc, t), func(func), args(args),
        a(args.fwd), elem(op.getDtype()), softmax(kb) {
    b.setInsertionPoint(func.getBody().front().getTerminator());
    batch = kb.blockId(gpu::Dimension::z);
    seq = attn::seqInfo(kb, func, a, op.getVarlen(), batch);
    q = bind(a.q), k = bind(a.k), v = bind(a.v), o = bind(a.o);
    dO = bind(args.dO), dq = bind(args.dq), dk = bind(args.dk), dv = bind(args.dv);
    headDim = kb.idx(op.getHeadDim());
    elemBits = elem.getIntOrFloatBitWidth();
  }

protected:
  Value arg(ArgHandle h) { return argValue(func, h); }
  attn::Tensor bind(const attn::TensorArg &ta) { return attn::Tensor::bind(func, ta); }
  Value extract(Value vec, int i) { return vector::ExtractOp::create(b, loc, vec, i); }
  Value splat(Value scalar, Type like) {
    return vector::BroadcastOp::create(b, loc, cast<VectorType>(like), scalar);
  }

  /// The row of query `query` of this batch item in the per-row workspaces: items packed
  /// (varlen) or B x Sq.
  Value workspaceRow(Value query) {
    return seq.varlen ? kb.add(seq.rowQ0, query) : kb.add(kb.mul(batch, arg(a.seqQ)), query);
  }
  Value workspaceRows() {
    return seq.varlen ? arg(a.totalQ) : kb.mul(arg(a.batch), arg(a.seqQ));
  }
  /// The flat index of statistic `s` (an index) of (head, query) in bwd_stats
  /// ([stat][Hq][rows]).
  Value statIndex(Value s, Value head, Value query) {
    Value plane = kb.add(kb.mul(s, arg(a.headsQ)), head);
    return kb.add(kb.mul(plane, workspaceRows()), workspaceRow(query));
  }
  Value statIndex(Stat s, Value head, Value query) { return statIndex(kb.idx(int(s)), head, query); }
  /// The flat index of dQ element (head, query, col) in dq_accum ([Hq][rows][tile width]); `col`
  /// is a position in the row (dqAccumPosition).
  Value dqAccumIndex(Value head, Value query, Value col) {
    Value row = kb.add(kb.mul(head, workspaceRows()), workspaceRow(query));
    return kb.add(kb.mul(row, p.headDim), col);
  }
  /// Whether dq_accum's rows hold their columns paired for vector reductions: on Hopper, where
  /// each wave's dQ block spans whole pairs of mma.sync's 8-column tiles.
  bool pairedDqColumns() const {
    const WaveTiles w = p.queryGrads();
    return t.vendor == Vendor::NVIDIA && t.arch == "Hopper" && p.atom->kind == AtomKind::MMASync &&
           p.atom->n == 8 && w.blockCols() % 2 == 0;
  }
  /// Paired, the position of column `c` (0-15) in its group of 16: dqAccumPosition for a
  /// column known when the kernel is generated.
  static int pairedPosition(int c) { return 4 * ((c % 8) / 2) + 2 * (c / 8) + c % 2; }
  /// The position of column `col` in a dq_accum row. Paired: in each group of 16 columns, a
  /// lane's two columns of each of the two 8-column accumulator tiles (8h + 2t + e) are side by
  /// side (at 4t + 2h + e), so one 16-byte reduction adds all four. Else the column itself.
  Value dqAccumPosition(Value col) {
    if (!pairedDqColumns()) return col;
    Value group = kb.andb(col, kb.idx(~int64_t(15)));
    Value pairIn = kb.mul(kb.andb(col, kb.idx(6)), 2);           // 2t -> 4t
    Value tileIn = kb.andb(kb.divui(col, 4), kb.idx(2));          // h -> 2h
    return kb.add(kb.add(group, pairIn), kb.add(tileIn, kb.andb(col, kb.idx(1))));
  }
  /// This workgroup's (sequence block, head) in its grid of (ceil(length / rows), heads,
  /// batch). Workgroups start in the order of their linear index; this order takes
  /// kHeadsTogether heads at a time and, within them, the blocks from the costliest under a
  /// causal mask (the first key blocks; the last query blocks when `costliestLast`), so the grid
  /// ends on its cheapest workgroups (a longest-first schedule; in order, GQA's causal grid
  /// measured 20% slower) while the heads in flight still share L2.
  std::pair<Value, Value> scheduledBlock(ArgHandle length, int rows, ArgHandle headCount,
                                         bool costliestLast) {
    // In 32 bits, the grid's own width: cheaper than index arithmetic. (kb's add, sub and mul
    // take any integer type; its constants and divisions are index-typed.)
    Type i32 = b.getI32Type();
    auto c = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, i32, v).getResult(); };
    auto narrow = [&](Value v) { return arith::IndexCastUIOp::create(b, loc, i32, v).getResult(); };
    auto div = [&](Value x, Value y) { return arith::DivUIOp::create(b, loc, x, y).getResult(); };
    auto rem = [&](Value x, Value y) { return arith::RemUIOp::create(b, loc, x, y).getResult(); };
    Value blocks = narrow(kb.ceilDivsi(arg(length), rows)), heads = narrow(arg(headCount));
    Value linear = kb.add(narrow(kb.blockId(gpu::Dimension::x)),
                          kb.mul(blocks, narrow(kb.blockId(gpu::Dimension::y))));
    Value span = kb.mul(blocks, c(kHeadsTogether));
    Value firstHead = kb.mul(div(linear, span), c(kHeadsTogether));
    Value inGroup = rem(linear, span);
    Value together = arith::MinUIOp::create(b, loc, kb.sub(heads, firstHead), c(kHeadsTogether));
    Value block = div(inGroup, together);
    Value head = kb.add(firstHead, rem(inGroup, together));
    if (costliestLast) block = kb.sub(kb.sub(blocks, c(1)), block);
    auto index = [&](Value v) {
      return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), v).getResult();
    };
    return {index(block), index(head)};
  }
  static constexpr int kHeadsTogether = 4;

  /// A `rows` x D block of `tensor` (head `head`) starting at query/key `first` of this item: a
  /// tile's columns past D read as zero and are never stored.
  KernelBuilder::GlobalTile block(const attn::Tensor &tensor, Value row0, Value first, Value head,
                                  Value count) {
    Value base = tensor.base(kb, seq, batch, row0, head);
    return {tensor.ptr, kb.add(base, kb.mul(first, tensor.strideS)), tensor.strideS,
            kb.sub(count, first), headDim, tensor.stridesAligned16(kb, elemBits)};
  }

  tessera::FlashAttnBwdOp op;
  const AttnBwdPlan &p;
  const TargetInfo &t;
  OpBuilder &b;
  Location loc;
  KernelBuilder kb;
  gpu::GPUFuncOp func;
  const attn::FlashAttnBwdArgs &args;
  const attn::FlashAttnArgs &a;
  Type elem;
  attn::OnlineSoftmax softmax;
  Value batch;
  Value headDim; ///< the directive's; p.headDim, the tiles' width, may be larger (the columns past
                 ///< it read as zero and are never stored)
  int elemBits = 16;
  attn::SeqInfo seq;
  attn::Tensor q, k, v, o, dO, dq, dk, dv;
};

/// pre: Delta and the LSE shift of `rowsPerBlock` query rows of one head per workgroup, four
/// threads per row.
class PreprocessKernel : public BwdKernel {
public:
  static constexpr int kThreadsPerRow = 4;
  static int rowsPerBlock(int headDim) { return headDim <= 128 ? 64 : 32; }
  using BwdKernel::BwdKernel;

  void emit() {
    const int rows = rowsPerBlock(p.headDim), threads = rows * kThreadsPerRow;
    LdsTile ldsO = kb.allocLds(func, elem, rows, p.headDim);
    LdsTile ldsDO = kb.allocLds(func, elem, rows, p.headDim);
    b.setInsertionPoint(func.getBody().front().getTerminator());
    Value head = kb.blockId(gpu::Dimension::y);
    Value q0 = kb.mul(kb.blockId(gpu::Dimension::x), rows);
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(q0, seq.seqQ));
    kb.copyGlobalToLds(block(o, seq.rowQ0, q0, head, seq.seqQ), ldsO, rows, p.headDim, false,
                       threads);
    kb.copyGlobalToLds(block(dO, seq.rowQ0, q0, head, seq.seqQ), ldsDO, rows, p.headDim, false,
                       threads);
    kb.barrier();
    Value tid = kb.threadId();
    Value row = kb.divui(tid, kThreadsPerRow), part = kb.remui(tid, kThreadsPerRow);
    Value sum = kb.f32(0);
    for (int c = 0; c < int(op.getHeadDim()); c += kThreadsPerRow) {
      Value col = kb.add(part, c);
      auto at = [&](const LdsTile &tile) {
        Value x = memref::LoadOp::create(b, loc, tile.memref,
                                         ValueRange{kb.ldsOffset(tile, row, col)});
        return kb.convert(x, b.getF32Type());
      };
      sum = math::FmaOp::create(b, loc, at(ldsO), at(ldsDO), sum);
    }
    // The row's four threads are neighbouring lanes.
    Value delta = kb.laneAllReduce({sum}, {1, 2}, vector::CombiningKind::ADD).front();
    Value query = kb.add(q0, row);
    kb.enterIf(kb.andb(kb.cmpLt(query, seq.seqQ), kb.cmpEq(part, kb.idx(0))));
    Value lseAt = kb.add(kb.mul(head, arg(a.lseStrideH)), query);
    lseAt = seq.varlen ? kb.add(lseAt, seq.rowQ0) : kb.add(lseAt, kb.mul(batch, arg(a.lseStrideB)));
    Value lse = memref::LoadOp::create(b, loc, arg(a.lse), ValueRange{lseAt});
    Value stats = arg(args.stats);
    memref::StoreOp::create(b, loc, softmax.lseToShift(lse), stats,
                            ValueRange{statIndex(Stat::LseShift, head, query)});
    memref::StoreOp::create(b, loc, delta, stats, ValueRange{statIndex(Stat::Delta, head, query)});
  }
};

/// dq_convert: dq = dq_accum * scale, 64 rows of one head per workgroup. A thread converts runs
/// of a row's columns, read from dq_accum as 16-byte vectors (paired: the whole group of 16
/// columns whose positions interleave) and written as 16-byte vectors where dq's strides allow.
class ConvertKernel : public BwdKernel {
public:
  static constexpr int kRows = 64;
  using BwdKernel::BwdKernel;

  void emit() {
    const int threads = p.threads();
    const bool paired = pairedDqColumns();
    const int run = paired ? 16 : 8, outVec = 128 / elemBits, inVec = 4;
    assert(p.headDim % run == 0 && run % outVec == 0 && "the tiles are a multiple of 16 wide");
    // The runs that hold columns below head_dim; the last may end past it.
    const int headDimCols = int(op.getHeadDim()), runsPerRow = llvm::divideCeil(headDimCols, run);
    Value head = kb.blockId(gpu::Dimension::y);
    Value q0 = kb.mul(kb.blockId(gpu::Dimension::x), kRows);
    Value out = dq.base(kb, seq, batch, seq.rowQ0, head);
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(q0, seq.seqQ));
    Value vectorOk = dq.stridesAligned16(kb, elemBits);
    Value tid = kb.threadId(), scale = arg(a.scale);
    auto f32x4 = VectorType::get({inVec}, b.getF32Type());
    auto outType = VectorType::get({outVec}, elem);
    for (int first = 0; first < kRows * runsPerRow; first += threads) {
      OpBuilder::InsertionGuard inner(b);
      Value r = kb.add(tid, first);
      if (first + threads > kRows * runsPerRow) kb.enterIf(kb.cmpLt(r, kb.idx(kRows * runsPerRow)));
      Value query = kb.add(q0, kb.divui(r, runsPerRow));
      Value col0 = kb.mul(kb.remui(r, runsPerRow), run);
      kb.enterIf(kb.cmpLt(query, seq.seqQ));
      // The run's positions in dq_accum are its own columns (paired: permuted within them).
      Value from = dqAccumIndex(head, query, col0);
      SmallVector<Value> in;
      for (int v = 0; v < run; v += inVec) {
        Value x = vector::LoadOp::create(b, loc, f32x4, arg(args.dqAccum),
                                         ValueRange{kb.add(from, v)}, false, llvm::Align(16));
        for (int e = 0; e < inVec; ++e) in.push_back(extract(x, e));
      }
      Value to = kb.add(out, kb.add(kb.mul(query, dq.strideS), col0));
      for (int c0 = 0; c0 < run; c0 += outVec) {
        OpBuilder::InsertionGuard inRow(b);
        if (headDimCols % run) kb.enterIf(kb.cmpLt(kb.add(col0, c0), headDim));
        SmallVector<Value> ys;
        for (int c = c0; c < c0 + outVec; ++c)
          ys.push_back(kb.convert(kb.fmul(in[paired ? pairedPosition(c) : c], scale), elem));
        kb.storeVector(vector::FromElementsOp::create(b, loc, outType, ys), dq.ptr,
                       kb.add(to, c0), vectorOk);
      }
    }
  }
};

/// What the main and dQ kernels share: products of LDS tiles dealt to the waves, the gradient
/// of the scores, the staged query blocks.
class ProductKernel : public BwdKernel {
public:
  ProductKernel(tessera::FlashAttnBwdOp op, const AttnBwdPlan &p, const TargetInfo &t,
                OpBuilder &b, gpu::GPUFuncOp func, const attn::FlashAttnBwdArgs &args)
      : BwdKernel(op, p, t, b, func, args), atom(*p.atom) {}

protected:
  /// Allocations come first (they are function attributions); then the common values.
  void setUpValues() {
    b.setInsertionPoint(func.getBody().front().getTerminator());
    lane = kb.laneId();
    wave = kb.waveId();
    visibility.emplace(attn::flashAttnVisibility(op, kb, func, a, seq.seqQ, seq.seqK));
    scaleLog2 = kb.fmul(arg(a.scale), kb.f32(M_LOG2E));
    cap = op.getSoftcap() ? arg(a.softcap) : Value();
    if (op.getDropout()) dropout = attn::Dropout::load(kb, arg(a.rngState), arg(a.dropoutP));
  }
  /// The forward's dropout for query head `head`; none without dropout.
  std::optional<attn::Dropout> dropoutOf(Value head) {
    if (!dropout) return std::nullopt;
    return dropout->forStream(kb, batch, head, arg(a.headsQ));
  }
  /// Query head `head`'s ALiBi slope times log2(e); null without ALiBi.
  Value alibiSlopeLog2(Value head) {
    if (!op.getAlibi()) return {};
    Value at = kb.add(kb.mul(batch, arg(a.alibiStrideB)), head);
    Value slope = memref::LoadOp::create(b, loc, arg(a.alibiSlopes), ValueRange{at});
    return kb.fmul(slope, kb.f32(M_LOG2E));
  }
  /// The kernel's LDS: workgroup attributions, or views of `bytes` of dynamic shared memory
  /// (plan.dynamicLds), allocated in order.
  void beginLds(int bytes) {
    if (!p.dynamicLds) return;
    arenaBytes = bytes + kArenaSlack;
    // Every LDS tile of the kernel is in it: no static shared memory to overlap.
    auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    arena = gpu::DynamicSharedMemoryOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(), MemRefLayoutAttrInterface{},
                                space));
    func->setAttr(TesseraDialect::getDynamicLdsBytesAttrName(), b.getI64IntegerAttr(arenaBytes));
  }
  LdsTile allocTile(int rows, int cols) {
    if (!arena) return kb.allocLds(func, elem, rows, cols);
    LdsTile tile = kb.ldsTileIn(arena, arenaOffset, elem, rows, cols);
    advance(tile.elements() * elemBits / 8);
    return tile;
  }
  StatsTile allocStats(int rows) {
    auto space = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    auto type = MemRefType::get({2 * rows}, b.getF32Type(), MemRefLayoutAttrInterface{}, space);
    if (!arena) return {func.addWorkgroupAttribution(type, loc), rows};
    Value view = memref::ViewOp::create(b, loc, type, arena, kb.idx(arenaOffset), ValueRange{});
    advance(8 * rows);
    return {view, rows};
  }
  void advance(int64_t bytes) {
    arenaOffset = llvm::alignTo(arenaOffset + bytes, 16);
    assert(arenaOffset <= arenaBytes && "LDS arena overflow");
  }

  /// This wave's block of `w`: the origins of its tile rows and of its tile columns.
  struct WaveBlock {
    Value rowOrigin, colOrigin;
    SmallVector<Value> rows, cols; ///< the origins plus i * tileRows, j * tileCols
  };
  WaveBlock waveBlock(const WaveTiles &w) {
    Value r = kb.divui(wave, w.waveCols), c = kb.remui(wave, w.waveCols);
    WaveBlock blk{kb.mul(r, w.blockRows() * w.tileRows), kb.mul(c, w.blockCols() * w.tileCols)};
    for (int i = 0; i < w.blockRows(); ++i) blk.rows.push_back(kb.add(blk.rowOrigin, i * w.tileRows));
    for (int j = 0; j < w.blockCols(); ++j) blk.cols.push_back(kb.add(blk.colOrigin, j * w.tileCols));
    return blk;
  }
  /// Calls body(block) in the waves that own a block of `w` (not those past its wave grid).
  void forWaveBlock(const WaveTiles &w, llvm::function_ref<void(const WaveBlock &)> body) {
    OpBuilder::InsertionGuard g(b);
    if (w.activeWaves() < w.waves) kb.enterIf(kb.cmpLt(wave, kb.idx(w.activeWaves())));
    body(waveBlock(w));
  }
  /// accs = update(block, accs): gradient accumulators of this wave's block of `w`, left as they
  /// are in idle waves.
  void updateWaveBlock(const WaveTiles &w, MutableArrayRef<Value> accs,
                       llvm::function_ref<SmallVector<Value>(const WaveBlock &, ArrayRef<Value>)>
                           update) {
    SmallVector<Value> olds(accs.begin(), accs.end()), news;
    if (w.activeWaves() == w.waves) {
      news = update(waveBlock(w), olds);
    } else {
      auto ifOp = scf::IfOp::create(b, loc, TypeRange(ValueRange(olds)),
                                    kb.cmpLt(wave, kb.idx(w.activeWaves())), true);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      scf::YieldOp::create(b, loc, update(waveBlock(w), olds));
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, loc, olds);
      news.assign(ifOp.getResults().begin(), ifOp.getResults().end());
    }
    llvm::copy(news, accs.begin());
  }
  /// accs[i * cols + j] + A B over `depth` (the reduction) for a block of tiles: A's rows from
  /// aRows[i], B's columns from bCols[j] (adjacent tiles); each k-step's fragments are loaded
  /// once for the block.
  /// No accs: from zero. `spread`: work to interleave with the matrix instructions.
  SmallVector<Value> blockProduct(LdsOperand aOp, ArrayRef<Value> aRows, LdsOperand bOp,
                                  ArrayRef<Value> bCols, int depth, ArrayRef<Value> accs = {},
                                  SpreadWork *spread = nullptr) {
    SmallVector<Value> out(accs.begin(), accs.end());
    if (out.empty()) out.assign(aRows.size() * bCols.size(), kb.zero(kb.accType(atom)));
    // Step kk's A and B fragments; with prefetching, loaded during step kk - 1.
    using Fragments = std::pair<SmallVector<Value>, SmallVector<Value>>;
    auto loadStep = [&](int kk) {
      return Fragments{
          kb.loadOperands(*aOp.tile, atom, Operand::A, lane, aRows, kk, aOp.kAlongRows),
          kb.loadOperands(*bOp.tile, atom, Operand::B, lane, bCols, kk, bOp.kAlongRows)};
    };
    Fragments next = p.prefetchFragments ? loadStep(0) : Fragments{};
    for (int kk = 0; kk < depth; kk += atom.k) {
      // WMMA's replicated fragments: one k-step's reads in flight, or the scheduler hoists them
      // all and spills.
      if (atom.kind == AtomKind::WMMA) kb.memoryScheduleFence();
      auto [aFrags, bFrags] = p.prefetchFragments ? next : loadStep(kk);
      if (p.prefetchFragments && kk + atom.k < depth) next = loadStep(kk + atom.k);
      for (size_t i = 0; i < aFrags.size(); ++i)
        for (size_t j = 0; j < bFrags.size(); ++j) {
          Value &acc = out[i * bFrags.size() + j];
          acc = kb.mma(atom, aFrags[i], bFrags[j], acc);
        }
      if (spread) spread->afterStep(kb);
    }
    return out;
  }

  /// A rows x D block copied to `dst`, and transposed to `dstT` ([D][rows]) when kept.
  void stage(const KernelBuilder::GlobalTile &src, const LdsTile &dst,
             const std::optional<LdsTile> &dstT, int rows) {
    SmallVector<Value> data = kb.loadGlobalTile(src, rows, p.headDim, p.threads());
    kb.storeLdsTile(data, dst, rows, p.headDim, /*transpose=*/false, p.threads());
    if (dstT) kb.storeLdsTile(data, *dstT, rows, p.headDim, /*transpose=*/true, p.threads());
  }
  /// `tile` as an operand read along its rows (K down its columns): its transposed copy when
  /// the plan keeps one (plan.transposedCopies), else the tile itself.
  static LdsOperand alongRows(const LdsTile &tile, const std::optional<LdsTile> &copy) {
    return copy ? LdsOperand{&*copy} : LdsOperand{&tile, true};
  }
  std::optional<LdsTile> allocCopy(int rows, int cols) {
    if (!p.transposedCopies) return std::nullopt;
    return allocTile(rows, cols);
  }

  /// Stages `dst.stats.rows` queries of head `head` from q0 in LDS: Q and dO (rows past the
  /// sequence read as zero), each row's LSE shift and Delta (rows past the sequence shift by
  /// +inf with Delta 0), and the transposed copies the block keeps.
  void stageQueries(Value head, Value q0, const QueryBlock &dst) {
    const int rows = dst.stats.rows;
    stage(block(q, seq.rowQ0, q0, head, seq.seqQ), dst.q, dst.qT, rows);
    stage(block(dO, seq.rowQ0, q0, head, seq.seqQ), dst.dO, dst.dOT, rows);
    OpBuilder::InsertionGuard g(b);
    Value tid = kb.threadId(), query = kb.add(q0, tid);
    kb.enterIf(kb.cmpLt(tid, kb.idx(rows)));
    Value valid = kb.cmpLt(query, seq.seqQ);
    for (Stat s : {Stat::LseShift, Stat::Delta}) {
      auto load = scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, valid, true);
      {
        OpBuilder::InsertionGuard gi(b);
        b.setInsertionPointToStart(load.thenBlock());
        Value x = memref::LoadOp::create(b, loc, arg(args.stats),
                                         ValueRange{statIndex(s, head, query)});
        scf::YieldOp::create(b, loc, x);
        b.setInsertionPointToStart(load.elseBlock());
        scf::YieldOp::create(b, loc, kb.f32(s == Stat::LseShift ? INFINITY : 0.0));
      }
      memref::StoreOp::create(b, loc, load.getResult(0), dst.stats.memref,
                              ValueRange{dst.stats.at(kb, s, tid)});
    }
  }
  /// stageQueries through asynchronous copies (no transposed copies): in LDS once this
  /// thread's asyncWait covers the group committed after it. Rows past the sequence read as
  /// zero, their statistics too: with zero Q and dO their P (dP - Delta) is 0 whatever the
  /// shift, and P^T dO adds nothing.
  void stageQueriesAsync(Value head, Value q0, const QueryBlock &dst) {
    assert(!dst.qT && !dst.dOT && "transposed copies are staged synchronously");
    const int rows = dst.stats.rows;
    kb.copyGlobalToLdsAsync(block(q, seq.rowQ0, q0, head, seq.seqQ), dst.q, rows, p.headDim,
                            p.threads());
    kb.copyGlobalToLdsAsync(block(dO, seq.rowQ0, q0, head, seq.seqQ), dst.dO, rows, p.headDim,
                            p.threads());
    // Thread t < 2 rows copies statistic t / rows of row t % rows.
    assert(p.threads() >= 2 * rows && "one thread per statistic");
    OpBuilder::InsertionGuard g(b);
    Value tid = kb.threadId();
    kb.enterIf(kb.cmpLt(tid, kb.idx(2 * rows)));
    Value stat = kb.divui(tid, rows), local = kb.remui(tid, rows), query = kb.add(q0, local);
    Value valid = kb.cmpLt(query, seq.seqQ);
    kb.asyncCopy(dst.stats.memref, dst.stats.at(kb, stat, local), arg(args.stats),
                 statIndex(stat, head, kb.select(valid, query, q0)), 1,
                 kb.select(valid, kb.idx(1), kb.idx(0)));
  }

  /// dS (or dS^T) of one score tile, from its S and dP accumulators seen through `view`:
  ///   P = exp2(scaled(S) + ALiBi bias (`alibiSlope`, when given) - lse shift), masked to 0
  ///   where invisible (`masked`),
  ///   dS = P (dP - Delta), times the soft cap's derivative (`capped`),
  /// with `keep` (attn::dropoutKeep's bits of the tile, under the forward's dropout `drop`): dP
  /// and the returned P (for dV) the kept elements times 1 / (1 - p), zero elsewhere;
  /// Delta = rowsum(dO O) holds it already.
  /// The tile's first query and key in the item are `queryOffset` / `keyOffset` past
  /// `query0` / `key0` (its wave block's), `local0` its first query in `stats`. Returns {P, dS}.
  /// Branch-free: attn::scoreVariants chooses the variant.
  std::pair<Value, Value> scoreGradient(Value s, Value dp, const AccView &view, Value query0,
                                        Value key0, int queryOffset, int keyOffset, Value local0,
                                        const StatsTile &stats, Value alibiSlope,
                                        const std::optional<attn::Dropout> &drop, Value keep,
                                        bool masked, bool capped) {
    auto vecType = cast<VectorType>(s.getType());
    Value firstLocal = kb.add(local0, view.laneOffsets(kb, lane).first);
    Value scores = kb.fmul(s, splat(scaleLog2, vecType)), slope;
    // The cap's derivative from the unmasked logits: masking first would give 1 - inf^2.
    if (capped) {
      attn::CappedScores c = attn::capScores(kb, scores, cap);
      scores = c.scores, slope = c.slope;
    }
    if (alibiSlope)
      scores = attn::addAlibiBias(kb, *visibility, view, lane, scores, query0, key0, alibiSlope,
                                  queryOffset, keyOffset);
    if (masked)
      scores = attn::maskScores(kb, *visibility, view, lane, scores, query0, key0, Value(),
                                nullptr, queryOffset, keyOffset);
    // The statistics read after the scores: read first, they would all be live at once.
    SmallVector<Value> shifts, deltas;
    for (const attn::AccElement &el : view.elements()) {
      Value local = kb.add(firstLocal, el.query);
      shifts.push_back(memref::LoadOp::create(b, loc, stats.memref,
                                              ValueRange{stats.at(kb, Stat::LseShift, local)}));
      deltas.push_back(memref::LoadOp::create(b, loc, stats.memref,
                                              ValueRange{stats.at(kb, Stat::Delta, local)}));
    }
    Value shift = vector::FromElementsOp::create(b, loc, vecType, shifts);
    Value delta = vector::FromElementsOp::create(b, loc, vecType, deltas);
    Value prob = softmax.probabilityFromLse(scores, shift), kept = prob;
    if (drop) {
      dp = attn::applyDropout(kb, dp, keep, drop->keepScale);
      kept = attn::applyDropout(kb, prob, keep, drop->keepScale);
    }
    Value ds = kb.fmul(prob, kb.fsub(dp, delta));
    return {kept, slope ? kb.fmul(ds, slope) : ds};
  }
  /// attn::dropoutKeep's bits of each score tile of wave block `blk` (tiles of `w`, row-major),
  /// whose first query and key are `query0` and `key0`, queries along the tiles' columns or rows;
  /// empty without `drop`.
  SmallVector<Value> dropoutBits(const std::optional<attn::Dropout> &drop, const AccView &view,
                                 const WaveBlock &blk, const WaveTiles &w, Value query0, Value key0,
                                 bool queriesAlongCols) {
    SmallVector<Value> bits;
    if (!drop) return bits;
    for (size_t i = 0; i < blk.rows.size(); ++i)
      for (size_t j = 0; j < blk.cols.size(); ++j) {
        int rowOffset = int(i) * w.tileRows, colOffset = int(j) * w.tileCols;
        auto [queryOffset, keyOffset] = queriesAlongCols ? std::pair{colOffset, rowOffset}
                                                         : std::pair{rowOffset, colOffset};
        bits.push_back(
            attn::dropoutKeep(kb, *drop, view, lane, query0, key0, queryOffset, keyOffset));
      }
    return bits;
  }
  /// Stores accumulator `acc` (seen through `view`) into an LDS tile indexed [query][key]
  /// (`transposed`: [key][query]) at the tile's origin; the lane's elements that are contiguous
  /// along the tile's rows as one vector store.
  void storeToLds(Value acc, const AccView &view, const LdsTile &tile, Value queryOrigin,
                  Value keyOrigin, bool transposed) {
    const bool alongAtomCols = transposed == (view.queryAxis() == QueryAxis::Cols);
    const int run = alongAtomCols ? std::min(view.operandLayout().contiguousAlongCols(), tile.chunk)
                                  : 1;
    auto [laneQuery, laneKey] = view.laneOffsets(kb, lane);
    Value firstQuery = kb.add(queryOrigin, laneQuery), firstKey = kb.add(keyOrigin, laneKey);
    SmallVector<attn::AccElement> els = view.elements();
    for (size_t e = 0; e < els.size(); e += run) {
      Value qi = kb.add(firstQuery, els[e].query), ki = kb.add(firstKey, els[e].inner);
      Value at = transposed ? kb.ldsOffset(tile, ki, qi) : kb.ldsOffset(tile, qi, ki);
      SmallVector<Value> values;
      // P and dS: finite for finite inputs.
      for (int j = 0; j < run; ++j)
        values.push_back(kb.convertFinite(extract(acc, els[e + j].reg), elem));
      if (run == 1) {
        memref::StoreOp::create(b, loc, values[0], tile.memref, ValueRange{at});
        continue;
      }
      Value vec = vector::FromElementsOp::create(b, loc, VectorType::get({run}, elem), values);
      vector::StoreOp::create(b, loc, vec, tile.memref, ValueRange{at}, /*nontemporal=*/false,
                              llvm::Align(run * elemBits / 8));
    }
  }

  /// Stores this wave's gradient block `accs` of `w` to `dst` (its rows from `firstRow`, or 0
  /// when null) times `factor`.
  void storeGradients(ArrayRef<Value> accs, const WaveTiles &w,
                      const KernelBuilder::GlobalTile &dst, Value firstRow, Value factor) {
    forWaveBlock(w, [&](const WaveBlock &blk) {
      for (size_t i = 0; i < blk.rows.size(); ++i)
        for (size_t j = 0; j < blk.cols.size(); ++j) {
          Value acc = accs[i * blk.cols.size() + j];
          if (factor) acc = kb.fmul(acc, splat(factor, acc.getType()));
          Value row = firstRow ? kb.add(firstRow, blk.rows[i]) : blk.rows[i];
          kb.storeAccumulator(atom, acc, dst, lane, row, blk.cols[j]);
        }
    });
  }

  static constexpr int kArenaSlack = 128; ///< 16-byte alignment of up to eight tiles
  const MMAAtom &atom;
  Value arena;
  int64_t arenaOffset = 0, arenaBytes = 0;
  Value lane, wave;
  std::optional<attn::Visibility> visibility;
  Value scaleLog2, cap;
  std::optional<attn::Dropout> dropout; ///< the rate and seed, per head by dropoutOf
};

/// main: dK and dV of one key block (and dQ partials unless deterministic).
class MainKernel : public ProductKernel {
public:
  using ProductKernel::ProductKernel;

  void emit() {
    beginLds(attnBwdMainLdsBytes(p, t));
    LdsTile ldsK = allocTile(p.blockN, p.headDim), ldsV = allocTile(p.blockN, p.headDim);
    // The query blocks' buffers, one after the other.
    LdsTile ldsQs = allocTile(p.queryBuffers * p.blockM, p.headDim);
    LdsTile ldsDOs = allocTile(p.queryBuffers * p.blockM, p.headDim);
    LdsTile ldsPT = allocTile(p.blockN, p.blockM), ldsDST = allocTile(p.blockN, p.blockM);
    std::optional<LdsTile> ldsKT = allocCopy(p.headDim, p.blockN);
    std::optional<LdsTile> ldsQT = allocCopy(p.headDim, p.blockM);
    std::optional<LdsTile> ldsDOT = allocCopy(p.headDim, p.blockM);
    std::optional<LdsTile> ldsDS = allocCopy(p.blockM, p.blockN);
    StatsTile statsAll = allocStats(p.queryBuffers * p.blockM);
    setUpValues();
    auto queryBlock = [&](Value which) {
      const int n = p.queryBuffers;
      return QueryBlock{kb.buffer(ldsQs, n, which), kb.buffer(ldsDOs, n, which),
                        statsAll.buffer(kb, n, which), ldsQT, ldsDOT};
    };
    auto [keyBlock, kvHead] = scheduledBlock(a.seqK, p.blockN, a.headsKv, /*costliestLast=*/false);
    Value k0 = kb.mul(keyBlock, p.blockN);
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(k0, seq.seqK));
    stage(block(k, seq.rowK0, k0, kvHead, seq.seqK), ldsK, ldsKT, p.blockN);
    kb.copyGlobalToLds(block(v, seq.rowK0, k0, kvHead, seq.seqK), ldsV, p.blockN, p.headDim,
                       false, p.threads());

    const WaveTiles scoresW = p.scores(), gradsW = p.keyGrads(), dqW = p.queryGrads();
    Value lastKey = kb.add(k0, p.blockN - 1);
    attn::TileRange tiles = visibility->queryTiles(k0, lastKey, p.blockM);
    attn::TileRange whole = visibility->unmaskedQueryTiles(k0, lastKey, p.blockM);
    Value group = arith::DivUIOp::create(b, loc, arg(a.headsQ), arg(a.headsKv));
    Value head0 = kb.mul(kvHead, group);

    // One loop over (head of the group, query tile), carrying the dV and then the dK
    // accumulators, then the step's head and tile: counted on rather than divided out of the
    // step index, whose 64-bit division each step cost time and registers (bench/NOTES.md).
    Value perHead = kb.maxsi(kb.sub(tiles.hi, tiles.lo), kb.idx(0));
    Value steps = kb.mul(group, perHead);
    const int share = gradsW.perWave();
    SmallVector<Value> init(2 * share, kb.zero(kb.accType(atom)));
    init.append({head0, tiles.lo});
    // ALiBi: the step's slope, loaded a step ahead (loaded where it is used, its wait cost the
    // gfx11 kernel a spill).
    const bool alibi = op.getAlibi();
    if (alibi) init.push_back(alibiSlopeLog2(head0));
    // The step after query tile `tile` of head `head`: the next tile, or the next head's first.
    auto stepAfter = [&](Value head, Value tile) {
      Value next = kb.add(tile, 1);
      Value same = kb.cmpLt(next, tiles.hi);
      return std::pair{arith::SelectOp::create(b, loc, same, head, kb.add(head, 1)).getResult(),
                       arith::SelectOp::create(b, loc, same, next, tiles.lo).getResult()};
    };
    const bool withDq = !op.getDeterministic();
    // Double-buffered where the plan says so: the rows of Q and dO are then whole 16-byte
    // vectors (the manifest's `divisible` rules on their strides), since a fallback for
    // misaligned rows inside the pipelined loop would cost its registers there.
    auto walk = [&](int buffers) -> SmallVector<Value> {
      // Double-buffered: step 0's block copied ahead, then each step copies the next one into
      // the other buffer while it computes.
      if (buffers > 1) {
        OpBuilder::InsertionGuard gp(b);
        kb.enterIf(kb.cmpLt(kb.idx(0), steps));
        stageQueriesAsync(head0, kb.mul(tiles.lo, p.blockM), queryBlock(kb.idx(0)));
        kb.asyncCommit();
      }
      auto loop = scf::ForOp::create(b, loc, kb.idx(0), steps, kb.idx(1), init);
      OpBuilder::InsertionGuard gs(b);
      b.setInsertionPointToStart(loop.getBody());
      Value i = loop.getInductionVar();
      Value head = loop.getRegionIterArgs()[2 * share];
      Value tile = loop.getRegionIterArgs()[2 * share + 1];
      auto [nextHead, nextTile] = stepAfter(head, tile);
      Value alibiSlope, nextAlibiSlope;
      if (alibi) {
        alibiSlope = loop.getRegionIterArgs()[2 * share + 2];
        // The last step's next head may be past the heads.
        nextAlibiSlope = alibiSlopeLog2(kb.minsi(nextHead, kb.sub(arg(a.headsQ), kb.idx(1))));
      }
      Value q0 = kb.mul(tile, p.blockM);
      QueryBlock now = queryBlock(buffers > 1 ? kb.remui(i, buffers) : kb.idx(0));
      if (buffers > 1) {
        kb.asyncWait(0);
        kb.barrier(); // this step's block is in LDS; the previous step's reads are done
        OpBuilder::InsertionGuard gn(b);
        Value next = kb.add(i, 1);
        kb.enterIf(kb.cmpLt(next, steps));
        stageQueriesAsync(nextHead, kb.mul(nextTile, p.blockM),
                          queryBlock(kb.remui(next, buffers)));
        kb.asyncCommit();
      } else {
        kb.barrier(); // the previous step's reads of Q, dO, P^T, dS^T are done
        stageQueries(head, q0, now);
        kb.barrier();
      }
      Value needMask = attn::isEdgeTile(kb, tile, whole);
      std::optional<attn::Dropout> drop = dropoutOf(head);
      // S^T = K Q^T and dP^T = V dO^T; P^T and dS^T to LDS.
      AccView view(atom.c, QueryAxis::Cols);
      forWaveBlock(scoresW, [&](const WaveBlock &blk) {
        // The mask first: while it is drawn, S and dP are not yet live.
        SmallVector<Value> keep = dropoutBits(drop, view, blk, scoresW, kb.add(q0, blk.colOrigin),
                                              kb.add(k0, blk.rowOrigin), /*queriesAlongCols=*/true);
        SmallVector<Value> s = blockProduct({&ldsK}, blk.rows, {&now.q}, blk.cols, p.headDim);
        const bool dpPerVariant = !withDq && p.mainKernelDpPerVariantWithoutDq;
        auto dpProduct = [&] {
          return blockProduct({&ldsV}, blk.rows, {&now.dO}, blk.cols, p.headDim);
        };
        SmallVector<Value> dp = dpPerVariant ? SmallVector<Value>() : dpProduct();
        attn::scoreVariants(kb, needMask, cap, [&](bool masked, bool capped) {
          if (dpPerVariant) dp = dpProduct();
          for (size_t i = 0; i < blk.rows.size(); ++i)
            for (size_t j = 0; j < blk.cols.size(); ++j) {
              Value keyRow = blk.rows[i], queryCol = blk.cols[j];
              size_t at = i * blk.cols.size() + j;
              auto [prob, ds] = scoreGradient(
                  s[at], dp[at], view, kb.add(q0, blk.colOrigin), kb.add(k0, blk.rowOrigin),
                  j * scoresW.tileCols, i * scoresW.tileRows, queryCol, now.stats, alibiSlope,
                  drop, drop ? keep[at] : Value(), masked, capped);
              storeToLds(prob, view, ldsPT, queryCol, keyRow, /*transposed=*/true);
              storeToLds(ds, view, ldsDST, queryCol, keyRow, /*transposed=*/true);
              if (ldsDS) storeToLds(ds, view, *ldsDS, queryCol, keyRow, /*transposed=*/false);
            }
        });
      });
      kb.barrier();
      SmallVector<Value> acc(loop.getRegionIterArgs().take_front(2 * share));
      // dQ's adds interleaved with the dV and dK products where both products' blocks are in
      // the loop body itself (every wave busy), else issued at once.
      SpreadWork dqAdds;
      const bool spreadAdds = dqW.activeWaves() == dqW.waves && gradsW.activeWaves() == gradsW.waves;
      if (withDq) {
        // dQ += dS K for this key block, added to the f32 accumulator during dV and dK.
        AccView rows(atom.c, QueryAxis::Rows);
        auto [laneQuery, laneCol] = rows.laneOffsets(kb, lane);
        forWaveBlock(dqW, [&](const WaveBlock &blk) {
          SmallVector<Value> d =
              blockProduct(alongRows(ldsDST, ldsDS), blk.rows, alongRows(ldsK, ldsKT), blk.cols,
                           p.blockN);
          // One address for the block; each element's is a constant away. Rows past the
          // sequence add exact zeros (their Q and dO read as zero, so dS is 0 whatever their
          // statistics) to the next head's or item's rows or the workspace's padding: no add
          // is tested.
          Value firstQuery = kb.add(kb.add(q0, blk.rowOrigin), laneQuery);
          Value first = dqAccumIndex(head, firstQuery,
                                     dqAccumPosition(kb.add(blk.colOrigin, laneCol)));
          const size_t cols = blk.cols.size();
          if (pairedDqColumns()) {
            // Per row of a pair of tiles: the lane's two columns of each, side by side.
            SmallVector<attn::AccElement> els = rows.elements();
            for (size_t i = 0; i < blk.rows.size(); ++i)
              for (size_t j = 0; j < cols; j += 2)
                for (size_t e = 0; e < els.size(); e += 2) {
                  assert(els[e + 1].query == els[e].query && els[e + 1].inner == els[e].inner + 1);
                  SmallVector<Value> x;
                  for (size_t tile : {j, j + 1})
                    for (size_t f : {e, e + 1}) x.push_back(extract(d[i * cols + tile], els[f].reg));
                  const int64_t at =
                      (int64_t(i) * atom.m + els[e].query) * p.headDim + int64_t(j) * atom.n;
                  dqAdds.add([&, x, first, at] {
                    kb.atomicAddContiguous(x, arg(args.dqAccum), kb.add(first, at));
                  });
                }
          } else {
            for (size_t i = 0; i < blk.rows.size(); ++i)
              for (size_t j = 0; j < cols; ++j)
                for (const attn::AccElement &el : rows.elements()) {
                  const int64_t row = int64_t(i) * atom.m + el.query;
                  const int64_t col = int64_t(j) * atom.n + el.inner;
                  Value x = extract(d[i * cols + j], el.reg);
                  dqAdds.add([&, x, first, row, col] {
                    kb.atomicAdd(x, arg(args.dqAccum), kb.add(first, row * p.headDim + col));
                  });
                }
          }
          if (!spreadAdds) dqAdds.finish();
        });
        // Over all of dV's and dK's k-steps: each add holds its value in a register until it
        // issues, which costs ptxas a few spill bytes at head_dim 128 and measured faster than
        // spreading them over fewer (bench/NOTES.md).
        dqAdds.spreadOver(2 * (p.blockM / atom.k));
      }
      // dV += P^T dO and dK += dS^T Q over this step's queries.
      SpreadWork *spread = spreadAdds ? &dqAdds : nullptr;
      updateWaveBlock(gradsW, acc, [&](const WaveBlock &blk, ArrayRef<Value> dvdk) {
        SmallVector<Value> news =
            blockProduct({&ldsPT}, blk.rows, alongRows(now.dO, now.dOT), blk.cols, p.blockM,
                         dvdk.take_front(share), spread);
        news.append(blockProduct({&ldsDST}, blk.rows, alongRows(now.q, now.qT), blk.cols,
                                 p.blockM, dvdk.drop_front(share), spread));
        return news;
      });
      dqAdds.finish();
      acc.append({nextHead, nextTile});
      if (alibi) acc.push_back(nextAlibiSlope);
      scf::YieldOp::create(b, loc, acc);
      return SmallVector<Value>(loop.getResults().take_front(2 * share));
    };
    SmallVector<Value> accs = walk(p.queryBuffers);
    storeGradients(ArrayRef(accs).take_front(share), gradsW,
                   block(dv, seq.rowK0, k0, kvHead, seq.seqK), Value(), Value());
    storeGradients(ArrayRef(accs).drop_front(share), gradsW,
                   block(dk, seq.rowK0, k0, kvHead, seq.seqK), Value(), arg(a.scale));
  }
};

/// dq (deterministic): dQ of one query block over its visible key blocks in order.
class DqKernel : public ProductKernel {
public:
  using ProductKernel::ProductKernel;

  void emit() {
    beginLds(attnBwdDqLdsBytes(p, t));
    LdsTile ldsQ = allocTile(p.dqBlockM, p.headDim), ldsDO = allocTile(p.dqBlockM, p.headDim);
    // The key blocks' buffers, one after the other.
    LdsTile ldsKs = allocTile(p.keyBuffers * p.dqBlockN, p.headDim);
    LdsTile ldsVs = allocTile(p.keyBuffers * p.dqBlockN, p.headDim);
    LdsTile ldsDS = allocTile(p.dqBlockM, p.dqBlockN);
    std::optional<LdsTile> ldsKT = allocCopy(p.headDim, p.dqBlockN);
    StatsTile stats = allocStats(p.dqBlockM);
    setUpValues();
    auto [queryBlock, head] =
        scheduledBlock(a.seqQ, p.dqBlockM, a.headsQ, /*costliestLast=*/true);
    Value q0 = kb.mul(queryBlock, p.dqBlockM);
    Value kvHead = arith::DivUIOp::create(
        b, loc, head, arith::DivUIOp::create(b, loc, arg(a.headsQ), arg(a.headsKv)));
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(q0, seq.seqQ));
    stageQueries(head, q0, QueryBlock{ldsQ, ldsDO, stats});

    const WaveTiles scoresW = p.dqScores(), gradsW = p.dqGrads();
    Value lastQuery = kb.add(q0, p.dqBlockM - 1);
    attn::TileRange tiles = visibility->keyTiles(q0, lastQuery, p.dqBlockN);
    attn::TileRange whole = visibility->unmaskedKeyTiles(q0, lastQuery, p.dqBlockN);
    auto keyBlock = [&](const LdsTile &tiles, Value which) {
      return kb.buffer(tiles, p.keyBuffers, which);
    };
    // Key tile `tile` into buffer `which`, asynchronously (no transposed copy).
    auto stageKeysAsync = [&](Value tile, Value which) {
      assert(!ldsKT && "transposed copies are staged synchronously");
      Value n0 = kb.mul(tile, p.dqBlockN);
      for (auto [tensor, tiles] : {std::pair{&k, &ldsKs}, std::pair{&v, &ldsVs}})
        kb.copyGlobalToLdsAsync(block(*tensor, seq.rowK0, n0, kvHead, seq.seqK),
                                keyBlock(*tiles, which), p.dqBlockN, p.headDim, p.threads());
      kb.asyncCommit();
    };
    Value alibiSlope = alibiSlopeLog2(head);
    std::optional<attn::Dropout> drop = dropoutOf(head);
    SmallVector<Value> init(gradsW.perWave(), kb.zero(kb.accType(atom)));
    // Double-buffered where the plan says so (K's and V's rows are then whole 16-byte vectors,
    // as for the main kernel's Q and dO).
    auto walk = [&](int buffers) -> SmallVector<Value> {
      // Double-buffered: the first key block copied ahead, then each step copies the next one
      // into the other buffer while it computes.
      if (buffers > 1) {
        OpBuilder::InsertionGuard gp(b);
        kb.enterIf(kb.cmpLt(tiles.lo, tiles.hi));
        stageKeysAsync(tiles.lo, kb.idx(0));
      }
      auto steps = scf::ForOp::create(b, loc, tiles.lo, tiles.hi, kb.idx(1), init);
      OpBuilder::InsertionGuard gs(b);
      b.setInsertionPointToStart(steps.getBody());
      Value tile = steps.getInductionVar();
      Value n0 = kb.mul(tile, p.dqBlockN);
      Value current = buffers > 1 ? kb.remui(kb.sub(tile, tiles.lo), buffers) : kb.idx(0);
      LdsTile ldsK = keyBlock(ldsKs, current), ldsV = keyBlock(ldsVs, current);
      if (buffers > 1) {
        kb.asyncWait(0);
        kb.barrier(); // this step's keys are in LDS; the previous step's reads are done
        OpBuilder::InsertionGuard gn(b);
        Value next = kb.add(tile, 1);
        kb.enterIf(kb.cmpLt(next, tiles.hi));
        stageKeysAsync(next, kb.remui(kb.sub(next, tiles.lo), buffers));
      } else {
        kb.barrier(); // the previous step's reads of K, V, dS are done (and the staged queries)
        stage(block(k, seq.rowK0, n0, kvHead, seq.seqK), ldsK, ldsKT, p.dqBlockN);
        kb.copyGlobalToLds(block(v, seq.rowK0, n0, kvHead, seq.seqK), ldsV, p.dqBlockN,
                           p.headDim, false, p.threads());
        kb.barrier();
      }
      Value needMask = attn::isEdgeTile(kb, tile, whole);
      AccView view(atom.c, QueryAxis::Rows);
      forWaveBlock(scoresW, [&](const WaveBlock &blk) {
        SmallVector<Value> keep = dropoutBits(drop, view, blk, scoresW, kb.add(q0, blk.rowOrigin),
                                              kb.add(n0, blk.colOrigin), /*queriesAlongCols=*/false);
        SmallVector<Value> s = blockProduct({&ldsQ}, blk.rows, {&ldsK}, blk.cols, p.headDim);
        auto dpProduct = [&] {
          return blockProduct({&ldsDO}, blk.rows, {&ldsV}, blk.cols, p.headDim);
        };
        SmallVector<Value> dp = p.dqKernelDpPerVariant ? SmallVector<Value>() : dpProduct();
        auto gradient = [&](size_t i, size_t j, bool masked, bool capped) {
          Value queryRow = blk.rows[i], keyCol = blk.cols[j];
          size_t at = i * blk.cols.size() + j;
          Value ds = scoreGradient(s[at], dp[at], view, kb.add(q0, blk.rowOrigin),
                                   kb.add(n0, blk.colOrigin), i * scoresW.tileRows,
                                   j * scoresW.tileCols, queryRow, stats, alibiSlope, drop,
                                   drop ? keep[at] : Value(), masked, capped)
                         .second;
          storeToLds(ds, view, ldsDS, queryRow, keyCol, /*transposed=*/false);
        };
        attn::scoreVariants(kb, needMask, cap, [&](bool masked, bool capped) {
          if (p.dqKernelDpPerVariant) dp = dpProduct();
          for (size_t i = 0; i < blk.rows.size(); ++i)
            for (size_t j = 0; j < blk.cols.size(); ++j) gradient(i, j, masked, capped);
        });
      });
      kb.barrier();
      SmallVector<Value> acc(steps.getRegionIterArgs());
      updateWaveBlock(gradsW, acc, [&](const WaveBlock &blk, ArrayRef<Value> dqAcc) {
        return blockProduct({&ldsDS}, blk.rows, alongRows(ldsK, ldsKT), blk.cols, p.dqBlockN,
                            dqAcc);
      });
      scf::YieldOp::create(b, loc, acc);
      return SmallVector<Value>(steps.getResults());
    };
    SmallVector<Value> accs = walk(p.keyBuffers);
    // Rows counted from the sequence's start, bounded by its length: `seqQ - q0`, which staging
    // the block computed, kept live across the loop cost gfx950 SGPR spills at head_dim 256.
    storeGradients(accs, gradsW, block(dq, seq.rowQ0, kb.idx(0), head, seq.seqQ), q0,
                   arg(a.scale));
  }
};

} // namespace

FailureOr<KernelSet> generateFlashAttnBwd(tessera::FlashAttnBwdOp op, const TargetInfo &target) {
  std::optional<AttnBwdTile> tile;
  if (auto t = op.getTileAttr()) tile = AttnBwdTile{int(t.getM()), int(t.getN()), int(t.getWaves())};
  // The tiles are the narrowest multiple of 16 at least head_dim wide that the plan takes (176
  // and 208 do not share their 16-column tiles evenly among the waves: 192 and 224 do).
  const int narrowest = int(llvm::alignTo(op.getHeadDim(), 16));
  AttnBwdPlanResult plan;
  for (int width = narrowest; width <= 256 && !plan.plan; width += 16) {
    AttnBwdPlanResult tried = planAttentionBwd(width, *toElemType(op.getDtype()), target, tile);
    if (tried.plan || width == narrowest) plan = std::move(tried);
  }
  if (!plan.plan) return op.emitOpError() << plan.whyNot;
  const AttnBwdPlan &p = *plan.plan;
  const int tileWidth = p.headDim;
  attn::FlashAttnBwdSignature abi = attn::flashAttnBwdSignature(op, tileWidth, p.blockM);
  const KernelSignature &base = abi.sig;
  const std::string name = op.getSymName().str();
  auto signature = [&](const char *suffix, GridExpr grid0, ArgHandle gridHeads, int threads) {
    KernelSignature sig = base;
    sig.name = name + "_" + suffix;
    sig.grid[0] = grid0;
    sig.grid[1] = base.expr(gridHeads);
    sig.grid[2] = base.expr(abi.args.fwd.batch);
    sig.blockThreads = threads;
    return sig;
  };
  auto perBlock = [&](ArgHandle length, int rows) {
    return GridExpr::ceilDiv(base.expr(length), GridExpr::constant(rows));
  };
  const attn::FlashAttnArgs &fa = abi.args.fwd;
  OpBuilder b(op);
  KernelSet set{name, {}};
  auto make = [&](const KernelSignature &sig) {
    b.setInsertionPoint(op); // the previous kernel's emitter moved it
    gpu::GPUFuncOp func = createKernel(b, op.getLoc(), target, sig);
    // The gradients stay in registers: ptxas must not trade them for a second workgroup.
    if (target.vendor == Vendor::NVIDIA) func->setAttr("nvvm.minctasm", b.getI32IntegerAttr(1));
    set.kernels.push_back(func);
    return func;
  };
  const int preRows = PreprocessKernel::rowsPerBlock(tileWidth);
  gpu::GPUFuncOp pre = make(signature("pre", perBlock(fa.seqQ, preRows), fa.headsQ,
                                      preRows * PreprocessKernel::kThreadsPerRow));
  PreprocessKernel(op, p, target, b, pre, abi.args).emit();
  // A streamed tensor copied asynchronously has rows of whole 16-byte vectors.
  auto vectorRows = [&](KernelSignature &sig, std::initializer_list<attn::TensorArg> tensors) {
    GridExpr vector = GridExpr::constant(128 / op.getDtype().getIntOrFloatBitWidth());
    for (const attn::TensorArg &t : tensors)
      for (ArgHandle stride : {t.strideB, t.strideS, t.strideH})
        sig.divisible.push_back({sig.args[stride.index].name, vector});
  };
  KernelSignature mainSig = signature("main", perBlock(fa.seqK, p.blockN), fa.headsKv, p.threads());
  if (p.queryBuffers > 1) vectorRows(mainSig, {fa.q, abi.args.dO});
  gpu::GPUFuncOp main = make(mainSig);
  MainKernel(op, p, target, b, main, abi.args).emit();
  if (op.getDeterministic()) {
    KernelSignature dqSig = signature("dq", perBlock(fa.seqQ, p.dqBlockM), fa.headsQ, p.threads());
    if (p.keyBuffers > 1) vectorRows(dqSig, {fa.k, fa.v});
    gpu::GPUFuncOp dqFunc = make(dqSig);
    DqKernel(op, p, target, b, dqFunc, abi.args).emit();
  } else {
    gpu::GPUFuncOp convert = make(
        signature("dq_convert", perBlock(fa.seqQ, ConvertKernel::kRows), fa.headsQ, p.threads()));
    ConvertKernel(op, p, target, b, convert, abi.args).emit();
  }
  return set;
}

} // namespace tessera

// The flash_attn generator: FlashAttention-2's forward (attn::Mainloop) over one (batch, head)'s
// queries. A workgroup owns tile.m consecutive queries; K and V tiles are rows of the dense
// tensors, or of a paged cache's pages (paged_kv). The plan is FlashAttnPlan's; visibility,
// sequence lengths, softmax and the ABI are the shared Attention/ pieces.
#include "tessera/Codegen/Attention/Mainloop.h"
#include "tessera/Codegen/Attention/Signature.h"
#include "tessera/Codegen/Generators.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>

using namespace mlir;

namespace tessera {
namespace {

/// The rows of a flash_attn block: queries q0.. of one head of one (packed or dense) sequence.
class FlashAttnRows : public attn::AttnRows {
public:
  FlashAttnRows(tessera::FlashAttnOp op, const AttnPlan &p, KernelBuilder &kb,
                gpu::GPUFuncOp func, const attn::FlashAttnArgs &args)
      : op(op), p(p), kb(kb), func(func), args(args), returnLse(op.getReturnLse()) {
    const int elemBits = op.getDtype().getIntOrFloatBitWidth();
    head = kb.blockId(gpu::Dimension::y);
    batch = kb.blockId(gpu::Dimension::z);
    q0 = kb.mul(kb.blockId(gpu::Dimension::x), p.blockM);
    // GQA / MQA: query heads [g * Hq/Hkv, (g + 1) * Hq/Hkv) read KV head g.
    OpBuilder &b = kb.builder();
    Value kvHead = arith::DivUIOp::create(
        b, kb.location(), head,
        arith::DivUIOp::create(b, kb.location(), arg(args.headsQ), arg(args.headsKv)));
    seq = attn::seqInfo(kb, func, args, op.getVarlen(), batch);
    q = attn::Tensor::bind(func, args.q), k = attn::Tensor::bind(func, args.k);
    v = attn::Tensor::bind(func, args.v), o = attn::Tensor::bind(func, args.o);
    qBase = q.base(kb, seq, batch, seq.rowQ0, head);
    if (op.getPagedKv()) {
      // Pages hold the keys: a key's place comes from the block table, per tile or per row.
      kBase = kb.mul(kvHead, k.strideH), vBase = kb.mul(kvHead, v.strideH);
      pageSize = arg(args.pageSize);
      tableRow = kb.mul(batch, arg(args.blockTableStride));
    } else {
      kBase = k.base(kb, seq, batch, seq.rowK0, kvHead);
      vBase = v.base(kb, seq, batch, seq.rowK0, kvHead);
    }
    oBase = o.base(kb, seq, batch, seq.rowQ0, head);
    headDim = int(op.getHeadDim());
    d = kb.idx(headDim);
    alignedQ = q.stridesAligned16(kb, elemBits);
    alignedK = k.stridesAligned16(kb, elemBits), alignedV = v.stridesAligned16(kb, elemBits);
    visibility.emplace(attn::flashAttnVisibility(op, kb, func, args, seq.seqQ, seq.seqK));
    scaleLog2 = kb.fmul(arg(args.scale), kb.f32(M_LOG2E));
    cap = op.getSoftcap() ? arg(args.softcap) : Value();
  }

  SmallVector<Value> loadQueries(int threads) override {
    return kb.loadGlobalTile({q.ptr, kb.add(qBase, kb.mul(q0, q.strideS)), q.strideS,
                              kb.sub(seq.seqQ, q0), d, alignedQ},
                             p.blockM, p.headDim, threads);
  }
  SmallVector<Value> loadKeys(Value n0, int threads, bool inBounds) override {
    return loadKeyRows(k, kBase, alignedK, n0, threads, inBounds);
  }
  SmallVector<Value> loadValues(Value n0, int threads, bool inBounds) override {
    return loadKeyRows(v, vBase, alignedV, n0, threads, inBounds);
  }
  Value inBoundsLoads() override {
    Value aligned = kb.andb(alignedK, alignedV);
    if (!pageSize) return aligned;
    // A whole tile in one page (tiles start at multiples of blockN): one table entry a tile.
    return kb.andb(aligned, kb.cmpEq(kb.remui(pageSize, kb.idx(p.blockN)), kb.idx(0)));
  }
  Value queryOf(Value row) override { return kb.add(q0, row); }
  void storeOutput(Value row, Value col, Value value) override {
    OpBuilder &b = kb.builder();
    Value query = queryOf(row);
    Value inRange = kb.cmpLt(query, seq.seqQ);
    if (headDim < p.headDim) inRange = kb.andb(inRange, kb.cmpLt(col, d));
    auto ifInRange = scf::IfOp::create(b, kb.location(), inRange, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifInRange.thenBlock());
    Value addr = kb.add(oBase, kb.add(kb.mul(query, o.strideS), col));
    memref::StoreOp::create(b, kb.location(), kb.convert(value, op.getDtype()), o.ptr,
                            ValueRange{addr});
  }
  void storeLse(Value row, Value lse) override {
    OpBuilder &b = kb.builder();
    Value query = queryOf(row);
    auto inRange = scf::IfOp::create(b, kb.location(), kb.cmpLt(query, seq.seqQ), false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(inRange.thenBlock());
    Value at = kb.mul(head, arg(args.lseStrideH));
    at = seq.varlen ? kb.add(at, seq.rowQ0) : kb.add(at, kb.mul(batch, arg(args.lseStrideB)));
    memref::StoreOp::create(b, kb.location(), lse, arg(args.lse), ValueRange{kb.add(at, query)});
  }
  bool wantsLse() const override { return returnLse; }
  Value alibiSlopeLog2() override {
    if (!op.getAlibi()) return {};
    Value at = kb.add(kb.mul(batch, arg(args.alibiStrideB)), head);
    Value slope = memref::LoadOp::create(kb.builder(), kb.location(), arg(args.alibiSlopes),
                                         ValueRange{at});
    return kb.fmul(slope, kb.f32(M_LOG2E));
  }
  std::optional<attn::Dropout> dropout() override {
    if (!op.getDropout()) return std::nullopt;
    return attn::Dropout::load(kb, arg(args.rngState), arg(args.dropoutP))
        .forStream(kb, batch, head, arg(args.headsQ));
  }
  Value sinkLogit(Value) override {
    if (!op.getSinks()) return {};
    return memref::LoadOp::create(kb.builder(), kb.location(), arg(args.sinks), ValueRange{head});
  }

  /// The key tiles the block's queries see and those of them that need no mask, under this
  /// sequence's visibility, and the scales.
  attn::KeyWalk walk() {
    Value lastQuery = kb.add(q0, p.blockM - 1);
    return {&*visibility, visibility->keyTiles(q0, lastQuery, p.blockN),
            visibility->unmaskedKeyTiles(q0, lastQuery, p.blockN), scaleLog2, cap};
  }

  Value q0;
  attn::SeqInfo seq;

private:
  Value arg(ArgHandle h) { return argValue(func, h); }

  /// Where the sequence's key `key` starts in a paged K or V (its head's `base` added): token
  /// key % page_size of page block_table[batch][key / page_size], in 64-bit index arithmetic.
  Value pagedRowStart(const attn::Tensor &t, Value base, Value key) {
    Value page = kb.loadIndex(arg(args.blockTable), kb.add(tableRow, kb.divui(key, pageSize)));
    return kb.add(base, kb.add(kb.mul(page, t.strideB), kb.mul(kb.remui(key, pageSize), t.strideS)));
  }
  /// Rows n0.. of K or V; rows at or past the sequence's keys read as zero.
  SmallVector<Value> loadKeyRows(const attn::Tensor &t, Value base, Value aligned, Value n0,
                                 int threads, bool inBounds) {
    if (!pageSize || inBounds) {
      Value start = pageSize ? pagedRowStart(t, base, n0) : kb.add(base, kb.mul(n0, t.strideS));
      return kb.loadGlobalTile({t.ptr, start, t.strideS, kb.sub(seq.seqK, n0), d, aligned, inBounds},
                               p.blockN, p.headDim, threads);
    }
    // A tile may span pages: each row's own entry, read only for rows below the length.
    return kb.loadGlobalRows(
        t.ptr, [&](Value row) { return pagedRowStart(t, base, kb.add(n0, row)); },
        kb.sub(seq.seqK, n0), d, aligned, p.blockN, p.headDim, threads);
  }

  tessera::FlashAttnOp op;
  const AttnPlan &p;
  KernelBuilder &kb;
  gpu::GPUFuncOp func;
  const attn::FlashAttnArgs &args;
  const bool returnLse;
  int headDim = 0; // the directive's; p.headDim, the tiles', is the next multiple of 16
  Value head, batch, d, qBase, kBase, vBase, oBase, alignedQ, alignedK, alignedV, scaleLog2, cap;
  Value pageSize, tableRow; // paged_kv only
  attn::Tensor q, k, v, o;
  std::optional<attn::Visibility> visibility;
};

} // namespace

FailureOr<gpu::GPUFuncOp> generateFlashAttn(tessera::FlashAttnOp op, const TargetInfo &target) {
  // pack_gqa is a tiling choice; this kernel takes one query head per tile whatever it says
  // (the dispatcher records the fallback).
  AttnRequest request;
  // A head_dim of 8 mod 16 runs on tiles of the next multiple of 16: its loads zero the last
  // vector of each row and its stores skip it.
  request.headDim = int(llvm::alignTo(op.getHeadDim(), 16));
  request.elem = *toElemType(op.getDtype());
  request.slidingWindow = op.getSlidingWindow();
  request.softcap = op.getSoftcap();
  request.rescaleOnNewMaxOnly = target.attnLazyRescale;
  // The ALiBi bias joins the scaled scores.
  request.scaleInExp = target.attnScaleInExp && !op.getAlibi();
  request.stages = target.attnStages;
  if (auto tile = op.getTileAttr())
    request.tile = AttnRequest::Tile{int(tile.getM()), int(tile.getN()), int(tile.getWaves()),
                                     int(tile.getStages())};
  AttnPlanResult plan = planAttention(request, target);
  if (!plan.plan) return op.emitOpError() << plan.whyNot;
  const AttnPlan &p = *plan.plan;
  OpBuilder b(op);
  attn::FlashAttnSignature sig = attn::flashAttnSignature(op, p.blockM, p.waves * target.waveSize);
  gpu::GPUFuncOp func = createKernel(b, op.getLoc(), target, sig.sig);
  attn::Mainloop mainloop(p, target, b, op.getLoc(), func, op.getDtype());
  mainloop.allocate();
  b.setInsertionPoint(func.getBody().front().getTerminator());
  KernelBuilder kb(b, op.getLoc(), target);
  FlashAttnRows rows(op, p, kb, func, sig.args);
  // Varlen items shorter than this block have nothing to do (uniform).
  auto active = scf::IfOp::create(b, op.getLoc(), kb.cmpLt(rows.q0, rows.seq.seqQ), false);
  b.setInsertionPointToStart(active.thenBlock());
  mainloop.emit(rows, rows.walk());
  return func;
}

} // namespace tessera

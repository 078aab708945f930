// The paged_decode generator (docs/decode.md): the forward's mainloop (attn::Mainloop) over the
// query rows of one KV head's group and key tiles gathered from cache pages, then with split_kv a
// combine kernel.
//
// Recipe:
//   decode   a workgroup owns `rows` of the (query head of the group, query token) pairs of one
//            KV head, head-major, and one part of the key range (split-KV); K and V rows are
//            gathered through the block table, rows at or past the sequence's length zero-filled
//            without a load (and without reading their block-table entry). With one split it
//            writes o and lse; with more, its normalised f32 rows and their LSE to the workspace.
//   combine  per (head, token) row: the splits' LSEs weighted against their max (0 when every
//            split is empty), O = sum w O_s / sum w, LSE = max + ln sum w (attn::emitCombine,
//            shared with the attn_combine directive).
// And a plain kernel `<name>_cache_write` that writes new tokens' K and V rows into the cache
// format of the directive (vLLM's reshape_and_cache_flash).
#include "tessera/Codegen/Attention/Combine.h"
#include "tessera/Codegen/Attention/Mainloop.h"
#include "tessera/Codegen/Attention/Signature.h"
#include "tessera/Codegen/Generators.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <array>
#include <cmath>

using namespace mlir;

namespace tessera {
namespace {

/// What both kernels of the set read: the arguments, the batch item, and where a (head, token)
/// row of the output, the LSE and the split partials lives.
class DecodeKernel {
public:
  DecodeKernel(tessera::PagedDecodeOp op, KernelBuilder &kb, gpu::GPUFuncOp func,
               const attn::PagedDecodeArgs &args)
      : op(op), kb(kb), b(kb.builder()), loc(kb.location()), func(func), args(args),
        elem(op.getDtype()), headDim(op.getHeadDim()) {}

protected:
  Value arg(ArgHandle h) { return argValue(func, h); }
  Value one() { return kb.idx(1); }
  /// num_splits == 1 (always without split_kv): the decode kernel writes o and lse itself.
  Value singleSplit() {
    if (!args.numSplits) return arith::ConstantIntOp::create(b, loc, 1, 1);
    return kb.cmpEq(arg(args.numSplits), one());
  }
  /// Element `col` of output row (head, token) of batch item `batch`.
  Value outputAt(Value batch, Value head, Value token, Value col) {
    Value row = kb.add(kb.add(kb.mul(batch, arg(args.o.strideB)), kb.mul(token, arg(args.o.strideS))),
                       kb.mul(head, arg(args.o.strideH)));
    return kb.add(row, col);
  }
  Value lseAt(Value batch, Value head, Value token) {
    return kb.add(kb.add(kb.mul(batch, arg(args.lseStrideB)), kb.mul(head, arg(args.lseStrideH))),
                  token);
  }
  /// The flat index of (split, batch, head, token) among the workspace's rows.
  Value partialRow(Value split, Value batch, Value head, Value token) {
    Value bh = kb.add(kb.mul(kb.add(kb.mul(split, arg(args.batch)), batch), arg(args.headsQ)), head);
    return kb.add(kb.mul(bh, arg(args.seqQ)), token);
  }
  /// Where the workspace's LSEs start: after every split's output rows.
  Value partialLseBase() {
    Value rows = kb.mul(kb.mul(arg(args.numSplits), arg(args.batch)),
                        kb.mul(arg(args.headsQ), arg(args.seqQ)));
    return kb.mul(rows, headDim);
  }
  void storeFinalOutput(Value batch, Value head, Value token, Value col, Value value) {
    memref::StoreOp::create(b, loc, kb.convert(value, elem), arg(args.o.ptr),
                            ValueRange{outputAt(batch, head, token, col)});
  }
  void storeFinalLse(Value batch, Value head, Value token, Value lse) {
    if (args.lse)
      memref::StoreOp::create(b, loc, lse, arg(args.lse), ValueRange{lseAt(batch, head, token)});
  }
  /// Query head `head`'s sink logit; null without sinks.
  Value sinkOf(Value head) {
    if (!args.sinks) return {};
    return memref::LoadOp::create(b, loc, arg(args.sinks), ValueRange{head});
  }

  tessera::PagedDecodeOp op;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  gpu::GPUFuncOp func;
  const attn::PagedDecodeArgs &args;
  Type elem;
  int64_t headDim;
};

/// The decode kernel's rows: (query head, token) pairs of one KV head's group, head-major, from
/// `row0`; its keys: the sequence's cache, gathered page by page.
class DecodeRows : public DecodeKernel, public attn::AttnRows {
public:
  DecodeRows(tessera::PagedDecodeOp op, const AttnPlan &p, KernelBuilder &kb, gpu::GPUFuncOp func,
             const attn::PagedDecodeArgs &args)
      : DecodeKernel(op, kb, func, args), p(p), returnLse(op.getReturnLse()),
        splitKv(op.getSplitKv()) {
    split = kb.blockId(gpu::Dimension::x);
    batch = kb.blockId(gpu::Dimension::z);
    group = arith::DivUIOp::create(b, loc, arg(args.headsQ), arg(args.headsKv));
    groupRows = kb.mul(group, arg(args.seqQ));
    Value rowBlocks = kb.ceilDivsi(groupRows, kb.idx(p.blockM));
    Value y = kb.blockId(gpu::Dimension::y);
    kvHead = arith::DivUIOp::create(b, loc, y, rowBlocks);
    row0 = kb.mul(arith::RemUIOp::create(b, loc, y, rowBlocks), p.blockM);
    seqK = kb.loadIndex(arg(args.cacheSeqlens), batch);
    if (args.cacheLeftpad) {
      // Keys count from the sequence's first key: the masks, the bias and the splits see
      // cache_seqlens - cache_leftpad keys (none where the pad reaches the end).
      keyStart = arith::MinUIOp::create(b, loc, kb.loadIndex(arg(args.cacheLeftpad), batch), seqK);
      seqK = kb.sub(seqK, keyStart);
    }
    // fp8 caches widen exactly to the query's dtype; their per-tensor scales fold into the score
    // scale (K) and the output (V); per-token ones (keyScales) scale each key's scores (K) and
    // V's rows as they widen.
    if (args.kScale.ptr && !perToken()) {
      kScale = memref::LoadOp::create(b, loc, arg(args.kScale.ptr), ValueRange{kb.idx(0)});
      vScale = memref::LoadOp::create(b, loc, arg(args.vScale), ValueRange{kb.idx(0)});
    }
    const int elemBits = elem.getIntOrFloatBitWidth();
    alignedQ = kb.andb(aligned(args.q.strideS, elemBits), aligned(args.q.strideH, elemBits));
    alignedK = cacheAligned(args.k, op.getKvElementType().getIntOrFloatBitWidth());
    alignedV = cacheAligned(args.v, op.getKvElementType().getIntOrFloatBitWidth());
    attn::MaskSpec spec = attn::MaskSpec::of(op);
    if (spec.slidingWindow)
      visibility.emplace(spec, kb, arg(args.seqQ), seqK, arg(args.windowLeft), kb.idx(-1));
    else
      visibility.emplace(spec, kb, arg(args.seqQ), seqK);
  }

  SmallVector<Value> loadQueries(int threads) override {
    Value qBase = kb.mul(batch, arg(args.q.strideB));
    return kb.loadGlobalRows(
        arg(args.q.ptr),
        [&](Value row) {
          auto [head, token] = headAndToken(row);
          return kb.add(qBase, kb.add(kb.mul(token, arg(args.q.strideS)),
                                      kb.mul(head, arg(args.q.strideH))));
        },
        kb.sub(groupRows, row0), kb.idx(headDim), alignedQ, p.blockM, headDim, threads);
  }
  SmallVector<Value> loadKeys(Value n0, int threads, bool inBounds) override {
    assert(!inBounds && "decode loads through its block table, always checked");
    return loadCacheRows(args.k, alignedK, n0, threads);
  }
  SmallVector<Value> loadValues(Value n0, int threads, bool inBounds) override {
    assert(!inBounds && "decode loads through its block table, always checked");
    return loadCacheRows(args.v, alignedV, n0, threads);
  }
  void copyKeysAsync(Value n0, const LdsTile &dst, int threads) override {
    kb.copyGlobalRowsToLdsAsync(arg(args.k.ptr), cacheRowStart(args.k, n0), kb.sub(seqK, n0), dst,
                                p.stepKeys(), headDim, threads);
  }
  void copyValuesAsync(Value n0, const LdsTile &dst, int threads) override {
    kb.copyGlobalRowsToLdsAsync(arg(args.v.ptr), cacheRowStart(args.v, n0), kb.sub(seqK, n0), dst,
                                p.stepKeys(), headDim, threads);
  }
  Value queryOf(Value row) override {
    return arith::RemUIOp::create(b, loc, kb.add(row0, row), arg(args.seqQ));
  }
  void storeOutput(Value row, Value col, Value value) override {
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(kb.add(row0, row), groupRows));
    if (vScale) value = kb.fmul(value, vScale);
    auto [head, token] = headAndToken(row);
    auto single = scf::IfOp::create(b, loc, singleSplit(), /*withElse=*/splitKv);
    b.setInsertionPointToStart(single.thenBlock());
    storeFinalOutput(batch, head, token, col, value);
    if (!splitKv) return;
    b.setInsertionPointToStart(single.elseBlock());
    Value at = kb.add(kb.mul(partialRow(split, batch, head, token), headDim), col);
    memref::StoreOp::create(b, loc, value, arg(args.partials), ValueRange{at});
  }
  void storeLse(Value row, Value lse) override {
    OpBuilder::InsertionGuard g(b);
    kb.enterIf(kb.cmpLt(kb.add(row0, row), groupRows));
    auto [head, token] = headAndToken(row);
    auto single = scf::IfOp::create(b, loc, singleSplit(), /*withElse=*/splitKv);
    b.setInsertionPointToStart(single.thenBlock());
    storeFinalLse(batch, head, token, lse);
    if (!splitKv) return;
    b.setInsertionPointToStart(single.elseBlock());
    Value at = kb.add(partialLseBase(), partialRow(split, batch, head, token));
    memref::StoreOp::create(b, loc, lse, arg(args.partials), ValueRange{at});
  }
  // The combine needs every split's LSE.
  bool wantsLse() const override { return returnLse || splitKv; }
  // Split over several workgroups, the sink joins once, in the combine (-inf here: none).
  Value sinkLogit(Value row) override {
    Value sink = sinkOf(loadedHeadOf(row));
    if (!sink || !splitKv) return sink;
    return kb.select(singleSplit(), sink, kb.f32(-INFINITY));
  }
  bool alibiPerRow() const override { return bool(args.alibiSlopes); }
  Value alibiRowSlopeLog2(Value row) override {
    Value at = kb.add(kb.mul(batch, arg(args.alibiStrideB)), loadedHeadOf(row));
    Value slope = memref::LoadOp::create(b, loc, arg(args.alibiSlopes), ValueRange{at});
    return kb.fmul(slope, kb.f32(M_LOG2E));
  }
  bool hasKeyScales() const override { return perToken(); }
  KeyScaleSlot keyScaleSlot(Value n0, Value row) override {
    // Rows past the length point at the last key's slot (no other block-table entry).
    Value rowsLeft = kb.sub(seqK, n0);
    Value at = arith::MinUIOp::create(b, loc, row, kb.sub(rowsLeft, one()));
    return {arg(args.kScale.ptr), arg(args.vScale), cacheRowStart(args.kScale, n0)(at),
            kb.cmpLt(row, rowsLeft)};
  }

  /// This split's part of the key tiles the tokens see, those that need no mask, the scales.
  attn::KeyWalk walk() {
    Value lastToken = kb.sub(arg(args.seqQ), one());
    attn::TileRange all = visibility->keyTiles(kb.idx(0), lastToken, p.stepKeys());
    attn::TileRange tiles =
        args.numSplits ? attn::splitTiles(kb, all, split, arg(args.numSplits)) : all;
    Value scale = kb.fmul(arg(args.scale), kb.f32(M_LOG2E));
    if (kScale) scale = kb.fmul(scale, kScale);
    return {&*visibility, tiles, visibility->unmaskedKeyTiles(kb.idx(0), lastToken, p.stepKeys()),
            scale,
            op.getSoftcap() ? arg(args.softcap) : Value()};
  }

private:
  bool perToken() const { return bool(args.kScale.strideToken); }
  /// The query head whose per-head values (sink, ALiBi slope) block row `row` reads: rows past
  /// the group's read its last row's head (their results are not stored).
  Value loadedHeadOf(Value row) {
    Value last = kb.sub(kb.sub(groupRows, row0), one());
    return headAndToken(kb.minsi(row, last)).first;
  }
  /// Query head and token of block row `row` (head-major).
  std::pair<Value, Value> headAndToken(Value row) {
    Value r = kb.add(row0, row);
    Value local = arith::DivUIOp::create(b, loc, r, arg(args.seqQ));
    return {kb.add(kb.mul(kvHead, group), local), queryOf(row)};
  }
  Value aligned(ArgHandle stride, int elemBits) {
    return kb.cmpEq(kb.remui(arg(stride), 128 / elemBits), kb.idx(0));
  }
  Value cacheAligned(const attn::CacheArg &c, int elemBits) {
    return kb.andb(kb.andb(aligned(c.stridePage, elemBits), aligned(c.strideToken, elemBits)),
                   aligned(c.strideHead, elemBits));
  }
  /// Where key row j of the tile from n0 starts: with key = first key + n0 + j, token
  /// key % block_size of page block_table[batch][key / block_size] (called only for tiles below
  /// the length, and only entries of keys below it are read).
  std::function<Value(Value)> cacheRowStart(const attn::CacheArg &c, Value n0) {
    const int64_t blockSize = op.getBlockSize();
    auto slot = [this, &c](Value page, Value token) {
      // A 64-bit page offset: page ids past 65535 and offsets past 2^32 address right.
      return kb.add(kb.add(kb.mul(page, arg(c.stridePage)), kb.mul(token, arg(c.strideToken))),
                    kb.mul(kvHead, arg(c.strideHead)));
    };
    Value tableRow = kb.mul(batch, arg(args.blockTableStride));
    if (blockSize >= p.stepKeys() && keyStart) {
      // A tile from an unaligned first key spans at most two pages: the first key's and the
      // last used key's, each looked up once.
      Value first = kb.add(keyStart, n0);
      Value used = arith::MinUIOp::create(b, loc, kb.idx(p.stepKeys()), kb.sub(seqK, n0));
      Value firstEntry = kb.divui(first, blockSize);
      Value lastEntry = kb.divui(kb.sub(kb.add(first, used), one()), blockSize);
      Value firstPage = kb.loadIndex(arg(args.blockTable), kb.add(tableRow, firstEntry));
      Value lastPage = kb.loadIndex(arg(args.blockTable), kb.add(tableRow, lastEntry));
      Value pageEnd = kb.mul(kb.add(firstEntry, one()), blockSize);
      return [this, slot, first, firstPage, lastPage, pageEnd, blockSize](Value row) {
        Value key = kb.add(first, row);
        return slot(kb.select(kb.cmpLt(key, pageEnd), firstPage, lastPage),
                    kb.remui(key, blockSize));
      };
    }
    if (blockSize >= p.stepKeys()) {
      // Tiles start at multiples of stepKeys: the whole tile lies in one page, looked up once
      // (n0 is below the length: an entry the sequence uses).
      Value page = kb.loadIndex(arg(args.blockTable), kb.add(tableRow, kb.divui(n0, blockSize)));
      Value base = slot(page, kb.remui(n0, blockSize));
      return [this, &c, base](Value row) { return kb.add(base, kb.mul(row, arg(c.strideToken))); };
    }
    Value first = keyStart ? kb.add(keyStart, n0) : n0;
    return [this, slot, tableRow, first, blockSize](Value row) {
      Value key = kb.add(first, row);
      Value page = kb.loadIndex(arg(args.blockTable), kb.add(tableRow, kb.divui(key, blockSize)));
      return slot(page, kb.remui(key, blockSize));
    };
  }
  /// Key rows n0.. of the sequence through registers; rows at or past its length read as zero.
  SmallVector<Value> loadCacheRows(const attn::CacheArg &c, Value vectorOk, Value n0, int threads) {
    return kb.loadGlobalRows(arg(c.ptr), cacheRowStart(c, n0), kb.sub(seqK, n0),
                             kb.idx(headDim), vectorOk, p.stepKeys(), headDim, threads);
  }

  const AttnPlan &p;
  const bool returnLse, splitKv;
  Value split, batch, group, groupRows, kvHead, row0, seqK, alignedQ, alignedK, alignedV;
  Value keyStart; // cache_leftpad only: the sequence's first key
  Value kScale, vScale; // fp8 caches only
  std::optional<attn::Visibility> visibility;
};

/// combine: one workgroup per (head, token) row of a batch item merges its splits' partials
/// (attn::emitCombine) from the workspace.
class CombineKernel : public DecodeKernel {
public:
  using DecodeKernel::DecodeKernel;

  void emit() {
    Value batch = kb.blockId(gpu::Dimension::y), row = kb.blockId(gpu::Dimension::x);
    Value head = arith::DivUIOp::create(b, loc, row, arg(args.seqQ));
    Value token = arith::RemUIOp::create(b, loc, row, arg(args.seqQ));
    Value lseBase = partialLseBase();
    attn::CombineRow r;
    r.partials = r.lsePartials = arg(args.partials);
    r.numSplits = arg(args.numSplits);
    r.sink = sinkOf(head);
    r.partialRow = [=, this](Value s) { return kb.mul(partialRow(s, batch, head, token), headDim); };
    r.lseAt = [=, this](Value s) { return kb.add(lseBase, partialRow(s, batch, head, token)); };
    r.storeOutput = [=, this](Value col, Value value) {
      storeFinalOutput(batch, head, token, col, value);
    };
    if (args.lse)
      r.storeLse = [=, this](Value lse) { storeFinalLse(batch, head, token, lse); };
    attn::emitCombine(kb, func, headDim, r);
  }
};

/// cache_write: one workgroup per new token; slot_mapping[t] = page * block_size + offset names
/// its slot, a negative one (padding) writes nothing. Every thread copies 16-byte vectors of the
/// token's Hkv x D row (element by element where a stride breaks their alignment). With per-token
/// fp8 scales a group of lanes holds each head's row: their absolute maximum (NaN ignored) over
/// the format's largest value is the slot's scale (1 for an all-zero row), written beside it.
class CacheWriteKernel {
public:
  static constexpr int kThreads = 128;

  CacheWriteKernel(tessera::PagedDecodeOp op, KernelBuilder &kb, const TargetInfo &target)
      : op(op), kb(kb), b(kb.builder()), loc(kb.location()), waveSize(target.waveSize) {}

  /// Appends the kernel's arguments to `sig` (docs/decode.md, the cache writer).
  void declare(KernelSignature &sig) {
    MLIRContext *ctx = op.getContext();
    auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
    Type index = IndexType::get(ctx);
    const std::array<std::string, 2> rows{"key", "value"}, caches{"k", "v"};
    for (int i = 0; i < 2; ++i)
      src[i] = sig.add(rows[i], ptr(op.getDtype()), ArgRole::Input);
    for (int i = 0; i < 2; ++i)
      cache[i] = sig.add(caches[i] + "_cache", ptr(op.getKvElementType()), ArgRole::InOut);
    slots = sig.add("slot_mapping", ptr(IntegerType::get(ctx, 64)), ArgRole::Input);
    if (quantizes()) {
      // Per-token scales are the writer's outputs.
      ArgRole role = perToken() ? ArgRole::InOut : ArgRole::Input;
      scale[0] = sig.add("k_scale", ptr(Float32Type::get(ctx)), role);
      scale[1] = sig.add("v_scale", ptr(Float32Type::get(ctx)), role);
    }
    tokens = sig.add("num_tokens", index, ArgRole::Size);
    heads = sig.add("Hkv", index, ArgRole::Size);
    const std::array<std::string, 2> rowAxes{"t", "h"};
    const std::array<std::string, 3> cacheAxes{"page", "token", "head"};
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        srcStride[i][j] = sig.add(rows[i] + "_stride_" + rowAxes[j], index, ArgRole::Stride);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        cacheStride[i][j] = sig.add(caches[i] + "_stride_" + cacheAxes[j], index, ArgRole::Stride);
    if (perToken())
      for (int j = 0; j < 3; ++j)
        scaleStride[j] = sig.add("kv_scale_stride_" + cacheAxes[j], index, ArgRole::Stride);
  }

  /// The number of new tokens: the grid.
  ArgHandle tokenCount() const { return tokens; }

  /// Emits the body into `kernel`, made from the declared signature.
  void emit(gpu::GPUFuncOp kernel) {
    func = kernel;
    const int64_t headDim = op.getHeadDim(), blockSize = op.getBlockSize();
    const int vec = 128 / op.getDtype().getIntOrFloatBitWidth();
    Value token = kb.blockId(gpu::Dimension::x);
    Value slot = kb.loadIndex(arg(slots), token);
    OpBuilder::InsertionGuard g(b);
    auto valid = scf::IfOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, slot, kb.idx(0)),
        /*withElseRegion=*/false);
    b.setInsertionPointToStart(valid.thenBlock());
    Value page = kb.divui(slot, blockSize), offset = kb.remui(slot, blockSize);
    // Whether K's and V's strides keep every row's vectors 16-byte aligned: decided once.
    std::array<Value, 2> vectorOk;
    for (int i = 0; i < 2; ++i) {
      SmallVector<Value> strides;
      for (ArgHandle s : llvm::concat<const ArgHandle>(srcStride[i], cacheStride[i]))
        strides.push_back(arg(s));
      vectorOk[i] = kb.allMultiplesOf(strides, vec);
    }
    if (perToken()) return emitPerToken(token, page, offset, vectorOk, vec);
    std::array<Value, 2> scales;
    if (quantizes())
      for (int i = 0; i < 2; ++i)
        scales[i] = memref::LoadOp::create(b, loc, arg(scale[i]), ValueRange{kb.idx(0)});
    Value vectors = kb.mul(arg(heads), headDim / vec);
    auto loop = scf::ForOp::create(b, loc, kb.threadId(), vectors, kb.idx(kThreads));
    b.setInsertionPointToStart(loop.getBody());
    Value e = loop.getInductionVar();
    Value head = kb.divui(e, headDim / vec), col = kb.mul(kb.remui(e, headDim / vec), vec);
    for (int i = 0; i < 2; ++i) {
      Value from = kb.add(rowAt(i, token, head), col);
      Value to = kb.add(cacheAt(cacheStride[i], page, offset, head), col);
      copy(arg(src[i]), from, arg(cache[i]), to, vectorOk[i], vec, scales[i]);
    }
  }

private:
  Value arg(ArgHandle h) { return argValue(func, h); }
  bool perToken() { return op.getKvScale() == tessera::KVScale::PerToken; }
  /// Where head `head` of new token `token`'s key (i = 0) or value (1) row starts.
  Value rowAt(int i, Value token, Value head) {
    return kb.add(kb.mul(token, arg(srcStride[i][0])), kb.mul(head, arg(srcStride[i][1])));
  }
  /// Where head `head` of slot (page, offset) starts in a cache or the per-token scales.
  Value cacheAt(ArrayRef<ArgHandle> strides, Value page, Value offset, Value head) {
    return kb.add(kb.add(kb.mul(page, arg(strides[0])), kb.mul(offset, arg(strides[1]))),
                  kb.mul(head, arg(strides[2])));
  }

  /// The per-token body: groups of `group` lanes (a power of two, at most a wave) take the
  /// token's heads, each lane `vec` elements of its head's row.
  void emitPerToken(Value token, Value page, Value offset, ArrayRef<Value> vectorOk, int vec) {
    const int64_t headDim = op.getHeadDim();
    const int group = int(llvm::PowerOf2Ceil(headDim / vec));
    const int rowsPerPass = kThreads / group;
    Type f32 = b.getF32Type();
    Type cacheElem = op.getKvElementType();
    const double largest =
        llvm::APFloat::getLargest(cast<FloatType>(cacheElem).getFloatSemantics()).convertToDouble();
    Value tid = kb.threadId();
    Value member = kb.remui(tid, group), col = kb.mul(member, vec);
    // Uniform trip count: every lane reaches the shuffles.
    auto loop = scf::ForOp::create(b, loc, kb.idx(0), arg(heads), kb.idx(rowsPerPass));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value head = kb.add(loop.getInductionVar(), kb.divui(tid, group));
    Value active = kb.andb(kb.cmpLt(head, arg(heads)), kb.cmpLt(col, kb.idx(headDim)));
    auto type = VectorType::get({vec}, op.getDtype());
    for (int i = 0; i < 2; ++i) {
      Value from = kb.add(rowAt(i, token, head), col);
      // The lane's elements (zeros where inactive), then the row's absolute maximum.
      auto load = scf::IfOp::create(b, loc, TypeRange{type}, active, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard gl(b);
        b.setInsertionPointToStart(load.thenBlock());
        Value x = kb.loadVector(type, arg(src[i]), from, vectorOk[i]);
        scf::YieldOp::create(b, loc, x);
        b.setInsertionPointToStart(load.elseBlock());
        scf::YieldOp::create(b, loc, kb.zero(type));
      }
      Value x = load.getResult(0);
      Value wide = arith::ExtFOp::create(b, loc, type.clone(f32), x);
      // |x| as max(x, -x): math.absf becomes a libdevice call on NVIDIA, which is not linked.
      Value magnitude = arith::MaxNumFOp::create(b, loc, wide, arith::NegFOp::create(b, loc, wide));
      Value amax = vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXNUMF, magnitude);
      for (int mask = 1; mask < group; mask *= 2) {
        Value other = gpu::ShuffleOp::create(b, loc, amax, mask, waveSize,
                                             gpu::ShuffleMode::XOR)
                          .getShuffleResult();
        amax = arith::MaxNumFOp::create(b, loc, amax, other);
      }
      Value zeroRow = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, amax, kb.f32(0));
      Value rowScale = kb.select(zeroRow, kb.f32(1), arith::DivFOp::create(b, loc, amax,
                                                                            kb.f32(largest)));
      OpBuilder::InsertionGuard gs(b);
      kb.enterIf(active);
      Value to = kb.add(cacheAt(cacheStride[i], page, offset, head), col);
      kb.storeVector(toCache(x, cacheElem, rowScale), arg(cache[i]), to, vectorOk[i]);
      kb.enterIf(kb.cmpEq(member, kb.idx(0)));
      memref::StoreOp::create(b, loc, rowScale, arg(scale[i]),
                              ValueRange{cacheAt(scaleStride, page, offset, head)});
    }
  }
  /// An fp8 cache: the writer quantises.
  bool quantizes() { return op.getKvElementType() != op.getDtype(); }
  /// `x` in the cache's format: as is, or for fp8 x / scale rounded to nearest even, saturated at
  /// the format's largest finite value (vLLM's scaled_convert; NaN stays NaN).
  Value toCache(Value x, Type cacheElem, Value scale) {
    if (!scale) return x;
    Type f32 = b.getF32Type();
    auto shaped = [&](Type elem) -> Type {
      if (auto v = dyn_cast<VectorType>(x.getType())) return v.clone(elem);
      return elem;
    };
    auto splat = [&](Value scalar) -> Value {
      if (auto v = dyn_cast<VectorType>(x.getType()))
        return vector::BroadcastOp::create(b, loc, v.clone(f32), scalar);
      return scalar;
    };
    const double largest =
        llvm::APFloat::getLargest(cast<FloatType>(cacheElem).getFloatSemantics()).convertToDouble();
    Value y = arith::DivFOp::create(b, loc, arith::ExtFOp::create(b, loc, shaped(f32), x),
                                    splat(scale));
    y = arith::MinimumFOp::create(b, loc, y, splat(kb.f32(largest)));
    y = arith::MaximumFOp::create(b, loc, y, splat(kb.f32(-largest)));
    return arith::TruncFOp::create(b, loc, shaped(cacheElem), y);
  }
  /// `vec` elements from src[from] to dst[to] (in dst's format): one vector where `vectorOk`,
  /// else one by one.
  void copy(Value src, Value from, Value dst, Value to, Value vectorOk, int vec, Value scale) {
    auto type = VectorType::get({vec}, cast<MemRefType>(src.getType()).getElementType());
    Type cacheElem = cast<MemRefType>(dst.getType()).getElementType();
    kb.storeVector(toCache(kb.loadVector(type, src, from, vectorOk), cacheElem, scale), dst, to,
                   vectorOk);
  }

  tessera::PagedDecodeOp op;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  const int waveSize;
  gpu::GPUFuncOp func;
  std::array<ArgHandle, 2> src, cache, scale; // key, value; k_cache, v_cache; k/v_scale (fp8)
  std::array<std::array<ArgHandle, 2>, 2> srcStride;     // token, head
  std::array<std::array<ArgHandle, 3>, 2> cacheStride;   // page, token, head
  std::array<ArgHandle, 3> scaleStride;   // both per-token scales: page, token, head
  ArgHandle slots, tokens, heads;
};

/// LDS bytes of a decode plan: its tiles (a narrower cache's staged) and the per-key scales.
int decodeLdsBytes(const AttnPlan &p, tessera::PagedDecodeOp op, const TargetInfo &target) {
  std::optional<ElemType> cache = toElemType(op.getKvElementType());
  if (cache == p.elem) cache.reset();
  int bytes = attnLdsBytes(p, target, cache);
  if (op.getKvScale() == tessera::KVScale::PerToken)
    bytes += ldsTileBytes(target, ElemType::F32, attnKeyScaleRows(p), p.stepKeys());
  return bytes;
}

/// The decode plan: the forward's planner with two waves of the target's atom tiles of queries
/// before four (a KV head's group rarely has more rows). Where the target copies asynchronously
/// (mma.sync), K and V are double-buffered in LDS, the next tile copied during each step (the
/// most keys per step LDS allows; three or four buffers, more tiles in flight, measured no faster
/// on the H200, bench/NOTES.md); fp8 products transpose V^T from its buffer each step
/// (AttnPlan::transposesStagedV). Elsewhere at most as many keys per step as
/// keep a thread's share of the K and V tiles to 8 vectors in registers (few threads load them).
AttnPlanResult planDecode(tessera::PagedDecodeOp op, const TargetInfo &target) {
  AttnRequest request;
  request.headDim = int(op.getHeadDim());
  request.elem = *toElemType(op.getDtype());
  request.slidingWindow = op.getSlidingWindow();
  request.softcap = op.getSoftcap();
  request.rescaleOnNewMaxOnly = true;
  // The ALiBi bias joins the scaled scores.
  request.scaleInExp = target.attnScaleInExp && !op.getAlibi();
  // An fp8 cache with bf16 queries: the products on f16, where K and V widen exactly in one
  // conversion (to bf16 it takes four on NVIDIA): the queries scaled per row into f16's range
  // (Mainloop), P rounded to f16 (three more bits). Per-token scales multiply V before its
  // product, which f16's range could not always hold: P V stays bf16 there.
  if (op.getFp8Products()) {
    // The products on the cache's own fp8: the queries scaled per row into its range and
    // rounded (Mainloop), P stretched to it (AttnPlan::pStretch).
    request.qkElem = request.pvElem = *toElemType(op.getKvElementType());
  } else if (op.getKvElementType().getIntOrFloatBitWidth() < 16 &&
             request.elem == ElemType::BF16) {
    request.qkElem = ElemType::F16;
    if (op.getKvScale() == tessera::KVScale::PerTensor) request.pvElem = ElemType::F16;
  }
  if (auto tile = op.getTileAttr()) {
    request.tile = AttnRequest::Tile{int(tile.getM()), int(tile.getN()), int(tile.getWaves()),
                                     int(tile.getStages())};
    return planAttention(request, target);
  }
  // Register staging holds the tiles in the products' type: count those bytes.
  const int stagedBytes = elemTypeBits(request.qkElem.value_or(request.elem)) / 8;
  AttnPlanResult first;
  for (int waves : {2, 4}) {
    request.waves = {waves};
    if (target.hasAsyncCopy)
      for (int keys : {64, 32, 16}) {
        request.maxKeysPerStep = keys;
        request.splitKeysAcrossWaves = true;
        request.kvBuffers = 2;
        AttnPlanResult r = planAttention(request, target);
        if (!r.plan || r.plan->transposed || r.plan->pv->kind != AtomKind::MMASync) break;
        if (decodeLdsBytes(*r.plan, op, target) <= target.ldsBytes) return r;
      }
    request.kvBuffers = 1;
    const int threads = waves * target.waveSize;
    int stepKeys = 0;
    for (int keys : {64, 32, 16})
      if (2 * keys * request.headDim * stagedBytes / 16 <= 8 * threads) {
        stepKeys = keys;
        break;
      }
    if (!stepKeys) continue;
    // The waves split the step's keys where each wave's V can be cut out of the step's tile: V
    // staged as stored (transposing loads), or V^T cut by columns (row padding); else the
    // queries (a KV head's group rarely fills two waves' rows).
    {
      request.splitKeysAcrossWaves = true;
      request.maxKeysPerStep = stepKeys / waves;
      AttnPlanResult r = planAttention(request, target);
      if (r.plan && r.plan->stepKeys() == stepKeys &&
          (target.ldsSwizzle == LdsSwizzle::Pad || r.plan->vNatural()))
        return r;
    }
    request.splitKeysAcrossWaves = false;
    request.maxKeysPerStep = stepKeys;
    AttnPlanResult r = planAttention(request, target);
    if (r.plan) return r;
    if (first.whyNot.empty()) first = r;
  }
  return first;
}

} // namespace

FailureOr<KernelSet> generatePagedDecode(tessera::PagedDecodeOp op, const TargetInfo &target) {
  if (op.getFp8Products())
    if (AtomChoice fp8 = chooseAtoms(target, *toElemType(op.getKvElementType())); !fp8)
      return op.emitOpError() << "'fp8_products' needs matrix instructions that read the fp8 cache ("
                              << fp8.failure << "); without it the cache is dequantised to "
                              << op.getDtype() << " for the products";
  AttnPlanResult plan = planDecode(op, target);
  if (!plan.plan) return op.emitOpError() << plan.whyNot;
  const AttnPlan &p = *plan.plan;
  attn::PagedDecodeSignature abi = attn::pagedDecodeSignature(op);
  const attn::PagedDecodeArgs &a = abi.args;
  const KernelSignature &base = abi.sig;
  const std::string name = op.getSymName().str();
  OpBuilder b(op);
  KernelSet set{name, {}};

  KernelSignature decodeSig = base;
  decodeSig.name = name + "_decode";
  decodeSig.grid[0] = a.numSplits ? base.expr(a.numSplits) : GridExpr::constant(1);
  // KV heads x row blocks of the group's (Hq / Hkv) * Sq rows.
  decodeSig.grid[1] = GridExpr::mul(
      base.expr(a.headsKv),
      GridExpr::ceilDiv(GridExpr::mul(GridExpr::floorDiv(base.expr(a.headsQ), base.expr(a.headsKv)),
                                      base.expr(a.seqQ)),
                        GridExpr::constant(p.blockM)));
  decodeSig.grid[2] = base.expr(a.batch);
  decodeSig.blockThreads = p.waves * target.waveSize;
  // Query head h reads KV head h / (Hq / Hkv): Hq must be a multiple of Hkv.
  decodeSig.divisible.push_back({base.args[a.headsQ.index].name, base.expr(a.headsKv)});
  // Asynchronous copies move whole 16-byte rows: the caches' strides must keep them aligned.
  if (p.kvBuffers > 1) {
    GridExpr vector = GridExpr::constant(128 / op.getKvElementType().getIntOrFloatBitWidth());
    for (const attn::CacheArg &c : {a.k, a.v})
      for (ArgHandle stride : {c.stridePage, c.strideToken, c.strideHead})
        decodeSig.divisible.push_back({base.args[stride.index].name, vector});
  }
  gpu::GPUFuncOp decode = createKernel(b, op.getLoc(), target, decodeSig);
  set.kernels.push_back(decode);
  {
    attn::Mainloop mainloop(p, target, b, op.getLoc(), decode, op.getDtype(),
                            op.getKvElementType(), op.getKvScale() == tessera::KVScale::PerToken);
    mainloop.allocate();
    b.setInsertionPoint(decode.getBody().front().getTerminator());
    KernelBuilder kb(b, op.getLoc(), target);
    DecodeRows rows(op, p, kb, decode, a);
    mainloop.emit(rows, rows.walk());
  }
  if (op.getSplitKv()) {
    b.setInsertionPoint(op);
    KernelSignature combineSig = base;
    combineSig.name = name + "_combine";
    combineSig.grid[0] = GridExpr::mul(base.expr(a.headsQ), base.expr(a.seqQ));
    combineSig.grid[1] = base.expr(a.batch);
    // Nothing to combine with one split: min(num_splits / 2, 1) workgroups deep.
    combineSig.grid[2] = GridExpr::min(
        GridExpr::floorDiv(base.expr(a.numSplits), GridExpr::constant(2)), GridExpr::constant(1));
    combineSig.blockThreads = attn::kCombineWaves * target.waveSize;
    gpu::GPUFuncOp combine = createKernel(b, op.getLoc(), target, combineSig);
    set.kernels.push_back(combine);
    b.setInsertionPoint(combine.getBody().front().getTerminator());
    KernelBuilder kb(b, op.getLoc(), target);
    CombineKernel(op, kb, combine, a).emit();
  }
  // The cache writer, a plain kernel of its own.
  b.setInsertionPoint(op);
  KernelSignature writeSig;
  writeSig.name = name + "_cache_write";
  writeSig.directive = base.directive;
  writeSig.directiveAttrs = base.directiveAttrs;
  KernelBuilder writeKb(b, op.getLoc(), target);
  CacheWriteKernel writer(op, writeKb, target);
  writer.declare(writeSig);
  writeSig.grid[0] = writeSig.expr(writer.tokenCount());
  writeSig.grid[1] = GridExpr::constant(1);
  writeSig.grid[2] = GridExpr::constant(1);
  writeSig.blockThreads = CacheWriteKernel::kThreads;
  gpu::GPUFuncOp write = createKernel(b, op.getLoc(), target, writeSig);
  b.setInsertionPoint(write.getBody().front().getTerminator());
  writer.emit(write);
  return set;
}

} // namespace tessera

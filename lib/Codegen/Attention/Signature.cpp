// The flash_attn kernel ABI as typed handles (Attention/Signature.h).
#include "tessera/Codegen/Attention/Signature.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <optional>

using namespace mlir;

namespace tessera::attn {

Value Tensor::base(KernelBuilder &kb, const SeqInfo &seq, Value batch, Value row0,
                   Value head) const {
  Value bTerm = seq.varlen ? kb.idx(0) : kb.mul(batch, strideB);
  Value rowTerm = kb.mul(row0, strideS);
  return kb.add(kb.add(bTerm, rowTerm), kb.mul(head, strideH));
}

Value Tensor::stridesAligned16(KernelBuilder &kb, int elemBits) const {
  return kb.allMultiplesOf({strideB, strideS, strideH}, 128 / elemBits);
}

namespace {

/// What the attention ABIs share, in their order: the tensors (pointers), the LSE, cu_seqlens,
/// sizes, every tensor's strides, the LSE strides, scale, window and softcap.
struct AbiSpec {
  Type elem;
  std::vector<std::pair<std::string, ArgRole>> tensors;
  std::optional<ArgRole> lse; ///< the LSE's role, when the kernel takes one
  bool varlen = false, slidingWindow = false, softcap = false, sinks = false, alibi = false,
       chunk = false, pagedKv = false, dropout = false, seqused = false;
};

std::vector<TensorArg> addAttentionArgs(KernelSignature &sig, const AbiSpec &spec,
                                        FlashAttnArgs &a) {
  MLIRContext *ctx = spec.elem.getContext();
  auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type index = IndexType::get(ctx), f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32);
  std::vector<TensorArg> tensors(spec.tensors.size());
  for (auto [t, named] : llvm::zip(tensors, spec.tensors))
    t.ptr = sig.add(named.first, ptr(spec.elem), named.second);
  if (spec.lse) a.lse = sig.add("lse", ptr(f32), *spec.lse);
  if (spec.varlen) {
    a.cuSeqlensQ = sig.add("cu_seqlens_q", ptr(i32), ArgRole::Input);
    a.cuSeqlensK = sig.add("cu_seqlens_k", ptr(i32), ArgRole::Input);
  }
  if (spec.seqused) {
    a.seqUsedQ = sig.add("seqused_q", ptr(i32), ArgRole::Input);
    a.seqUsedK = sig.add("seqused_k", ptr(i32), ArgRole::Input);
  }
  if (spec.sinks) a.sinks = sig.add("sinks", ptr(f32), ArgRole::Input);
  if (spec.alibi) a.alibiSlopes = sig.add("alibi_slopes", ptr(f32), ArgRole::Input);
  if (spec.pagedKv) a.blockTable = sig.add("block_table", ptr(i32), ArgRole::Input);
  if (spec.dropout) a.rngState = sig.add("rng_state", ptr(i32), ArgRole::Input);
  a.batch = sig.add("B", index, ArgRole::Size);
  a.seqQ = sig.add("Sq", index, ArgRole::Size);
  a.seqK = sig.add("Sk", index, ArgRole::Size);
  a.headsQ = sig.add("Hq", index, ArgRole::Size);
  a.headsKv = sig.add("Hkv", index, ArgRole::Size);
  // The packed tensors' row counts: TMA maps of the sm_90a kernel span them.
  if (spec.varlen) {
    a.totalQ = sig.add("total_q", index, ArgRole::Size);
    a.totalK = sig.add("total_k", index, ArgRole::Size);
  }
  for (auto [t, named] : llvm::zip(tensors, spec.tensors)) {
    const std::string &n = named.first;
    t.strideB = sig.add(n + "_stride_b", index, ArgRole::Stride);
    t.strideS = sig.add(n + "_stride_s", index, ArgRole::Stride);
    t.strideH = sig.add(n + "_stride_h", index, ArgRole::Stride);
  }
  if (spec.lse) {
    a.lseStrideB = sig.add("lse_stride_b", index, ArgRole::Stride);
    a.lseStrideH = sig.add("lse_stride_h", index, ArgRole::Stride);
  }
  if (spec.alibi) a.alibiStrideB = sig.add("alibi_stride_b", index, ArgRole::Stride);
  if (spec.pagedKv) {
    a.blockTableStride = sig.add("block_table_stride", index, ArgRole::Stride);
    a.pageSize = sig.add("page_size", index, ArgRole::Size);
  }
  a.scale = sig.add("scale", f32, ArgRole::Scale);
  if (spec.slidingWindow) {
    a.windowLeft = sig.add("window_left", index, ArgRole::Param);
    a.windowRight = sig.add("window_right", index, ArgRole::Param);
  }
  if (spec.chunk) a.attentionChunk = sig.add("attention_chunk", index, ArgRole::Param);
  if (spec.softcap) a.softcap = sig.add("softcap", f32, ArgRole::Param);
  if (spec.dropout) a.dropoutP = sig.add("dropout_p", f32, ArgRole::Param);
  // Query head h reads KV head h / (Hq / Hkv): Hq must be a multiple of Hkv.
  sig.divisible.push_back({sig.args[a.headsQ.index].name, sig.expr(a.headsKv)});
  return tensors;
}

} // namespace

FlashAttnSignature flashAttnSignature(tessera::FlashAttnOp op, int blockM, int blockThreads) {
  FlashAttnSignature out;
  KernelSignature &sig = out.sig;
  FlashAttnArgs &a = out.args;
  sig.name = op.getSymName().str();
  sig.directive = "flash_attn";
  sig.directiveAttrs = directiveAttributes(op);
  AbiSpec spec{op.getDtype(),
               {{"q", ArgRole::Input}, {"k", ArgRole::Input}, {"v", ArgRole::Input},
                {"o", ArgRole::Output}},
               op.getReturnLse() ? std::optional(ArgRole::Output) : std::nullopt,
               op.getVarlen(), op.getSlidingWindow(), op.getSoftcap(), op.getSinks(),
               op.getAlibi(), op.getAttentionChunk(), op.getPagedKv(), op.getDropout(),
               op.getSeqused()};
  std::vector<TensorArg> t = addAttentionArgs(sig, spec, a);
  a.q = t[0], a.k = t[1], a.v = t[2], a.o = t[3];
  sig.grid[0] = GridExpr::ceilDiv(sig.expr(a.seqQ), GridExpr::constant(blockM));
  sig.grid[1] = sig.expr(a.headsQ);
  sig.grid[2] = sig.expr(a.batch);
  sig.blockThreads = blockThreads;
  return out;
}

FlashAttnBwdSignature flashAttnBwdSignature(tessera::FlashAttnBwdOp op, int dqRowWidth,
                                            int dqPadRows) {
  FlashAttnBwdSignature out;
  KernelSignature &sig = out.sig;
  FlashAttnBwdArgs &a = out.args;
  sig.name = op.getSymName().str();
  sig.directive = "flash_attn_bwd";
  sig.directiveAttrs = directiveAttributes(op);
  AbiSpec spec{op.getDtype(),
               {{"q", ArgRole::Input}, {"k", ArgRole::Input}, {"v", ArgRole::Input},
                {"o", ArgRole::Input}, {"do", ArgRole::Input}, {"dq", ArgRole::Output},
                {"dk", ArgRole::Output}, {"dv", ArgRole::Output}},
               ArgRole::Input, op.getVarlen(), op.getSlidingWindow(), op.getSoftcap(),
               /*sinks=*/false, op.getAlibi(), op.getAttentionChunk(), /*pagedKv=*/false,
               op.getDropout(), op.getSeqused()};
  std::vector<TensorArg> t = addAttentionArgs(sig, spec, a.fwd);
  a.fwd.q = t[0], a.fwd.k = t[1], a.fwd.v = t[2], a.fwd.o = t[3];
  a.dO = t[4], a.dq = t[5], a.dk = t[6], a.dv = t[7];
  // Per query row and head: the query rows of every item, packed (varlen) or B * Sq.
  GridExpr rows = op.getVarlen() ? sig.expr(a.fwd.totalQ)
                                 : GridExpr::mul(sig.expr(a.fwd.batch), sig.expr(a.fwd.seqQ));
  GridExpr rowsHeads = GridExpr::mul(rows, sig.expr(a.fwd.headsQ));
  auto memref = MemRefType::get({ShapedType::kDynamic}, Float32Type::get(op.getContext()));
  a.stats = sig.add("bwd_stats", memref, ArgRole::Workspace);
  sig.workspaces.push_back({"bwd_stats", GridExpr::mul(rowsHeads, GridExpr::constant(8)), false});
  if (!op.getDeterministic()) {
    a.dqAccum = sig.add("dq_accum", memref, ArgRole::Workspace);
    sig.workspaces.push_back(
        {"dq_accum",
         GridExpr::mul(GridExpr::add(rowsHeads, GridExpr::constant(dqPadRows)),
                       GridExpr::constant(4 * dqRowWidth)),
         true});
  }
  return out;
}

PagedDecodeSignature pagedDecodeSignature(tessera::PagedDecodeOp op) {
  PagedDecodeSignature out;
  KernelSignature &sig = out.sig;
  PagedDecodeArgs &a = out.args;
  sig.name = op.getSymName().str();
  sig.directive = "paged_decode";
  sig.directiveAttrs = directiveAttributes(op);
  MLIRContext *ctx = op.getContext();
  auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type elem = op.getDtype(), index = IndexType::get(ctx), f32 = Float32Type::get(ctx),
       i32 = IntegerType::get(ctx, 32);
  a.q.ptr = sig.add("q", ptr(elem), ArgRole::Input);
  a.k.ptr = sig.add("k_cache", ptr(op.getKvElementType()), ArgRole::Input);
  a.v.ptr = sig.add("v_cache", ptr(op.getKvElementType()), ArgRole::Input);
  a.blockTable = sig.add("block_table", ptr(i32), ArgRole::Input);
  a.cacheSeqlens = sig.add("cache_seqlens", ptr(i32), ArgRole::Input);
  if (op.getCacheLeftpad()) a.cacheLeftpad = sig.add("cache_leftpad", ptr(i32), ArgRole::Input);
  if (op.getKvElementType() != elem) {
    a.kScale.ptr = sig.add("k_scale", ptr(f32), ArgRole::Input);
    a.vScale = sig.add("v_scale", ptr(f32), ArgRole::Input);
  }
  a.o.ptr = sig.add("o", ptr(elem), ArgRole::Output);
  if (op.getReturnLse()) a.lse = sig.add("lse", ptr(f32), ArgRole::Output);
  if (op.getSinks()) a.sinks = sig.add("sinks", ptr(f32), ArgRole::Input);
  if (op.getAlibi()) a.alibiSlopes = sig.add("alibi_slopes", ptr(f32), ArgRole::Input);
  a.batch = sig.add("B", index, ArgRole::Size);
  a.seqQ = sig.add("Sq", index, ArgRole::Size);
  a.headsQ = sig.add("Hq", index, ArgRole::Size);
  a.headsKv = sig.add("Hkv", index, ArgRole::Size);
  if (op.getSplitKv()) a.numSplits = sig.add("num_splits", index, ArgRole::Size);
  for (auto [t, n] : {std::pair{&a.q, "q"}, std::pair{&a.o, "o"}}) {
    t->strideB = sig.add(std::string(n) + "_stride_b", index, ArgRole::Stride);
    t->strideS = sig.add(std::string(n) + "_stride_s", index, ArgRole::Stride);
    t->strideH = sig.add(std::string(n) + "_stride_h", index, ArgRole::Stride);
  }
  for (auto [c, n] : {std::pair{&a.k, "k"}, std::pair{&a.v, "v"}}) {
    c->stridePage = sig.add(std::string(n) + "_stride_page", index, ArgRole::Stride);
    c->strideToken = sig.add(std::string(n) + "_stride_token", index, ArgRole::Stride);
    c->strideHead = sig.add(std::string(n) + "_stride_head", index, ArgRole::Stride);
  }
  if (op.getKvScale() == tessera::KVScale::PerToken) {
    a.kScale.stridePage = sig.add("kv_scale_stride_page", index, ArgRole::Stride);
    a.kScale.strideToken = sig.add("kv_scale_stride_token", index, ArgRole::Stride);
    a.kScale.strideHead = sig.add("kv_scale_stride_head", index, ArgRole::Stride);
  }
  a.blockTableStride = sig.add("block_table_stride", index, ArgRole::Stride);
  if (op.getAlibi()) a.alibiStrideB = sig.add("alibi_stride_b", index, ArgRole::Stride);
  if (op.getReturnLse()) {
    a.lseStrideB = sig.add("lse_stride_b", index, ArgRole::Stride);
    a.lseStrideH = sig.add("lse_stride_h", index, ArgRole::Stride);
  }
  a.scale = sig.add("scale", f32, ArgRole::Scale);
  if (op.getSlidingWindow()) a.windowLeft = sig.add("window_left", index, ArgRole::Param);
  if (op.getSoftcap()) a.softcap = sig.add("softcap", f32, ArgRole::Param);
  if (op.getSplitKv()) {
    // Per split: the normalised f32 output rows, then their LSE.
    a.partials = sig.add("decode_partials", ptr(f32), ArgRole::Workspace);
    GridExpr rows = GridExpr::mul(GridExpr::mul(sig.expr(a.batch), sig.expr(a.headsQ)),
                                  sig.expr(a.seqQ));
    sig.workspaces.push_back(
        {"decode_partials",
         GridExpr::mul(GridExpr::mul(sig.expr(a.numSplits), rows),
                       GridExpr::constant(4 * (op.getHeadDim() + 1))),
         false});
  }
  return out;
}

Visibility flashAttnVisibility(tessera::AttentionDirective op, KernelBuilder &kb,
                               gpu::GPUFuncOp func, const FlashAttnArgs &a, Value seqQ,
                               Value seqK) {
  auto optional = [&](ArgHandle h) { return h ? argValue(func, h) : Value(); };
  return Visibility(MaskSpec::of(op), kb, seqQ, seqK, optional(a.windowLeft),
                    optional(a.windowRight), optional(a.attentionChunk));
}

SeqInfo seqInfo(KernelBuilder &kb, gpu::GPUFuncOp func, const FlashAttnArgs &a, bool varlen,
                Value batch) {
  if (!varlen) return SeqInfo::dense(kb, argValue(func, a.seqQ), argValue(func, a.seqK));
  auto optional = [&](ArgHandle h) { return h ? argValue(func, h) : Value(); };
  return SeqInfo::packed(kb, argValue(func, a.cuSeqlensQ), argValue(func, a.cuSeqlensK), batch,
                         optional(a.seqUsedQ), optional(a.seqUsedK));
}

} // namespace tessera::attn

// The flash_attn kernel ABI as typed handles (Attention/Signature.h).
#include "tessera/Codegen/Attention/Signature.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace tessera::attn {

Value Tensor::base(KernelBuilder &kb, const SeqInfo &seq, Value batch, Value row0,
                   Value head) const {
  Value bTerm = seq.varlen ? kb.idx(0) : kb.mul(batch, strideB);
  Value rowTerm = kb.mul(row0, strideS);
  return kb.add(kb.add(bTerm, rowTerm), kb.mul(head, strideH));
}

Value Tensor::stridesAligned16(KernelBuilder &kb, int elemBits) const {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  const int elems = 128 / elemBits; // per 16 bytes
  Value ok = arith::ConstantIntOp::create(b, loc, 1, 1);
  for (Value s : {strideB, strideS, strideH})
    ok = kb.andb(ok, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, kb.remui(s, elems),
                                           kb.idx(0)));
  return ok;
}

FlashAttnSignature flashAttnSignature(tessera::FlashAttnOp op, int blockM, int blockThreads) {
  MLIRContext *ctx = op.getContext();
  auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type index = IndexType::get(ctx), f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32);
  Type elem = op.getDtype();
  FlashAttnSignature out;
  KernelSignature &sig = out.sig;
  FlashAttnArgs &a = out.args;
  sig.name = op.getSymName().str();
  sig.directive = "flash_attn";
  sig.directiveAttrs = directiveAttributes(op);
  TensorArg *tensors[] = {&a.q, &a.k, &a.v, &a.o};
  const char *names[] = {"q", "k", "v", "o"};
  for (int t = 0; t < 4; ++t)
    tensors[t]->ptr = sig.add(names[t], ptr(elem), t < 3 ? ArgRole::Input : ArgRole::Output);
  if (op.getReturnLse()) a.lse = sig.add("lse", ptr(f32), ArgRole::Output);
  if (op.getVarlen()) {
    a.cuSeqlensQ = sig.add("cu_seqlens_q", ptr(i32), ArgRole::Input);
    a.cuSeqlensK = sig.add("cu_seqlens_k", ptr(i32), ArgRole::Input);
  }
  a.batch = sig.add("B", index, ArgRole::Size);
  a.seqQ = sig.add("Sq", index, ArgRole::Size);
  a.seqK = sig.add("Sk", index, ArgRole::Size);
  a.headsQ = sig.add("Hq", index, ArgRole::Size);
  a.headsKv = sig.add("Hkv", index, ArgRole::Size);
  // The packed tensors' row counts: TMA maps of the sm_90a kernel span them.
  if (op.getVarlen()) {
    a.totalQ = sig.add("total_q", index, ArgRole::Size);
    a.totalK = sig.add("total_k", index, ArgRole::Size);
  }
  for (int t = 0; t < 4; ++t) {
    std::string n = names[t];
    tensors[t]->strideB = sig.add(n + "_stride_b", index, ArgRole::Stride);
    tensors[t]->strideS = sig.add(n + "_stride_s", index, ArgRole::Stride);
    tensors[t]->strideH = sig.add(n + "_stride_h", index, ArgRole::Stride);
  }
  if (op.getReturnLse()) {
    a.lseStrideB = sig.add("lse_stride_b", index, ArgRole::Stride);
    a.lseStrideH = sig.add("lse_stride_h", index, ArgRole::Stride);
  }
  a.scale = sig.add("scale", f32, ArgRole::Scale);
  if (op.getSlidingWindow()) {
    a.windowLeft = sig.add("window_left", index, ArgRole::Param);
    a.windowRight = sig.add("window_right", index, ArgRole::Param);
  }
  if (op.getSoftcap()) a.softcap = sig.add("softcap", f32, ArgRole::Param);
  // Query head h reads KV head h / (Hq / Hkv): Hq must be a multiple of Hkv.
  sig.divisible.push_back({sig.args[a.headsQ.index].name, sig.expr(a.headsKv)});
  sig.grid[0] = GridExpr::ceilDiv(sig.expr(a.seqQ), GridExpr::constant(blockM));
  sig.grid[1] = sig.expr(a.headsQ);
  sig.grid[2] = sig.expr(a.batch);
  sig.blockThreads = blockThreads;
  return out;
}

SeqInfo seqInfo(KernelBuilder &kb, gpu::GPUFuncOp func, const FlashAttnArgs &a, bool varlen,
                Value batch) {
  if (!varlen) return SeqInfo::dense(kb, argValue(func, a.seqQ), argValue(func, a.seqK));
  return SeqInfo::packed(kb, argValue(func, a.cuSeqlensQ), argValue(func, a.cuSeqlensK), batch);
}

} // namespace tessera::attn

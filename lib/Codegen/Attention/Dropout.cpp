#include "tessera/Codegen/Attention/Dropout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <array>
#include <cassert>
#include <map>

using namespace mlir;

namespace tessera::attn {

namespace {

/// i32 arithmetic for the RNG (KernelBuilder's integer helpers are index-typed).
struct U32 {
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;

  explicit U32(KernelBuilder &kb) : kb(kb), b(kb.builder()), loc(kb.location()) {}
  Type i32() { return b.getI32Type(); }
  Value c(uint32_t v) { return arith::ConstantIntOp::create(b, loc, i32(), int64_t(int32_t(v))); }
  Value fromIndex(Value v) { return arith::IndexCastUIOp::create(b, loc, i32(), v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value xorr(Value x, Value y) { return arith::XOrIOp::create(b, loc, x, y); }
  Value orr(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value shl(Value x, Value by) { return arith::ShLIOp::create(b, loc, x, by); }
  Value andc(Value x, uint32_t m) { return arith::AndIOp::create(b, loc, x, c(m)); }
  Value shr(Value x, Value by) { return arith::ShRUIOp::create(b, loc, x, by); }
  Value shr(Value x, uint32_t by) { return by ? shr(x, c(by)) : x; }
  /// (hi, lo) of the 64-bit product of a constant and x: one wide multiply.
  std::pair<Value, Value> mulHiLo(uint32_t m, Value x) {
    Type i64 = b.getI64Type();
    Value wide = arith::MulIOp::create(b, loc, arith::ConstantIntOp::create(b, loc, i64, m),
                                       arith::ExtUIOp::create(b, loc, i64, x));
    Value hi = arith::ShRUIOp::create(b, loc, wide, arith::ConstantIntOp::create(b, loc, i64, 32));
    return {arith::TruncIOp::create(b, loc, i32(), hi),
            arith::TruncIOp::create(b, loc, i32(), wide)};
  }
  /// Philox4x32-10 (Salmon et al., SC'11; Random123's constants).
  std::array<Value, 4> philox(std::array<Value, 4> ctr, Value k0, Value k1) {
    for (int round = 0; round < 10; ++round) {
      if (round) k0 = add(k0, c(0x9E3779B9u)), k1 = add(k1, c(0xBB67AE85u));
      auto [hi0, lo0] = mulHiLo(0xD2511F53u, ctr[0]);
      auto [hi1, lo1] = mulHiLo(0xCD9E8D57u, ctr[2]);
      ctr = {xorr(xorr(hi1, ctr[1]), k0), lo1, xorr(xorr(hi0, ctr[3]), k1), lo0};
    }
    return ctr;
  }
  /// words[index] for a runtime index in [0, words.size()).
  Value pick(ArrayRef<Value> words, Value index) {
    Value out = words[0];
    for (size_t w = 1; w < words.size(); ++w) {
      Value is = kb.cmpEq(index, c(w));
      out = arith::SelectOp::create(b, loc, is, words[w], out);
    }
    return out;
  }
};

/// Whether some lane bit moves `axisBits` of an element's query (`queries`) or key position.
bool laneMoves(const AccView &view, bool queries, int axisBits) {
  for (const Coord &c : view.operandLayout().laneBases) {
    int along = queries ? view.query(c) : view.inner(c);
    if (along & axisBits) return true;
  }
  return false;
}

} // namespace

Dropout Dropout::load(KernelBuilder &kb, Value rngState, Value p) {
  U32 u(kb);
  OpBuilder &b = kb.builder();
  auto word = [&](int i) {
    return memref::LoadOp::create(b, kb.location(), rngState, ValueRange{kb.idx(i)}).getResult();
  };
  Dropout d;
  d.key0 = word(0);
  d.key1 = u.xorr(word(1), word(3));
  d.offset = word(2);
  // p * 65536 is exact in f32 (a power of two); the host computes the same floor.
  Value scaled = kb.fmul(p, kb.f32(65536.0));
  d.threshold = arith::FPToUIOp::create(b, kb.location(), u.i32(), scaled);
  Value thresholdF = arith::UIToFPOp::create(b, kb.location(), b.getF32Type(), d.threshold);
  d.keepScale = arith::DivFOp::create(b, kb.location(), kb.f32(65536.0),
                                      kb.fsub(kb.f32(65536.0), thresholdF));
  return d;
}

Dropout Dropout::forStream(KernelBuilder &kb, Value batch, Value head, Value headsQ) const {
  Dropout d = *this;
  d.stream = U32(kb).fromIndex(kb.add(kb.mul(batch, headsQ), head));
  return d;
}

Value dropoutKeep(KernelBuilder &kb, const Dropout &d, const AccView &view, Value lane,
                  Value query0, Value key0, int queryOffset, int keyOffset) {
  assert(d.stream && "Dropout::forStream first");
  assert(queryOffset % 4 == 0 && keyOffset % 2 == 0 && "offsets keep the 4 x 2 blocks");
  U32 u(kb);
  auto [laneQuery, laneKey] = view.laneOffsets(kb, lane);
  // The lane's first element's query and key; lane and register bits never overlap, so an
  // element's position is these plus its register offsets, without carries into the block.
  Value query = u.fromIndex(kb.add(kb.add(query0, laneQuery), queryOffset));
  Value key = u.fromIndex(kb.add(kb.add(key0, laneKey), keyOffset));
  // The lane's part of the word and half indices, when a lane bit moves them.
  Value laneWord = laneMoves(view, /*queries=*/true, 3) ? u.andc(query, 3) : Value();
  Value laneHalf = laneMoves(view, /*queries=*/false, 1) ? u.andc(key, 1) : Value();
  SmallVector<attn::AccElement> els = view.elements();
  assert(els.size() <= 32 && "one bit a register in an i32");
  Value keep = u.c(0);
  std::map<std::pair<int, int>, std::array<Value, 4>> blocks; // (query >> 2, key >> 1) -> words
  for (const AccElement &el : els) {
    auto [it, fresh] = blocks.try_emplace({el.query >> 2, el.inner >> 1});
    if (fresh) {
      Value ctrKey = u.shr(u.add(key, u.c(el.inner & ~1)), 1);
      Value ctrQuery = u.shr(u.add(query, u.c(el.query & ~3)), 2);
      it->second = u.philox({ctrKey, ctrQuery, d.stream, d.offset}, d.key0, d.key1);
    }
    const std::array<Value, 4> &words = it->second;
    Value word = laneWord ? u.pick(words, u.orr(laneWord, u.c(el.query & 3))) : words[el.query & 3];
    // The element's half: 16 (j & 1) bits up.
    Value draw = laneHalf ? u.shr(word, u.shl(u.orr(laneHalf, u.c(el.inner & 1)), u.c(4)))
                          : u.shr(word, 16 * (el.inner & 1));
    Value kept = arith::CmpIOp::create(kb.builder(), kb.location(), arith::CmpIPredicate::uge,
                                       u.andc(draw, 0xFFFF), d.threshold);
    Value bit = arith::ExtUIOp::create(kb.builder(), kb.location(), u.i32(), kept);
    keep = u.orr(keep, el.reg ? u.shl(bit, u.c(el.reg)) : bit);
  }
  return keep;
}

Value applyDropout(KernelBuilder &kb, Value tile, Value keep, Value factor) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  U32 u(kb);
  Value zero = kb.f32(0), out = tile;
  for (int64_t reg = 0; reg < cast<VectorType>(tile.getType()).getNumElements(); ++reg) {
    Value kept = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                       u.andc(keep, uint32_t(1) << reg), u.c(0));
    Value x = vector::ExtractOp::create(b, loc, out, reg);
    if (factor) x = kb.fmul(x, factor);
    out = vector::InsertOp::create(b, loc, kb.select(kept, x, zero), out, reg);
  }
  return out;
}

} // namespace tessera::attn

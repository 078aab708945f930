#include "tessera/Codegen/Hopper/Pipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <cassert>

using namespace mlir;

namespace tessera::hopper {

void MbarrierRing::init() {
  for (int s = 0; s < stages; ++s) {
    tma.initBarrier(group, kb.idx(firstFull + s), 1);
    tma.initBarrier(group, kb.idx(firstEmpty + s), consumerThreads);
  }
}

MbarrierRing::Slot MbarrierRing::slot(Value iteration) {
  OpBuilder &b = kb.builder();
  Location loc = kb.location();
  auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32); };
  // Stage and phase by mask and shift: ring depths are powers of two.
  assert(llvm::isPowerOf2_32(stages) && "an mbarrier ring of a power-of-two depth");
  Value stage = arith::AndIOp::create(b, loc, iteration, c32(stages - 1));
  Value phase = stages == 1
                    ? iteration
                    : arith::ShRUIOp::create(b, loc, iteration, c32(llvm::Log2_32(stages)));
  Value parity = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                       arith::AndIOp::create(b, loc, phase, c32(1)), c32(0));
  return {arith::IndexCastUIOp::create(b, loc, b.getIndexType(), stage), parity};
}

void MbarrierRing::acquire(const Slot &s, int bytes) {
  waitEmpty(s);
  announce(s, kb.idx(bytes));
}

void MbarrierRing::waitEmpty(const Slot &s) {
  OpBuilder &b = kb.builder();
  // The producer waits for the previous phase's release: parity flipped. A fresh barrier
  // reports the phase before its first as complete, so the first pass does not wait.
  Value flipped = arith::XOrIOp::create(b, kb.location(), s.parity,
                                        arith::ConstantIntOp::create(b, kb.location(), 1, 1));
  tma.waitParity(group, kb.add(s.stage, firstEmpty), flipped);
}

void MbarrierRing::announce(const Slot &s, Value bytes) {
  tma.arriveExpectTx(group, fullBarrier(s), bytes);
}

Value MbarrierRing::fullBarrier(const Slot &s) { return kb.add(s.stage, firstFull); }

void MbarrierRing::waitFull(const Slot &s) { tma.waitParity(group, fullBarrier(s), s.parity); }

void MbarrierRing::release(const Slot &s) { tma.arrive(group, kb.add(s.stage, firstEmpty)); }

} // namespace tessera::hopper

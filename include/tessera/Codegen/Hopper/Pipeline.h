// The TMA pipeline's buffer ring: `stages` shared-memory buffers, each guarded by a full mbarrier
// (completed by the transaction count of the producer's TMA loads) and an empty one (completed
// when every consumer thread has arrived, done reading). Ring iteration i uses stage
// i % stages in phase i / stages; a barrier's phase parity flips each time it completes, so
// waiting on the parity of the phase is all the tracking a pass needs.
#ifndef TESSERA_CODEGEN_HOPPER_PIPELINE_H
#define TESSERA_CODEGEN_HOPPER_PIPELINE_H

#include "tessera/Codegen/Hopper/Tma.h"

namespace tessera::hopper {

class MbarrierRing {
public:
  /// The ring's full barriers are [firstFull, firstFull + stages) of the mbarrier `group`, its
  /// empty ones [firstEmpty, firstEmpty + stages); `stages` is a power of two.
  MbarrierRing(KernelBuilder &kb, TmaBuilder &tma, mlir::Value group, int firstFull,
               int firstEmpty, int stages, int consumerThreads)
      : kb(kb), tma(tma), group(group), firstFull(firstFull), firstEmpty(firstEmpty),
        stages(stages), consumerThreads(consumerThreads) {}

  /// Initialises the ring's barriers (in the one thread that initialises the group).
  void init();

  /// The stage (index) and phase parity (i1) of ring iteration `iteration` (i32).
  struct Slot {
    mlir::Value stage, parity;
  };
  Slot slot(mlir::Value iteration);

  // Producer side.
  /// Waits until the slot's buffer is free (a fresh ring's first pass finds it free) and
  /// announces `bytes` of TMA loads completing on fullBarrier(slot).
  void acquire(const Slot &s, int bytes);
  /// acquire in two steps, for a producer that writes the slot with plain stores in between
  /// (the arrive releases them to the consumers): waitEmpty, then announce `bytes` (index; 0
  /// completes the phase at once).
  void waitEmpty(const Slot &s);
  void announce(const Slot &s, mlir::Value bytes);
  mlir::Value fullBarrier(const Slot &s);

  // Consumer side.
  void waitFull(const Slot &s);
  /// This thread no longer reads the slot's buffer.
  void release(const Slot &s);

private:
  KernelBuilder &kb;
  TmaBuilder &tma;
  mlir::Value group;
  int firstFull, firstEmpty, stages, consumerThreads;
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_PIPELINE_H

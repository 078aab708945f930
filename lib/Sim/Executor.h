// The interpreter of decoded kernels: one workgroup at a time, all its threads in lockstep.
//
// Pure operations are evaluated for every thread of the workgroup (values of threads outside
// the current branch are never read: SSA values do not outlive their region, and region
// results are written only by the masked scf.yield). Memory, cross-lane and synchronising
// operations honour the active mask, and every check reports the first violation.
#ifndef TESSERA_LIB_SIM_EXECUTOR_H
#define TESSERA_LIB_SIM_EXECUTOR_H

#include "Program.h"

namespace tessera::sim::detail {

class Executor {
public:
  /// Prepares registers, constants, arguments and LDS for workgroups of `block` threads.
  Executor(const Program &program, const LaunchConfig &config, const std::array<uint32_t, 3> &block,
           llvm::ArrayRef<ArgValue> args);

  /// Runs one workgroup; false after a check fired (see error()).
  bool runWorkgroup(const std::array<uint32_t, 3> &blockId);
  const std::string &error() const { return message; }

  uint64_t instructions = 0, threadOps = 0;

private:
  /// A buffer as this launch sees it: accesses must stay in [lo, hi) bytes from base.
  struct LiveBinding {
    uint8_t *base = nullptr;
    int64_t lo = 0, hi = 0;
    std::vector<uint8_t> storage; ///< LDS contents
    std::vector<uint8_t> written; ///< LDS: per byte kUnwritten, kWritten or kInFlight
  };
  static constexpr uint8_t kUnwritten = 0, kWritten = 1, kInFlight = 2;
  /// LDS bytes an asynchronous copy writes: in flight until a wait of its thread retires its
  /// group.
  struct LdsRange {
    int32_t binding;
    int64_t offset, bytes;
  };
  /// A thread's asynchronous copies: those not yet committed, then the committed groups,
  /// oldest first.
  struct AsyncCopies {
    std::vector<LdsRange> open;
    std::vector<std::vector<LdsRange>> groups;
  };
  enum class Access { Load, Store, AsyncStore };

  const Program &P;
  LaunchConfig config;
  std::array<uint32_t, 3> block, blockId{0, 0, 0};
  uint32_t T;    ///< threads per workgroup
  uint32_t wave; ///< lanes per wave
  std::vector<Cell> regs;
  std::vector<LiveBinding> live;
  std::vector<AsyncCopies> async; ///< per thread
  std::vector<std::vector<uint8_t>> maskPool;
  size_t maskDepth = 0;
  std::string message;

  Cell *cells(int32_t slot) { return regs.data() + size_t(P.slots[slot].base) * T; }
  uint8_t *acquireMask();
  void releaseMask() { --maskDepth; }

  bool exec(int32_t region, const uint8_t *mask);
  /// Pure element-wise arithmetic, conversions and data movement (ExecArith.cpp).
  void execPure(const Inst &I);
  bool execIf(const Inst &I, const uint8_t *mask);
  bool execFor(const Inst &I, const uint8_t *mask);
  bool execWhile(const Inst &I, const uint8_t *mask);
  void execYield(const Inst &I, const uint8_t *mask, bool condition);
  /// The checked address of `elements` elements that thread `t` accesses in memref `mem`
  /// (I.mem when negative) with the indices I.in[firstIndex...]; null after reporting an
  /// out-of-bounds access, a read of LDS that is unwritten or still being copied, or a store to
  /// LDS still being copied. A store marks the LDS bytes written, an asynchronous one in flight.
  /// `shift` elements are added to the indexed one (a DMA lane's slot past its wave's base).
  uint8_t *address(const Inst &I, uint32_t t, size_t firstIndex, uint32_t elements, Access access,
                   int32_t mem = -1, int64_t shift = 0);
  bool execMemory(const Inst &I, const uint8_t *mask);
  /// A whole-wave instruction in the wave starting at thread `first`: Skip when none of its lanes
  /// runs it (a uniform branch), Run when all do, Failed (reported: "`who` executed by k of the n
  /// lanes of `unit` w (`needs`)") when only some do.
  enum class WaveRun { Skip, Run, Failed };
  WaveRun wholeWave(const Inst &I, const uint8_t *mask, uint32_t first, const std::string &who, const char *unit,
                    const char *needs);
  bool execLdMatrix(const Inst &I, const uint8_t *mask);
  bool execTransposeLoad(const Inst &I, const uint8_t *mask);
  bool execAtomicAdd(const Inst &I, const uint8_t *mask);
  bool execAsyncCopy(const Inst &I, const uint8_t *mask);
  bool execGatherToLds(const Inst &I, const uint8_t *mask);
  void execAsyncCommit(const uint8_t *mask);
  void execAsyncWait(const Inst &I, const uint8_t *mask);
  bool execDynamicPosition(const Inst &I, const uint8_t *mask);
  void execGeometry(const Inst &I);
  bool execBarrier(const Inst &I, const uint8_t *mask);
  bool execWarpSync(const Inst &I, const uint8_t *mask);
  bool execShuffle(const Inst &I, const uint8_t *mask);
  void execDpp(const Inst &I, const uint8_t *mask);
  bool execSwapHalves(const Inst &I, const uint8_t *mask);
  bool execMatrix(const Inst &I, const uint8_t *mask);

  /// Records a report about `I` (for `thread`, or the whole workgroup when negative) and
  /// returns false.
  bool report(const Inst &I, int64_t thread, const std::string &what);
  std::string threadName(int64_t thread) const;
};

} // namespace tessera::sim::detail

#endif // TESSERA_LIB_SIM_EXECUTOR_H

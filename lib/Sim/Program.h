// The decoded form of a kernel: instructions over value slots, as the interpreter runs them.
//
// Every SSA value gets a slot of `count` elements per thread; a workgroup's registers hold
// element e of thread t of slot s at cells[(slot.base + e) * T + t], so an instruction
// evaluates all T threads with unit-stride loops. Memref values are not slots: they resolve
// at decode time to a MemRefDesc over a binding (a kernel buffer or an LDS allocation).
#ifndef TESSERA_LIB_SIM_PROGRAM_H
#define TESSERA_LIB_SIM_PROGRAM_H

#include "tessera/Sim/MatrixOps.h"
#include "tessera/Sim/Simulator.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::sim::detail {

/// One element of one thread: integers sign-extended to 64 bits, floats as exact doubles.
union Cell {
  int64_t i;
  double f;
};

enum class Op : uint8_t {
  // Integer arithmetic; kind is the result's. in: a, b.
  AddI, SubI, MulI, DivSI, DivUI, RemSI, RemUI, CeilDivSI, CeilDivUI, FloorDivSI,
  AndI, OrI, XOrI, ShLI, ShRSI, ShRUI, MaxSI, MinSI, MaxUI, MinUI,
  AbsI,
  CmpI,                 ///< kind: the operands'; imm: CmpIPredicate
  ExtSI, ExtUI, TruncI, ///< kind: result, srcKind: operand
  // Float arithmetic; kind is the result's, every result is rounded to it.
  AddF, SubF, MulF, DivF, RemF, MaxNumF, MinNumF, MaximumF, MinimumF, CopySign, PowF,
  NegF,
  MathUnary,            ///< imm: MathFn
  Fma,                  ///< in: a, b, c
  CmpF,                 ///< kind: the operands'; imm: CmpFPredicate
  ExtF, TruncF, SIToFP, UIToFP, FPToSI, FPToUI, ///< kind: result, srcKind: operand
  Bitcast,              ///< reinterprets the operand's bits; srcKind: operand element kind
  Select,               ///< in: cond, a, b; imm 1: one i1 selects whole vectors
  // Data movement.
  Gather,   ///< moves: (srcSlot, srcElem, dstSlot, dstElem) quadruples, all threads
  ExtractDyn, InsertDyn, ///< vector.extract/insert with dynamic positions; see positions
  Reduce,   ///< vector.reduction; imm: ReduceKind; in: vector [, acc]
  Poison,   ///< ub.poison, llvm.mlir.undef: NaN / 0
  // Memory: mem is the MemRefDesc; count elements contiguous in the innermost dimension.
  Load,     ///< in: indices
  Store,    ///< in: value, indices
  AtomicAddF, ///< memref.atomic_rmw addf on f32; in: value, indices; out: the old value
  LdMatrix, ///< nvgpu.ldmatrix; in: indices (each lane's row address); imm: tiles, imm2: transpose
  TransposeLoad, ///< amdgpu.transpose_load (ds_read_b64_tr_b16); in: indices (each lane's 4 elements)
  /// nvgpu.device_async_copy (global -> LDS); mem: destination, srcMem: source; in: destination
  /// indices (imm2 of them), source indices, then the source element count when list[0];
  /// imm: the destination's element count
  AsyncCopy,
  /// amdgpu.gather_to_lds (LDS DMA load); mem: destination, srcMem: source; in: destination
  /// indices (imm2 of them: the wave's first slot), then source indices; imm: elements a lane.
  /// Each load is a group of its own, in flight until a CounterWait retires it.
  GatherToLds,
  AsyncCommit, ///< nvvm.cp.async.commit.group
  AsyncWait,   ///< nvvm.cp.async.wait.group, amdgpu.memory_counter_wait's load count; imm: the
               ///< groups that may stay in flight
  // Thread geometry; imm: dimension 0-2.
  ThreadId, BlockId, BlockDim, GridDim, LaneId, SubgroupId, NumSubgroups, SubgroupSize,
  // Cross-lane and synchronisation.
  Barrier,
  WarpSync, ///< nvvm.bar.warp.sync; in: the lane mask
  Shuffle,  ///< gpu.shuffle; in: value, offset, width; out: result, valid; imm: mode
  Dpp,      ///< amdgpu.dpp; in: old, src; imm: DppKind; imm2: row_mask | bank_mask << 4 | bound_ctrl << 8
  SwapHalves, ///< tessera.swap_wave_halves; in: a, b; out: lo, hi
  Matrix,   ///< matrix: index into Program::matrixOps
  // Structured control flow.
  If,       ///< in: cond; region: then, region2: else or -1; out: results
  For,      ///< in: lb, ub, step, inits; aux: iv, iter args; out: results; imm 1: unsigned
  While,    ///< in: inits; region: before, region2: after; aux: before args; out: results
  Yield,    ///< in: values -> out: destination slots, for the active lanes
  Condition,///< in: cond, values -> out (after args) and aux (while results)
  Nop,
};

enum class MathFn : uint8_t {
  Exp2, Exp, Expm1, Log2, Log, Log1p, Log10, Tanh, Sqrt, Rsqrt, Abs, Floor, Ceil, Round,
  RoundEven, Trunc, Sin, Cos, Tan, Atan, Erf, Sinh, Cosh,
};

/// The combining operation of vector.reduction (the numbering of mlir::vector::CombiningKind).
enum class ReduceKind : uint8_t {
  Add, Mul, MinUI, MinSI, MinNumF, MaxUI, MaxSI, MaxNumF, And, Or, Xor, MinimumF, MaximumF,
};

/// amdgpu.dpp permutations (the enum order of mlir::amdgpu::DPPPerm).
enum class DppKind : uint8_t {
  QuadPerm, RowShl, RowShr, RowRor, WaveShl, WaveShr, WaveRor, WaveRol, RowMirror, RowHalfMirror, RowBcast15,
  RowBcast31,
};

enum class ShuffleMode : uint8_t { Xor, Down, Up, Idx };

struct Slot {
  ElemKind kind;
  uint32_t count; ///< elements per thread
  uint32_t base;  ///< first cell row (times T threads)
};

struct Inst {
  Op op = Op::Nop;
  ElemKind kind = ElemKind::I64;
  ElemKind srcKind = ElemKind::I64;
  uint32_t count = 1; ///< elements per thread of the result (of the stored value for Store)
  int32_t site = -1;  ///< Program::sites: location and op name for reports
  std::vector<int32_t> in, out, aux;
  int64_t imm = 0, imm2 = 0;
  /// Gather: move quadruples. Dpp: the permutation argument. ExtractDyn/InsertDyn: per
  /// position (static index or -1 for the next dynamic operand, dimension size, stride).
  std::vector<int64_t> list;
  int32_t region = -1, region2 = -1;
  int32_t mem = -1;
  int32_t srcMem = -1; ///< AsyncCopy's source
  int32_t matrix = -1;
};

struct Region {
  std::vector<Inst> insts;
};

/// Where a buffer comes from.
struct Binding {
  enum class Space { Global, Workgroup, DynamicWorkgroup } space;
  std::string name;   ///< parameter name, or a description of the LDS allocation
  uint64_t bytes = 0; ///< Workgroup: allocation size
  int param = -1;     ///< Global: parameter index
};

struct MemRefDesc {
  int32_t binding;
  ElemKind kind;
  int64_t offset = 0;          ///< elements from the binding's start
  std::vector<int64_t> strides;///< elements per index step, one per dimension
};

/// One element of a matrix operand in a lane: element `elem` of `slot`, or with `half` >= 0 the `half`-th `packed` value of that 32-bit
/// element (low bits first: two 16-bit or four 8-bit values a register, as PTX packs them).
struct ElemRef {
  int32_t slot;
  uint32_t elem;
  int8_t half = -1;
  ElemKind packed = ElemKind::BF16;
};

struct MatrixOpDesc {
  const MatrixLayout *layout;
  std::vector<ElemRef> a, b, c; ///< per lane element index
  int32_t dSlot;
  ElemKind dKind;
  std::string mnemonic;
};

struct Site {
  std::string loc;  ///< "file:line:col"
  std::string op;   ///< "vector.load"
};

struct Program {
  KernelInfo info;
  std::vector<Slot> slots;
  uint32_t cellRows = 0; ///< sum of slot counts
  std::vector<Region> regions;
  int32_t entry = -1;
  std::vector<MemRefDesc> memrefs;
  std::vector<Binding> bindings;
  std::vector<MatrixOpDesc> matrixOps;
  std::vector<Site> sites;
  /// Values written once per executor (constants): slot and one cell per element.
  std::vector<std::pair<int32_t, std::vector<Cell>>> constants;
  std::vector<int32_t> paramSlot;    ///< scalar parameter -> slot, or -1
  std::vector<int32_t> paramBinding; ///< buffer parameter -> binding, or -1
};

/// Decodes the kernel IR in `source` (see Kernel::fromSource).
llvm::Expected<std::unique_ptr<Program>> decodeProgram(llvm::StringRef source, llvm::StringRef bufferName,
                                                       const LoadOptions &options);

/// Runs `config.grid` on `program` (see Kernel::launch).
llvm::Expected<RunStats> runProgram(const Program &program, const LaunchConfig &config,
                                    llvm::ArrayRef<ArgValue> args);

} // namespace tessera::sim::detail

#endif // TESSERA_LIB_SIM_PROGRAM_H

// tessera-sim's library interface: load a kernel-IR gpu.func and run it over a grid of workgroups on the CPU.
//
// No MLIR type appears here: the tool and the runtime plugin use this header alone. A kernel
// is parsed and decoded once (unsupported operations are rejected then, with their names and
// locations); each launch then runs every workgroup with its threads in lockstep, checking
// every memory access, LDS initialisation and barrier convergence. See docs/simulator.md.
#ifndef TESSERA_SIM_SIMULATOR_H
#define TESSERA_SIM_SIMULATOR_H

#include "tessera/Sim/Numerics.h"
#include "tessera/Support/ArgRole.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::sim {

namespace detail {
struct Program;
}

/// One kernel parameter, from the gpu.func signature and its tessera.arg_names/arg_roles.
struct ParamInfo {
  enum class Kind { Buffer, Scalar };
  std::string name; ///< tessera.arg_names entry, or "arg<N>"
  std::optional<ArgRole> role; ///< tessera.arg_roles entry, nullopt when the kernel has none
  Kind kind;
  ElemKind elem;        ///< a buffer's element type, or the scalar's type
  bool isIndex = false; ///< scalar of type index (passed as i64)
};

/// What the kernel declares about itself.
struct KernelInfo {
  std::string name;
  std::string target; ///< chip of the enclosing gpu.module ("gfx942", "sm_90")
  int waveSize = 0;
  std::string directive;                       ///< tessera.directive, or ""
  std::string attributesJson;                  ///< tessera.attributes as a JSON object ("{}" when absent)
  std::string gridJson;                        ///< tessera.grid (docs/bundle.md grid expressions), or ""
  std::array<uint32_t, 3> knownBlock{0, 0, 0}; ///< known_block_size, zeros when absent
  uint64_t staticLdsBytes = 0;                 ///< workgroup attributions and workgroup globals
  std::vector<ParamInfo> params;
};

/// How to find the kernel and its target.
struct LoadOptions {
  std::string kernel; ///< gpu.func name; may be empty when the module holds exactly one
  std::string target; ///< chip to simulate; must match the gpu.module's target when it has one
};

/// A buffer argument: `data` points at the kernel's element 0. Accesses must stay within
/// [data - bytesBefore, data + bytes), the allocation the pointer belongs to.
struct BufferArg {
  void *data = nullptr;
  uint64_t bytes = 0;
  uint64_t bytesBefore = 0;
};

/// One launch argument, in parameter order.
struct ArgValue {
  enum class Kind { Buffer, Integer, Float } kind = Kind::Integer;
  BufferArg buffer;
  int64_t integer = 0;
  double real = 0;
  static ArgValue ofBuffer(BufferArg b) { return {Kind::Buffer, b, 0, 0.0}; }
  static ArgValue ofInteger(int64_t i) { return {Kind::Integer, {}, i, 0.0}; }
  static ArgValue ofFloat(double f) { return {Kind::Float, {}, 0, f}; }
};

struct LaunchConfig {
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{0, 0, 0}; ///< zeros: the kernel's known_block_size
  uint32_t dynamicLdsBytes = 0;           ///< bytes of gpu.dynamic_shared_memory
  unsigned threads = 1;                   ///< host threads sharing the workgroups
};

/// What one launch did.
struct RunStats {
  uint64_t workgroups = 0;
  uint64_t instructions = 0; ///< decoded instructions executed, summed over workgroups
  uint64_t threadOps = 0;    ///< instructions times the lanes they were evaluated for
  double seconds = 0;
};

/// A decoded kernel, ready to launch any number of times (launches may run concurrently).
class Kernel {
public:
  /// Parses kernel IR (a module holding gpu.module/gpu.func) and decodes one kernel.
  static llvm::Expected<std::unique_ptr<Kernel>> fromSource(llvm::StringRef source, llvm::StringRef bufferName,
                                                            const LoadOptions &options);
  static llvm::Expected<std::unique_ptr<Kernel>> fromFile(llvm::StringRef path, const LoadOptions &options);
  ~Kernel();

  const KernelInfo &info() const;
  /// Runs the grid. Fails on the first check that fires (out-of-bounds access, read of
  /// unwritten LDS, divergent barrier, ...) with a message naming the operation's location,
  /// the block and thread, the index and the buffer.
  llvm::Expected<RunStats> launch(const LaunchConfig &config, llvm::ArrayRef<ArgValue> args) const;

private:
  explicit Kernel(std::unique_ptr<detail::Program> program);
  std::unique_ptr<detail::Program> program;
};

/// The multiprocessor count the simulator reports for "$sm_count" (tessera-sim --sm-count and
/// TESSERA_SIM_SM_COUNT override it): small, so a persistent kernel's workgroups each loop over
/// several tiles on the small problems simulated, as they do on a GPU with large ones.
inline constexpr uint32_t kDefaultSmCount = 4;

/// Evaluates a docs/bundle.md grid (a JSON array of three expressions) with `arg` giving the
/// value of a named integer argument and `smCount` the value of "$sm_count".
llvm::Expected<std::array<uint32_t, 3>> evaluateGrid(llvm::StringRef gridJson,
                                                     llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> arg,
                                                     uint32_t smCount = kDefaultSmCount);

} // namespace tessera::sim

#endif // TESSERA_SIM_SIMULATOR_H

// tessera-sim: run a bundle's (or a kernel IR file's) kernel on the CPU simulator; --check verifies a wmma_gemm against float64.
//
//   tessera-sim BUNDLE --kernel g --arg M=128 --arg N=128 ... --buffer a=16384 --buffer c=16384 --print c
//   tessera-sim BUNDLE --kernel g --check --arg M=17 --arg N=33 --arg K=40
#include "tessera/Sim/Simulator.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>

using namespace tessera::sim;
namespace cl = llvm::cl;

namespace {

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<bundle directory or kernel IR file>"), cl::Required);
cl::opt<std::string> kernelName("kernel", cl::desc("kernel to run (default: the only one)"));
cl::opt<std::string> targetName("target", cl::desc("chip to simulate when the kernel IR names none"));
cl::list<std::string> argSpecs("arg", cl::desc("scalar argument NAME=VALUE"), cl::value_desc("NAME=VALUE"));
cl::list<std::string> bufferSpecs("buffer",
                                  cl::desc("buffer argument NAME=COUNT[:INIT], INIT one of random, zero, nan, iota, "
                                           "or @FILE (raw bytes); default random for inputs, nan for outputs"),
                                  cl::value_desc("NAME=COUNT[:INIT]"));
cl::list<std::string> printNames("print", cl::desc("print the elements of buffer NAME after the run"),
                                 cl::value_desc("NAME"));
cl::list<std::string> dumpSpecs("dump", cl::desc("write the bytes of buffer NAME to FILE after the run"),
                                cl::value_desc("NAME=FILE"));
cl::opt<std::string> gridSpec("grid", cl::desc("workgroups X,Y,Z (default: the kernel's grid expression)"));
cl::opt<unsigned> hostThreads("host-threads", cl::desc("host threads sharing the workgroups"), cl::init(1));
cl::opt<uint64_t> seedOpt("seed", cl::desc("random seed (default: fresh, printed)"));
cl::opt<bool> checkGemm("check", cl::desc("run a wmma_gemm kernel on random inputs (M, N, K from --arg) and compare "
                                          "with a float64 reference (docs/CORRECTNESS.md rule); exit 1 on failure"));
cl::opt<int64_t> padOpt("pad", cl::desc("--check: leading-dimension padding in elements"), cl::init(0));

[[noreturn]] void die(const llvm::Twine &message) {
  llvm::errs() << "tessera-sim: error: " << message << "\n";
  std::exit(1);
}

template <typename T> T orDie(llvm::Expected<T> value) {
  if (!value)
    die(llvm::toString(value.takeError()));
  return std::move(*value);
}

/// The kernel IR file of `kernel` in a bundle directory (its manifest's kernel_ir entry).
std::string kernelIrOfBundle(const std::string &dir, std::string &kernel) {
  llvm::SmallString<256> manifestPath(dir);
  llvm::sys::path::append(manifestPath, "manifest.json");
  auto text = llvm::MemoryBuffer::getFile(manifestPath);
  if (!text)
    die("cannot read " + manifestPath + ": " + text.getError().message());
  llvm::json::Value manifest = orDie(llvm::json::parse((*text)->getBuffer()));
  const llvm::json::Object *root = manifest.getAsObject();
  const llvm::json::Array *kernels = root ? root->getArray("kernels") : nullptr;
  if (!kernels)
    die(manifestPath + " has no kernel list");
  std::string names;
  for (const llvm::json::Value &k : *kernels) {
    const llvm::json::Object *o = k.getAsObject();
    auto name = o ? o->getString("name") : std::nullopt;
    if (!name)
      continue;
    names += (names.empty() ? "" : ", ") + name->str();
    if (kernel.empty() && kernels->size() == 1)
      kernel = name->str();
    if (*name == kernel) {
      llvm::SmallString<256> path(dir);
      auto ir = o->getString("kernel_ir");
      llvm::sys::path::append(path, ir ? ir->str() : kernel + ".kernel.mlir");
      return std::string(path);
    }
  }
  die(kernel.empty() ? "bundle " + dir + " has several kernels (" + names + "): choose one with --kernel"
                     : "bundle " + dir + " has no kernel '" + kernel + "' (kernels: " + names + ")");
}

/// A host buffer for one kernel argument.
struct HostBuffer {
  ElemKind kind;
  std::vector<uint8_t> bytes;
  size_t count() const { return bytes.size() / storageBytes(kind); }
  double get(size_t i) const {
    uint64_t bits = 0;
    std::memcpy(&bits, bytes.data() + i * storageBytes(kind), storageBytes(kind));
    return isFloat(kind) ? decodeFloat(bits, kind) : double(signExtend(int64_t(bits), bitWidth(kind)));
  }
  void set(size_t i, double v) {
    uint64_t bits = isFloat(kind) ? encodeFloat(v, kind) : uint64_t(int64_t(v));
    std::memcpy(bytes.data() + i * storageBytes(kind), &bits, storageBytes(kind));
  }
};

/// Values exactly representable in `kind`: uniform in [-1, 1] for floats, [-8, 8] for integers.
void fillRandom(HostBuffer &b, std::mt19937_64 &rng) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> small(-8, 8);
  for (size_t i = 0; i < b.count(); ++i)
    b.set(i, isFloat(b.kind) ? roundToKind(unit(rng), b.kind) : small(rng));
}

void fillPoison(HostBuffer &b) {
  for (size_t i = 0; i < b.count(); ++i)
    b.set(i, isFloat(b.kind) ? NAN : -1.0);
}

uint64_t fnv1a(const std::vector<uint8_t> &bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t c : bytes)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}

int64_t parseInteger(const std::string &text, const std::string &what) {
  int64_t v;
  if (llvm::StringRef(text).getAsInteger(0, v))
    die(what + " '" + text + "' is not an integer");
  return v;
}

struct Run {
  std::unique_ptr<Kernel> kernel;
  std::map<std::string, std::string> scalars; ///< --arg values by name
  std::map<std::string, HostBuffer> buffers;
  std::mt19937_64 rng;
  uint64_t seed;
};

const ParamInfo *findParam(const KernelInfo &info, const std::string &name) {
  for (const ParamInfo &p : info.params)
    if (p.name == name)
      return &p;
  return nullptr;
}

std::optional<int64_t> scalarValue(const Run &run, llvm::StringRef name) {
  auto it = run.scalars.find(name.str());
  if (it == run.scalars.end())
    return std::nullopt;
  return parseInteger(it->second, "argument " + name.str());
}

/// Launches the kernel with `run`'s scalars and buffers; prints what it did.
RunStats launch(Run &run) {
  const KernelInfo &info = run.kernel->info();
  std::vector<ArgValue> args;
  for (const ParamInfo &p : info.params) {
    if (p.kind == ParamInfo::Kind::Buffer) {
      auto it = run.buffers.find(p.name);
      if (it == run.buffers.end())
        die("buffer argument '" + p.name + "' needs --buffer " + p.name + "=COUNT[:INIT]");
      args.push_back(ArgValue::ofBuffer({it->second.bytes.data(), it->second.bytes.size(), 0}));
      continue;
    }
    auto it = run.scalars.find(p.name);
    if (it == run.scalars.end())
      die("scalar argument '" + p.name + "' needs --arg " + p.name + "=VALUE");
    if (isFloat(p.elem)) {
      double v;
      if (llvm::StringRef(it->second).getAsDouble(v))
        die("argument " + p.name + " '" + it->second + "' is not a number");
      args.push_back(ArgValue::ofFloat(v));
    } else {
      args.push_back(ArgValue::ofInteger(parseInteger(it->second, "argument " + p.name)));
    }
  }
  for (const auto &[name, value] : run.scalars)
    if (!findParam(info, name))
      die("kernel " + info.name + " has no argument '" + name + "'");
  LaunchConfig config;
  config.threads = hostThreads;
  if (!gridSpec.empty()) {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(gridSpec).split(parts, ',');
    if (parts.size() != 3)
      die("--grid takes X,Y,Z");
    for (int d = 0; d < 3; ++d)
      config.grid[d] = uint32_t(parseInteger(parts[d].str(), "--grid"));
  } else if (!info.gridJson.empty()) {
    config.grid = orDie(evaluateGrid(info.gridJson, [&](llvm::StringRef n) { return scalarValue(run, n); }));
  } else {
    die("kernel " + info.name + " has no grid expression: give --grid X,Y,Z");
  }
  RunStats stats = orDie(run.kernel->launch(config, args));
  llvm::outs() << "kernel " << info.name << " (" << info.target << "): grid " << config.grid[0] << "x"
               << config.grid[1] << "x" << config.grid[2] << ", " << stats.workgroups << " workgroups, "
               << stats.instructions << " instructions, " << stats.threadOps << " thread-ops in "
               << llvm::format("%.3f", stats.seconds) << " s ("
               << llvm::format("%.1f", stats.threadOps / std::max(stats.seconds, 1e-9) / 1e6) << " M thread-ops/s)\n";
  return stats;
}

/// --check: C = op(A) * op(B) of a wmma_gemm kernel against float64, with the CORRECTNESS.md
/// tolerance (2x the error of a same-precision implementation, plus 1e-5).
int checkWmmaGemm(Run &run) {
  const KernelInfo &info = run.kernel->info();
  if (info.directive != "wmma_gemm")
    die("--check needs a wmma_gemm kernel; " + info.name + " is '" + info.directive + "'");
  llvm::json::Value attrs = orDie(llvm::json::parse(info.attributesJson));
  const llvm::json::Object *a = attrs.getAsObject();
  bool transA = a && a->getBoolean("transpose_a").value_or(false);
  bool transB = a && a->getBoolean("transpose_b").value_or(false);
  int64_t M = scalarValue(run, "M").value_or(-1), N = scalarValue(run, "N").value_or(-1),
          K = scalarValue(run, "K").value_or(-1);
  if (M < 0 || N < 0 || K < 0)
    die("--check needs --arg M=.. --arg N=.. --arg K=..");
  int64_t pad = padOpt;
  auto defaultArg = [&](const char *name, int64_t value) { run.scalars.try_emplace(name, std::to_string(value)); };
  defaultArg("lda", (transA ? M : K) + pad);
  defaultArg("ldb", (transB ? K : N) + pad);
  defaultArg("ldc", N + pad);
  int64_t lda = *scalarValue(run, "lda"), ldb = *scalarValue(run, "ldb"), ldc = *scalarValue(run, "ldc");
  ElemKind in = findParam(info, "a")->elem, out = findParam(info, "c")->elem;
  HostBuffer A{in, std::vector<uint8_t>(size_t((transA ? K : M) * lda) * storageBytes(in))};
  HostBuffer B{in, std::vector<uint8_t>(size_t((transB ? N : K) * ldb) * storageBytes(in))};
  HostBuffer C{out, std::vector<uint8_t>(size_t(M * ldc) * storageBytes(out))};
  fillRandom(A, run.rng);
  fillRandom(B, run.rng);
  fillPoison(C);
  run.buffers["a"] = A;
  run.buffers["b"] = B;
  run.buffers["c"] = C;
  launch(run);
  const HostBuffer &result = run.buffers["c"];

  auto at = [](const HostBuffer &h, int64_t r, int64_t c, int64_t ld) { return h.get(size_t(r * ld + c)); };
  double kernelErr = 0, naiveErr = 0;
  int64_t unwritten = 0, clobbered = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      float naive = 0;
      for (int64_t k = 0; k < K; ++k) {
        double x = transA ? at(A, k, i, lda) : at(A, i, k, lda);
        double y = transB ? at(B, j, k, ldb) : at(B, k, j, ldb);
        ref += x * y;
        naive = std::fma(float(x), float(y), naive);
      }
      double got = at(result, i, j, ldc);
      if (std::isnan(got)) {
        ++unwritten;
        continue;
      }
      kernelErr = std::max(kernelErr, std::fabs(got - ref));
      naiveErr = std::max(naiveErr, std::fabs(roundToKind(naive, out) - ref));
    }
    for (int64_t j = N; j < ldc; ++j)
      clobbered += !std::isnan(at(result, i, j, ldc));
  }
  double limit = 2 * naiveErr + 1e-5;
  bool pass = unwritten == 0 && clobbered == 0 && kernelErr <= limit;
  llvm::outs() << "check " << info.name << " M=" << M << " N=" << N << " K=" << K << " lda=" << lda << " ldb=" << ldb
               << " ldc=" << ldc << " (" << kindName(in) << " -> " << kindName(out) << (transA ? ", transpose_a" : "")
               << (transB ? ", transpose_b" : "") << ", seed " << run.seed << "): max error "
               << llvm::format("%.3e", kernelErr) << ", same-precision reference " << llvm::format("%.3e", naiveErr)
               << ", limit " << llvm::format("%.3e", limit);
  if (unwritten)
    llvm::outs() << ", " << unwritten << " elements of C not written";
  if (clobbered)
    llvm::outs() << ", " << clobbered << " elements past column N of C overwritten";
  llvm::outs() << ": " << (pass ? "PASS" : "FAIL") << "\n";
  return pass ? 0 : 1;
}

/// --buffer NAME=COUNT[:INIT]
void makeBuffer(Run &run, const std::string &spec) {
  auto [name, rest] = llvm::StringRef(spec).split('=');
  auto [countText, init] = rest.split(':');
  const ParamInfo *p = findParam(run.kernel->info(), name.str());
  if (!p || p->kind != ParamInfo::Kind::Buffer)
    die("kernel " + run.kernel->info().name + " has no buffer argument '" + name + "'");
  HostBuffer b{p->elem, {}};
  b.bytes.resize(size_t(parseInteger(countText.str(), "--buffer count")) * storageBytes(p->elem));
  bool output = p->role == "output";
  if (init.empty())
    init = output ? "nan" : "random";
  if (init == "random")
    fillRandom(b, run.rng);
  else if (init == "nan")
    fillPoison(b);
  else if (init == "iota")
    for (size_t i = 0; i < b.count(); ++i)
      b.set(i, double(i));
  else if (init.starts_with("@")) {
    auto file = llvm::MemoryBuffer::getFile(init.drop_front());
    if (!file)
      die("cannot read " + init.drop_front() + ": " + file.getError().message());
    std::memcpy(b.bytes.data(), (*file)->getBufferStart(), std::min(b.bytes.size(), (*file)->getBufferSize()));
  } else if (init != "zero")
    die("unknown buffer initialiser '" + init + "' (random, zero, nan, iota or @FILE)");
  run.buffers[name.str()] = std::move(b);
}

void report(Run &run) {
  for (const auto &[name, b] : run.buffers) {
    double sum = 0, sumAbs = 0;
    size_t nan = 0;
    for (size_t i = 0; i < b.count(); ++i) {
      double v = b.get(i);
      if (std::isnan(v)) {
        ++nan;
        continue;
      }
      sum += v;
      sumAbs += std::fabs(v);
    }
    llvm::outs() << name << ": " << b.count() << " x " << kindName(b.kind) << ", sum " << llvm::format("%.9g", sum)
                 << ", sum|x| " << llvm::format("%.9g", sumAbs) << ", NaN " << nan << ", fnv1a "
                 << llvm::format_hex(fnv1a(b.bytes), 18) << "\n";
  }
  for (const std::string &name : printNames) {
    auto it = run.buffers.find(name);
    if (it == run.buffers.end())
      die("--print: no buffer '" + name + "'");
    llvm::outs() << name << " =";
    for (size_t i = 0; i < it->second.count(); ++i)
      llvm::outs() << " " << llvm::format("%g", it->second.get(i));
    llvm::outs() << "\n";
  }
  for (const std::string &spec : dumpSpecs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    auto it = run.buffers.find(name.str());
    if (it == run.buffers.end())
      die("--dump: no buffer '" + name + "'");
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    if (ec)
      die("cannot write " + file + ": " + ec.message());
    os.write(reinterpret_cast<const char *>(it->second.bytes.data()), it->second.bytes.size());
  }
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "tessera-sim: run Tessera kernels on the CPU simulator\n");
  Run run;
  run.seed = seedOpt.getNumOccurrences() ? uint64_t(seedOpt) : std::random_device{}();
  run.rng.seed(run.seed);
  std::string kernel = kernelName;
  std::string path = llvm::sys::fs::is_directory(inputPath) ? kernelIrOfBundle(inputPath, kernel) : inputPath;
  run.kernel = orDie(Kernel::fromFile(path, LoadOptions{kernel, targetName}));
  for (const std::string &spec : argSpecs) {
    auto [name, value] = llvm::StringRef(spec).split('=');
    if (!llvm::StringRef(spec).contains('='))
      die("--arg takes NAME=VALUE, not '" + spec + "'");
    run.scalars[name.str()] = value.str();
  }
  if (checkGemm)
    return checkWmmaGemm(run);
  for (const std::string &spec : bufferSpecs)
    makeBuffer(run, spec);
  llvm::outs() << "seed " << run.seed << "\n";
  launch(run);
  report(run);
  return 0;
}

// tessera-sim: run a bundle's (or a kernel IR file's) kernel on the CPU simulator; --check verifies a wmma_gemm against
// float64.
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
cl::opt<std::string> blockSpec("block",
                               cl::desc("threads per workgroup X,Y,Z (default: the kernel's known_block_size)"));
cl::opt<unsigned> smCountOpt("sm-count", cl::desc("the multiprocessor count grids read as $sm_count"),
                             cl::init(kDefaultSmCount));
cl::opt<unsigned> hostThreads("host-threads", cl::desc("host threads sharing the workgroups"), cl::init(1));
cl::opt<uint64_t> seedOpt("seed", cl::desc("random seed (default: fresh, printed)"));
cl::opt<bool> checkGemm("check", cl::desc("run wmma_gemm kernels on random inputs and compare with a float64 reference "
                                          "(docs/CORRECTNESS.md rule); exit 1 on failure. Shape from --arg M/N/K, "
                                          "else every --shapes entry on every wmma_gemm kernel of the bundle"));
cl::opt<int64_t> padOpt("pad", cl::desc("--check with --arg M/N/K: leading-dimension padding in elements"),
                        cl::init(0));
cl::opt<std::string> shapesOpt("shapes", cl::desc("--check shapes MxNxK[+PAD], comma-separated"),
                               cl::init("1x1x1,17x33x40,128x128x128,130x257x72+8,64x48x200+3"));

[[noreturn]] void die(const llvm::Twine &message) {
  llvm::outs().flush();
  llvm::errs() << "tessera-sim: error: " << message << "\n";
  std::exit(1);
}

template <typename T> T orDie(llvm::Expected<T> value) {
  if (!value)
    die(llvm::toString(value.takeError()));
  return std::move(*value);
}

/// A kernel to load: its name (empty: the file's only kernel) and kernel IR file.
struct KernelSource {
  std::string name, path;
};

/// The kernels of a bundle directory (from its manifest), or the kernel IR file itself.
std::vector<KernelSource> kernelSources(const std::string &input) {
  if (!llvm::sys::fs::is_directory(input))
    return {{"", input}};
  llvm::SmallString<256> manifestPath(input);
  llvm::sys::path::append(manifestPath, "manifest.json");
  auto text = llvm::MemoryBuffer::getFile(manifestPath);
  if (!text)
    die("cannot read " + manifestPath + ": " + text.getError().message());
  llvm::json::Value manifest = orDie(llvm::json::parse((*text)->getBuffer()));
  const llvm::json::Object *root = manifest.getAsObject();
  const llvm::json::Array *kernels = root ? root->getArray("kernels") : nullptr;
  if (!kernels)
    die(manifestPath + " has no kernel list");
  std::vector<KernelSource> sources;
  for (const llvm::json::Value &k : *kernels) {
    const llvm::json::Object *o = k.getAsObject();
    auto name = o ? o->getString("name") : std::nullopt;
    if (!name)
      die(manifestPath + " lists a kernel without a name");
    llvm::SmallString<256> path(input);
    auto ir = o->getString("kernel_ir");
    llvm::sys::path::append(path, ir ? ir->str() : name->str() + ".kernel.mlir");
    sources.push_back({name->str(), std::string(path)});
  }
  return sources;
}

/// The sources `--kernel` selects: that one, or all (`all`) or the only one.
std::vector<KernelSource> selectKernels(std::vector<KernelSource> sources, bool all) {
  std::string names;
  for (const KernelSource &s : sources)
    names += (names.empty() ? "" : ", ") + s.name;
  if (kernelName.empty()) {
    if (all || sources.size() == 1)
      return sources;
    die(inputPath + " has several kernels (" + names + "): choose one with --kernel");
  }
  for (const KernelSource &s : sources)
    if (s.name == kernelName || s.name.empty())
      return {{kernelName, s.path}};
  die(inputPath + " has no kernel '" + kernelName + "' (kernels: " + names + ")");
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

/// "X,Y,Z" of --grid and --block.
std::array<uint32_t, 3> parseTriple(const std::string &text, const char *option) {
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, ',');
  if (parts.size() != 3)
    die(std::string(option) + " takes X,Y,Z, not '" + text + "'");
  std::array<uint32_t, 3> v;
  for (int d = 0; d < 3; ++d)
    v[d] = uint32_t(parseInteger(parts[d].str(), option));
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
  if (!blockSpec.empty())
    config.block = parseTriple(blockSpec, "--block");
  if (!gridSpec.empty()) {
    config.grid = parseTriple(gridSpec, "--grid");
  } else if (!info.gridJson.empty()) {
    config.grid =
        orDie(evaluateGrid(info.gridJson, [&](llvm::StringRef n) { return scalarValue(run, n); }, smCountOpt));
  } else {
    die("kernel " + info.name + " has no grid expression: give --grid X,Y,Z");
  }
  RunStats stats = orDie(run.kernel->launch(config, args));
  llvm::outs() << "kernel " << info.name << " (" << info.target << "): grid " << config.grid[0] << "x" << config.grid[1]
               << "x" << config.grid[2] << ", " << stats.workgroups << " workgroups, " << stats.instructions
               << " instructions, " << stats.threadOps << " thread-ops in " << llvm::format("%.3f", stats.seconds)
               << " s (" << llvm::format("%.1f", stats.threadOps / std::max(stats.seconds, 1e-9) / 1e6)
               << " M thread-ops/s)\n";
  return stats;
}

struct GemmShape {
  int64_t m, n, k, pad;
};

std::vector<GemmShape> parseShapes(llvm::StringRef list) {
  std::vector<GemmShape> shapes;
  llvm::SmallVector<llvm::StringRef> items;
  list.split(items, ',', -1, false);
  for (llvm::StringRef item : items) {
    auto [dims, pad] = item.split('+');
    llvm::SmallVector<llvm::StringRef> mnk;
    dims.split(mnk, 'x');
    if (mnk.size() != 3)
      die("--shapes entry '" + item + "' is not MxNxK[+PAD]");
    shapes.push_back({parseInteger(mnk[0].str(), "M"), parseInteger(mnk[1].str(), "N"), parseInteger(mnk[2].str(), "K"),
                      pad.empty() ? 0 : parseInteger(pad.str(), "pad")});
  }
  return shapes;
}

/// --check: C = op(A) * op(B) of a wmma_gemm kernel against float64, with the CORRECTNESS.md
/// tolerance (2x the error of a same-precision implementation, plus 1e-5); every element of C
/// must be written and nothing past column N. Returns whether it passed.
bool checkWmmaGemm(Run &run, const GemmShape &shape) {
  const KernelInfo &info = run.kernel->info();
  llvm::json::Value attrs = orDie(llvm::json::parse(info.attributesJson));
  const llvm::json::Object *attrObject = attrs.getAsObject();
  bool transA = attrObject && attrObject->getBoolean("transpose_a").value_or(false);
  bool transB = attrObject && attrObject->getBoolean("transpose_b").value_or(false);
  const int64_t M = shape.m, N = shape.n, K = shape.k, pad = shape.pad;
  for (auto [name, value] : {std::pair{"M", M}, {"N", N}, {"K", K}})
    run.scalars[name] = std::to_string(value);
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

  // op(A) as M x K and op(B) as N x K, decoded once.
  std::vector<double> a(size_t(M * K)), bt(size_t(N * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      a[i * K + k] = A.get(size_t(transA ? k * lda + i : i * lda + k));
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k)
      bt[j * K + k] = B.get(size_t(transB ? j * ldb + k : k * ldb + j));
  auto at = [](const HostBuffer &h, int64_t r, int64_t c, int64_t ld) { return h.get(size_t(r * ld + c)); };
  double kernelErr = 0, naiveErr = 0;
  int64_t unwritten = 0, clobbered = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      float naive = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += a[i * K + k] * bt[j * K + k];
        naive = std::fma(float(a[i * K + k]), float(bt[j * K + k]), naive);
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
  return pass;
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
  // Outputs start poisoned; workspaces as the runtime's zeroed ones; inputs random.
  if (init.empty())
    init = p->role == tessera::ArgRole::Output      ? "nan"
           : p->role == tessera::ArgRole::Workspace ? "zero"
                                                    : "random";
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

/// --check over the selected kernels and shapes; the exit status.
int runChecks(const std::vector<KernelSource> &sources, const std::map<std::string, std::string> &args, uint64_t seed) {
  bool explicitShape = args.count("M") || args.count("N") || args.count("K");
  std::vector<GemmShape> shapes;
  if (explicitShape) {
    auto get = [&](const char *n) {
      auto it = args.find(n);
      if (it == args.end())
        die("--check with --arg M, N or K needs all three");
      return parseInteger(it->second, std::string("argument ") + n);
    };
    shapes.push_back({get("M"), get("N"), get("K"), padOpt});
  } else {
    shapes = parseShapes(shapesOpt);
  }
  int checked = 0, failed = 0;
  for (const KernelSource &source : sources) {
    Run run;
    run.kernel = orDie(Kernel::fromFile(source.path, LoadOptions{source.name, targetName}));
    if (run.kernel->info().directive != "wmma_gemm") {
      if (!kernelName.empty())
        die("--check needs a wmma_gemm kernel; " + run.kernel->info().name + " is '" + run.kernel->info().directive +
            "'");
      continue;
    }
    for (const GemmShape &shape : shapes) {
      run.scalars = args;
      run.buffers.clear();
      // Check i uses seed + i: --seed with the printed seed reproduces one check alone.
      run.seed = seed + uint64_t(checked);
      run.rng.seed(run.seed);
      ++checked;
      failed += !checkWmmaGemm(run, shape);
    }
  }
  if (checked == 0)
    die("--check found no wmma_gemm kernel in " + inputPath);
  llvm::outs() << checked << " checks, " << failed << " failed\n";
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "tessera-sim: run Tessera kernels on the CPU simulator\n");
  uint64_t seed = seedOpt.getNumOccurrences() ? uint64_t(seedOpt) : std::random_device{}();
  std::map<std::string, std::string> args;
  for (const std::string &spec : argSpecs) {
    auto [name, value] = llvm::StringRef(spec).split('=');
    if (!llvm::StringRef(spec).contains('='))
      die("--arg takes NAME=VALUE, not '" + spec + "'");
    args[name.str()] = value.str();
  }
  std::vector<KernelSource> sources = selectKernels(kernelSources(inputPath), /*all=*/checkGemm);
  if (checkGemm)
    return runChecks(sources, args, seed);

  Run run;
  run.seed = seed;
  run.rng.seed(seed);
  run.scalars = args;
  run.kernel = orDie(Kernel::fromFile(sources[0].path, LoadOptions{sources[0].name, targetName}));
  for (const std::string &spec : bufferSpecs)
    makeBuffer(run, spec);
  llvm::outs() << "seed " << run.seed << "\n";
  launch(run);
  report(run);
  return 0;
}

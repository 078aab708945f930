// The public simulator interface: loading kernels from IR text or files, launching them, evaluating grids.
#include "Program.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tessera::sim {

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// One docs/bundle.md grid expression: an integer, an argument name, or [op, e1, e2].
llvm::Expected<int64_t> evaluate(const llvm::json::Value &e,
                                 llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> arg) {
  if (auto i = e.getAsInteger())
    return *i;
  if (auto name = e.getAsString()) {
    if (auto v = arg(*name))
      return *v;
    return fail("grid expression names argument '" + *name + "', which has no integer value");
  }
  const llvm::json::Array *list = e.getAsArray();
  if (!list || list->size() != 3 || !(*list)[0].getAsString())
    return fail("malformed grid expression (expected an integer, a name or [op, e1, e2])");
  llvm::StringRef op = *(*list)[0].getAsString();
  llvm::Expected<int64_t> a = evaluate((*list)[1], arg);
  if (!a)
    return a.takeError();
  llvm::Expected<int64_t> b = evaluate((*list)[2], arg);
  if (!b)
    return b.takeError();
  if (op == "ceil_div") {
    if (*b <= 0 || *a < 0)
      return fail("grid ceil_div(" + llvm::Twine(*a) + ", " + llvm::Twine(*b) +
                  ") needs a non-negative dividend and a positive divisor");
    return *a / *b + (*a % *b != 0);
  }
  if (op == "mul")
    return *a * *b;
  if (op == "max")
    return std::max(*a, *b);
  return fail("unknown grid operator '" + op + "'");
}

} // namespace

Kernel::Kernel(std::unique_ptr<detail::Program> program) : program(std::move(program)) {}
Kernel::~Kernel() = default;

llvm::Expected<std::unique_ptr<Kernel>> Kernel::fromSource(llvm::StringRef source, llvm::StringRef bufferName,
                                                           const LoadOptions &options) {
  auto program = detail::decodeProgram(source, bufferName, options);
  if (!program)
    return program.takeError();
  return std::unique_ptr<Kernel>(new Kernel(std::move(*program)));
}

llvm::Expected<std::unique_ptr<Kernel>> Kernel::fromFile(llvm::StringRef path, const LoadOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return fail("cannot read kernel IR " + path + ": " + buffer.getError().message());
  return fromSource((*buffer)->getBuffer(), path, options);
}

const KernelInfo &Kernel::info() const { return program->info; }

llvm::Expected<RunStats> Kernel::launch(const LaunchConfig &config, llvm::ArrayRef<ArgValue> args) const {
  return detail::runProgram(*program, config, args);
}

llvm::Expected<std::array<uint32_t, 3>> evaluateGrid(llvm::StringRef gridJson,
                                                     llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> arg) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(gridJson);
  if (!json)
    return fail("grid is not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Array *dims = json->getAsArray();
  if (!dims || dims->size() != 3)
    return fail("grid must be a list of three expressions: " + gridJson);
  std::array<uint32_t, 3> grid;
  for (int d = 0; d < 3; ++d) {
    llvm::Expected<int64_t> v = evaluate((*dims)[d], arg);
    if (!v)
      return v.takeError();
    if (*v < 0 || *v > int64_t(UINT32_MAX))
      return fail("grid[" + llvm::Twine(d) + "] = " + llvm::Twine(*v) + " is outside [0, 2^32)");
    grid[d] = uint32_t(*v);
  }
  return grid;
}

} // namespace tessera::sim

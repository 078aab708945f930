// The public simulator interface: loading kernels from IR text or files, launching them, evaluating grids.
#include "Program.h"

#include "tessera/Support/GridExpr.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tessera::sim {

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Converts one docs/bundle.md grid expression (an integer, an argument name, "$sm_count" or
/// [op, e1, e2]) into the shared evaluator's form; argument values are looked up here, in order.
llvm::Expected<grid::Expr> convert(const llvm::json::Value &e,
                                   llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> arg,
                                   std::vector<int64_t> &argValues) {
  if (auto i = e.getAsInteger())
    return grid::Expr::constant(*i);
  if (auto name = e.getAsString()) {
    if (*name == grid::kSmCount)
      return grid::Expr::smCount();
    std::optional<int64_t> v = arg(*name);
    if (!v)
      return fail("grid expression names argument '" + *name + "', which has no integer value");
    argValues.push_back(*v);
    return grid::Expr::argument(int(argValues.size() - 1));
  }
  const llvm::json::Array *list = e.getAsArray();
  if (!list || list->size() != 3 || !(*list)[0].getAsString())
    return fail("malformed grid expression (expected an integer, a name or [op, e1, e2])");
  llvm::StringRef name = *(*list)[0].getAsString();
  std::optional<grid::Op> op = grid::parseOp(name);
  if (!op)
    return fail("unknown grid operator '" + name + "' (expected " + grid::opNames() + ")");
  llvm::Expected<grid::Expr> a = convert((*list)[1], arg, argValues);
  if (!a)
    return a.takeError();
  llvm::Expected<grid::Expr> b = convert((*list)[2], arg, argValues);
  if (!b)
    return b.takeError();
  return grid::Expr::apply(*op, std::move(*a), std::move(*b));
}

/// The values a converted expression sees: the arguments it named, in order, and the
/// simulated processor count.
class SimValues final : public grid::Values {
public:
  SimValues(const std::vector<int64_t> &args, uint32_t smCount) : args(args), count(smCount) {}
  int64_t arg(int index) const override { return args[index]; }
  std::optional<int64_t> smCount() const override { return count; }
  std::string smCountSource() const override { return "the simulator"; }

private:
  const std::vector<int64_t> &args;
  uint32_t count;
};

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
                                                     llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> arg,
                                                     uint32_t smCount) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(gridJson);
  if (!json)
    return fail("grid is not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Array *dims = json->getAsArray();
  if (!dims || dims->size() != 3)
    return fail("grid must be a list of three expressions: " + gridJson);
  std::array<uint32_t, 3> grid;
  for (int d = 0; d < 3; ++d) {
    std::vector<int64_t> argValues;
    llvm::Expected<grid::Expr> e = convert((*dims)[d], arg, argValues);
    if (!e)
      return e.takeError();
    std::string error;
    std::optional<int64_t> v = grid::evaluate(*e, SimValues(argValues, smCount), error);
    if (!v)
      return fail("grid[" + llvm::Twine(d) + "]: " + error);
    if (*v < 0 || *v > int64_t(UINT32_MAX))
      return fail("grid[" + llvm::Twine(d) + "] = " + llvm::Twine(*v) + " is outside [0, 2^32)");
    grid[d] = uint32_t(*v);
  }
  return grid;
}

} // namespace tessera::sim

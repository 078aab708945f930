// The simulator's grid expressions: the cases the runtime's tests run too, through llvm::json and the shared evaluator.
#include "tessera/Sim/Simulator.h"
#include "tessera/Support/GridExpr.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace {

using namespace tessera;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

/// grid[0] = `expr` over M and N, the others 1.
llvm::Expected<std::array<uint32_t, 3>> gridOf(const llvm::json::Value &expr, int64_t m, int64_t n, uint32_t smCount) {
  std::string text = llvm::formatv("[{0}, 1, 1]", expr).str();
  return sim::evaluateGrid(
      text,
      [&](llvm::StringRef name) -> std::optional<int64_t> {
        if (name == "M")
          return m;
        if (name == "N")
          return n;
        return std::nullopt;
      },
      smCount);
}

// unittests/data/grid-expressions.json, shared with the runtime's LaunchTest.
TEST(Grid, SharedGridExpressionCases) {
  auto file = llvm::MemoryBuffer::getFile(TESSERA_SHARED_TEST_DATA_DIR "/grid-expressions.json");
  ASSERT_TRUE(bool(file));
  llvm::Expected<llvm::json::Value> cases = llvm::json::parse((*file)->getBuffer());
  ASSERT_TRUE(bool(cases)) << llvm::toString(cases.takeError());
  std::set<std::string> used;
  for (const llvm::json::Value &value : *cases->getAsArray()) {
    const llvm::json::Object &c = *value.getAsObject();
    const llvm::json::Value &expr = *c.get("expr");
    SCOPED_TRACE(c.getString("what")->str() + ": " + llvm::formatv("{0}", expr).str());
    if (const llvm::json::Array *list = expr.getAsArray())
      used.insert((*list)[0].getAsString()->str());
    auto grid = gridOf(expr, *c.getInteger("M"), *c.getInteger("N"),
                       uint32_t(c.getInteger("sm_count").value_or(sim::kDefaultSmCount)));
    if (auto error = c.getString("error")) {
      ASSERT_FALSE(bool(grid));
      EXPECT_THAT(llvm::toString(grid.takeError()), ContainsRegex("^" + error->str()));
    } else {
      ASSERT_TRUE(bool(grid)) << llvm::toString(grid.takeError());
      EXPECT_EQ((*grid)[0], uint32_t(*c.getInteger("value")));
    }
  }
  for (grid::Op op : {grid::Op::CeilDiv, grid::Op::Div, grid::Op::Mul, grid::Op::Max, grid::Op::Min,
                     grid::Op::Add})
    EXPECT_TRUE(used.count(grid::opName(op))) << grid::opName(op) << " has no case";
}

TEST(Grid, TheSimulatorReportsASmallProcessorCountByDefault) {
  auto grid = sim::evaluateGrid(R"([["min", 1000, "$sm_count"], "$sm_count", 1])",
                                [](llvm::StringRef) { return std::nullopt; });
  ASSERT_TRUE(bool(grid)) << llvm::toString(grid.takeError());
  EXPECT_EQ(*grid, (std::array<uint32_t, 3>{sim::kDefaultSmCount, sim::kDefaultSmCount, 1}));
}

TEST(Grid, MalformedExpressionsAreNamed) {
  auto none = [](llvm::StringRef) -> std::optional<int64_t> { return std::nullopt; };
  auto unknown = sim::evaluateGrid(R"([["sub", 4, 1], 1, 1])", none);
  ASSERT_FALSE(bool(unknown));
  EXPECT_THAT(llvm::toString(unknown.takeError()),
              HasSubstr("unknown grid operator 'sub' (expected ceil_div, div, mul, max, min or add)"));
  auto missing = sim::evaluateGrid(R"(["M", 1, 1])", none);
  ASSERT_FALSE(bool(missing));
  EXPECT_THAT(llvm::toString(missing.takeError()), HasSubstr("argument 'M', which has no integer value"));
  auto shape = sim::evaluateGrid(R"([["mul", 4], 1, 1])", none);
  ASSERT_FALSE(bool(shape));
  EXPECT_THAT(llvm::toString(shape.takeError()), HasSubstr("malformed grid expression"));
}

} // namespace

// Runtime launch tests: argument checks by name and all at once, grid expressions, and the packed arguments drivers see.
#include "TestSupport.h"

#include "tessera/Support/GridExpr.h"

#include <cstring>
#include <fstream>
#include <set>

namespace tessera::runtime::test {
namespace {

/// A kernel whose arguments need padding in the C ABI: ptr, i32, ptr, f32, i64.
json mixedManifest(const char *vendor) {
  json m = std::string(vendor) == "amd" ? amdManifest() : nvidiaManifest();
  json &k = m["kernels"][0];
  k["args"] = json::parse(R"([
    {"name": "a", "type": "ptr", "dtype": "bf16", "role": "input"},
    {"name": "n", "type": "i32", "role": "size"},
    {"name": "b", "type": "ptr", "dtype": "bf16", "role": "output"},
    {"name": "scale", "type": "f32", "role": "scale"},
    {"name": "M", "type": "i64", "role": "size"}])");
  k["grid"] = json::parse(R"([["ceil_div", "M", 64], ["mul", "n", 2], ["max", "n", 1]])");
  k["block"] = {256, 1, 1};
  k["dynamic_lds_bytes"] = 1024;
  return m;
}

template <typename T> T argAt(const fake_launch *l, size_t offset) {
  T value;
  std::memcpy(&value, l->args + offset, sizeof value);
  return value;
}

/// The 64-bit word tessera_args_set_all takes for a pointer or an f32.
uint64_t word(const void *p) { return reinterpret_cast<uint64_t>(p); }
uint64_t word(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

/// The mixed kernel loaded on the parameter's backend, with an empty argument set.
class PackingTest : public RuntimeTest, public ::testing::WithParamInterface<const char *> {
protected:
  void SetUp() override {
    RuntimeTest::SetUp();
    ASSERT_NE(load(backend.c_str(), mixedManifest(backend == "cuda" ? "nvidia" : "amd")), nullptr);
    k = kernel(bundle);
    ASSERT_TESSERA_OK(tessera_args_create(k, &args));
  }
  void TearDown() override {
    tessera_args_destroy(args);
    RuntimeTest::TearDown();
  }
  std::string backend = GetParam();
  tessera_kernel *k = nullptr;
  tessera_args *args = nullptr;
  void *a = reinterpret_cast<void *>(0x1000), *b = reinterpret_cast<void *>(0x2000);
};

// Each backend must deliver the arguments in manifest order at their C offsets:
// a@0, n@8, b@16 (padded), scale@24, M@32 (padded), 40 bytes in all.
TEST_P(PackingTest, DriverSeesArgumentsInCLayout) {
  void *stream = reinterpret_cast<void *>(0x77);
  ASSERT_TESSERA_OK(tessera_args_set_i64(args, "M", 300));
  ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "b", b));
  ASSERT_TESSERA_OK(tessera_args_set_f32(args, "scale", 0.125f));
  ASSERT_TESSERA_OK(tessera_args_set_i32(args, "n", 3));
  ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "a", a));
  ASSERT_TESSERA_OK(tessera_launch(k, args, stream));
  ASSERT_EQ(fake_launch_count(), 1);
  const fake_launch *l = fake_launch_at(0);
  EXPECT_EQ(l->api, backend.substr(0, backend.find(':')));
  EXPECT_STREQ(l->entry, "gemm");
  EXPECT_EQ(l->args_size, 40u);
  EXPECT_EQ(argAt<void *>(l, 0), a);
  EXPECT_EQ(argAt<int32_t>(l, 8), 3);
  EXPECT_EQ(argAt<void *>(l, 16), b);
  EXPECT_EQ(argAt<float>(l, 24), 0.125f);
  EXPECT_EQ(argAt<int64_t>(l, 32), 300);
  EXPECT_EQ(std::vector<unsigned>(l->grid, l->grid + 3), (std::vector<unsigned>{5, 6, 3}));
  EXPECT_EQ(std::vector<unsigned>(l->block, l->block + 3), (std::vector<unsigned>{256, 1, 1}));
  EXPECT_EQ(l->shared_bytes, 1024u);
  EXPECT_EQ(l->stream, stream);
}

// One call in manifest order packs what the named setters pack; 4-byte arguments take the low
// 32 bits of their word (the high bits here are garbage that must not leak).
TEST_P(PackingTest, SetAllPacksLikeTheNamedSetters) {
  const uint64_t high = 0xdead000000000000u;
  uint64_t values[] = {word(a), high | 3u, word(b), high | word(-0.375f), uint64_t{1} << 32};
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 5));
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  ASSERT_EQ(fake_launch_count(), 1);
  const fake_launch *l = fake_launch_at(0);
  EXPECT_EQ(l->args_size, 40u);
  EXPECT_EQ(argAt<void *>(l, 0), a);
  EXPECT_EQ(argAt<int32_t>(l, 8), 3);
  EXPECT_EQ(argAt<uint32_t>(l, 12), 0u); // padding stays zero
  EXPECT_EQ(argAt<void *>(l, 16), b);
  EXPECT_EQ(argAt<float>(l, 24), -0.375f);
  EXPECT_EQ(argAt<int64_t>(l, 32), int64_t{1} << 32); // i64 uses all 64 bits
  EXPECT_EQ(std::vector<unsigned>(l->grid, l->grid + 3), (std::vector<unsigned>{1u << 26, 6, 3}));
}

INSTANTIATE_TEST_SUITE_P(Backends, PackingTest, ::testing::Values("cuda", "hip", "sim:gfx942"),
                         [](const ::testing::TestParamInfo<const char *> &info) {
                           return std::string(info.param).substr(0, 3) == "sim" ? "sim" : info.param;
                         });

/// Fixture with kernel `name` of `manifest` loaded on the fake CUDA driver and its arguments.
class KernelTest : public RuntimeTest {
protected:
  void loadKernel(const json &manifest, const char *name) {
    ASSERT_NE(load("cuda", manifest), nullptr);
    k = kernel(bundle, name);
    ASSERT_TESSERA_OK(tessera_args_create(k, &args));
  }
  void TearDown() override {
    if (args)
      tessera_args_destroy(args);
    RuntimeTest::TearDown();
  }
  tessera_kernel *k = nullptr;
  tessera_args *args = nullptr;
  alignas(16) char buffer[64];
};

/// Fixture with the gemm kernel (a, b, c, M, N, K, alpha).
class LaunchTest : public KernelTest {
protected:
  void SetUp() override {
    RuntimeTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(loadKernel(nvidiaManifest(), "gemm"));
  }
  /// Sets every argument; sizes M, N, K.
  void setAll(int64_t m, int64_t n, int64_t kk) {
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "a", buffer));
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "b", buffer));
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "c", buffer));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "M", m));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "N", n));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "K", kk));
    ASSERT_TESSERA_OK(tessera_args_set_f32(args, "alpha", 1.0f));
  }
};

TEST_F(LaunchTest, GridFollowsTheManifestExpressions) {
  setAll(65, 257, 32); // grid = [ceil_div(N,128), ceil_div(M,64), 1]
  uint32_t grid[3] = {};
  ASSERT_TESSERA_OK(tessera_launch_grid(k, args, grid));
  EXPECT_EQ(std::vector<uint32_t>(grid, grid + 3), (std::vector<uint32_t>{3, 2, 1}));
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  ASSERT_EQ(fake_launch_count(), 1);
  EXPECT_EQ(fake_launch_at(0)->grid[0], 3u);
  EXPECT_EQ(fake_launch_at(0)->grid[1], 2u);
  EXPECT_EQ(fake_launch_at(0)->block[0], 128u);
}

TEST_F(LaunchTest, EmptyGridIsASuccessfulNoOp) {
  setAll(0, 257, 32);
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  EXPECT_EQ(fake_launch_count(), 0);
  EXPECT_EQ(fake_calls("cuLaunchKernel"), 0);
}

TEST_F(LaunchTest, UnsetArgumentsAreListed) {
  ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "a", buffer));
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm: arguments not set: b, c, M, N, K, alpha$");
  EXPECT_EQ(fake_calls("cuLaunchKernel"), 0);
}

TEST_F(LaunchTest, WrongTypeNamesTheArgument) {
  EXPECT_TESSERA_ERROR(tessera_args_set_ptr(args, "M", buffer), TESSERA_ERROR_ARGUMENT,
                       "^argument 'M' of kernel gemm is i64, not ptr$");
  EXPECT_TESSERA_ERROR(tessera_args_set_i32(args, "K", 4), TESSERA_ERROR_ARGUMENT,
                       "^argument 'K' of kernel gemm is i64, not i32$");
  EXPECT_TESSERA_ERROR(tessera_args_set_i64(args, "alpha", 1), TESSERA_ERROR_ARGUMENT,
                       "^argument 'alpha' of kernel gemm is f32, not i64$");
}

TEST_F(LaunchTest, NullPointerIsRejected) {
  EXPECT_TESSERA_ERROR(tessera_args_set_ptr(args, "c", nullptr), TESSERA_ERROR_ARGUMENT,
                       "^argument 'c' of kernel gemm is a null pointer$");
}

TEST_F(LaunchTest, NegativeSizeIsRejected) {
  EXPECT_TESSERA_ERROR(tessera_args_set_i64(args, "N", -1), TESSERA_ERROR_ARGUMENT,
                       "^argument 'N' of kernel gemm is a size and must not be negative \\(got -1\\)$");
  // The rejected value is not kept.
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT, "arguments not set: .*N");
}

TEST_F(LaunchTest, UnknownNameListsTheArguments) {
  EXPECT_TESSERA_ERROR(tessera_args_set_i64(args, "lda", 4), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm has no argument 'lda' \\(arguments: a, b, c, M, N, K, alpha\\)$");
}

TEST_F(LaunchTest, EachArgumentIsSetOnceUntilReset) {
  ASSERT_TESSERA_OK(tessera_args_set_i64(args, "M", 1));
  EXPECT_TESSERA_ERROR(tessera_args_set_i64(args, "M", 2), TESSERA_ERROR_ARGUMENT,
                       "^argument 'M' of kernel gemm is already set$");
  ASSERT_TESSERA_OK(tessera_args_reset(args));
  setAll(64, 128, 32);
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
}

TEST_F(LaunchTest, DriverLaunchFailureNamesTheCall) {
  setAll(64, 128, 32);
  fake_fail("cuLaunchKernel", 701, 0);
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_DRIVER,
                       "^cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES \\(too many resources requested for launch\\)$");
}

TEST_F(LaunchTest, ArgsBelongToTheirKernel) {
  json manifest = nvidiaManifest();
  manifest["kernels"][0]["name"] = manifest["kernels"][0]["entry"] = "other";
  manifest["kernels"][0]["code_object"] = "other.ptx";
  TempDir otherDir;
  writeBundle(otherDir, manifest);
  tessera_bundle *other = nullptr;
  ASSERT_TESSERA_OK(tessera_bundle_load(device, otherDir.path().c_str(), &other));
  tessera_kernel *otherKernel = kernel(other, "other");
  setAll(64, 128, 32);
  EXPECT_TESSERA_ERROR(tessera_launch(otherKernel, args, nullptr), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_launch: args were created for kernel gemm, not other$");
  tessera_bundle_unload(other);
}

TEST_F(LaunchTest, SetAllTakesOneValuePerArgument) {
  uint64_t values[7] = {word(buffer), word(buffer), word(buffer), 65, 257, 32, word(1.0f)};
  EXPECT_TESSERA_ERROR(tessera_args_set_all(args, values, 6), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_args_set_all: kernel gemm has 7 arguments, got 6 values$");
  EXPECT_TESSERA_ERROR(tessera_args_set_all(args, nullptr, 7), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_args_set_all: values is NULL$");
  EXPECT_TESSERA_ERROR(tessera_args_set_all(nullptr, values, 7), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_args_set_all: args is NULL$");
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "arguments not set: a, b, c, M, N, K, alpha$"); // a refused call sets nothing
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 7));
  uint32_t grid[3] = {};
  ASSERT_TESSERA_OK(tessera_launch_grid(k, args, grid));
  EXPECT_EQ(std::vector<uint32_t>(grid, grid + 3), (std::vector<uint32_t>{3, 2, 1}));
}

// The setters' checks, with their messages, stopping at the first rejected argument.
TEST_F(LaunchTest, SetAllRejectsLikeTheSettersAndStops) {
  uint64_t nullC[7] = {word(buffer), word(buffer), 0, 64, 128, 32, word(1.0f)};
  EXPECT_TESSERA_ERROR(tessera_args_set_all(args, nullC, 7), TESSERA_ERROR_ARGUMENT,
                       "^argument 'c' of kernel gemm is a null pointer$");
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm: arguments not set: c, M, N, K, alpha$");
  ASSERT_TESSERA_OK(tessera_args_reset(args));
  uint64_t negativeN[7] = {word(buffer), word(buffer), word(buffer), 64, static_cast<uint64_t>(-1), 32, word(1.0f)};
  EXPECT_TESSERA_ERROR(tessera_args_set_all(args, negativeN, 7), TESSERA_ERROR_ARGUMENT,
                       "^argument 'N' of kernel gemm is a size and must not be negative \\(got -1\\)$");
  ASSERT_TESSERA_OK(tessera_args_reset(args));
  ASSERT_TESSERA_OK(tessera_args_set_i64(args, "K", 32));
  uint64_t fine[7] = {word(buffer), word(buffer), word(buffer), 64, 128, 32, word(1.0f)};
  EXPECT_TESSERA_ERROR(tessera_args_set_all(args, fine, 7), TESSERA_ERROR_ARGUMENT,
                       "^argument 'K' of kernel gemm is already set$");
  ASSERT_TESSERA_OK(tessera_args_reset(args));
  ASSERT_TESSERA_OK(tessera_args_set_all(args, fine, 7));
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  EXPECT_EQ(fake_launch_count(), 1);
}

/// Arguments of the gemm kernel of nvidiaManifest(): a, b, c at `buffer`, M = m, N = n, K = 1,
/// alpha = 1.
static tessera_args *gemmArgs(tessera_kernel *k, int64_t m, int64_t n, void *buffer) {
  tessera_args *args = nullptr;
  EXPECT_EQ(tessera_args_create(k, &args), TESSERA_SUCCESS);
  for (const char *p : {"a", "b", "c"})
    tessera_args_set_ptr(args, p, buffer);
  tessera_args_set_i64(args, "M", m);
  tessera_args_set_i64(args, "N", n);
  tessera_args_set_i64(args, "K", 1);
  tessera_args_set_f32(args, "alpha", 1);
  return args;
}

/// Grid expressions with operands that cannot give a grid.
class GridErrorTest : public RuntimeTest {
protected:
  tessera_status launchWithGrid(const json &grid, int64_t m, int64_t n) {
    json manifest = nvidiaManifest();
    manifest["kernels"][0]["args"][3]["role"] = "param"; // allow negative values through
    manifest["kernels"][0]["grid"] = grid;
    tessera_bundle *b = load("cuda", manifest);
    char buffer[4];
    tessera_args *args = gemmArgs(kernel(b), m, n, buffer);
    tessera_status s = tessera_launch(kernel(b), args, nullptr);
    tessera_args_destroy(args);
    return s;
  }
};

/// The gemm kernel with the launch precondition "M is a multiple of N x 4" and grid [M, 1, 1].
class DivisibleTest : public RuntimeTest {
protected:
  json manifest() {
    json m = nvidiaManifest();
    m["kernels"][0]["grid"] = json::parse(R"(["M", 1, 1])");
    m["kernels"][0]["divisible"] = json::parse(R"([{"arg": "M", "by": ["mul", "N", 4]}])");
    return m;
  }
  tessera_status launch(int64_t m, int64_t n) {
    tessera_kernel *k = kernel(load("cuda", manifest()));
    tessera_args *args = gemmArgs(k, m, n, buffer);
    tessera_status s = tessera_launch(k, args, nullptr);
    tessera_args_destroy(args);
    return s;
  }
  char buffer[4];
};

TEST_F(DivisibleTest, MultiplesLaunch) {
  EXPECT_EQ(launch(24, 3), TESSERA_SUCCESS);
  ASSERT_EQ(fake_launch_count(), 1);
  EXPECT_EQ(fake_launch_at(0)->grid[0], 24u);
  EXPECT_EQ(launch(0, 3), TESSERA_SUCCESS); // 0 is a multiple; an empty grid launches nothing
  EXPECT_EQ(fake_launch_count(), 1);
}

TEST_F(DivisibleTest, OtherValuesAreRefusedBeforeTheDriver) {
  EXPECT_TESSERA_ERROR(launch(20, 3), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm: 'M' = 20 must be a multiple of \\[\"mul\",\"N\",4\\] = 12$");
  EXPECT_TESSERA_ERROR(launch(5, 0), TESSERA_ERROR_ARGUMENT, "'M' = 5 must be a multiple of .* = 0$");
  EXPECT_EQ(fake_launch_count(), 0);
  // tessera_launch_grid checks the same.
  tessera_kernel *k = kernel(load("cuda", manifest()));
  tessera_args *args = gemmArgs(k, 20, 3, buffer);
  uint32_t grid[3];
  EXPECT_TESSERA_ERROR(tessera_launch_grid(k, args, grid), TESSERA_ERROR_ARGUMENT, "must be a multiple of");
  tessera_args_destroy(args);
}

TEST_F(DivisibleTest, ManifestErrors) {
  tessera_device *dev = open("cuda");
  tessera_bundle *b = nullptr;
  for (auto [rule, message] : {std::pair{R"([{"arg": "Q", "by": 4}])", "divisible\\[0\\].arg: 'Q' is not an argument of kernel gemm"},
                               std::pair{R"([{"arg": "a", "by": 4}])", "divisible\\[0\\].arg: argument 'a' is ptr"},
                               std::pair{R"([{"arg": "$sm_count", "by": 4}])", "divisible\\[0\\].arg: expected the name of an integer argument"},
                               std::pair{R"([{"arg": "M"}])", "divisible\\[0\\]: missing field 'by'"},
                               std::pair{R"([{"arg": "M", "by": ["mod", "N", 2]}])", "unknown operator 'mod'"}}) {
    json m = manifest();
    m["kernels"][0]["divisible"] = json::parse(rule);
    writeBundle(dir, m);
    EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST, message);
  }
}

/// The grid of a gemm kernel whose grid[0] is `expr`, for M and N, on a CUDA device reporting
/// `smCount` processors; the status of tessera_launch_grid.
tessera_status gridOf(const TempDir &dir, const json &expr, int64_t m, int64_t n, int smCount, uint32_t grid[3]) {
  json manifest = nvidiaManifest();
  manifest["kernels"][0]["args"][3]["role"] = "param"; // allow negative values of M and N through
  manifest["kernels"][0]["args"][4]["role"] = "param";
  manifest["kernels"][0]["grid"] = json::array({expr, 1, 1});
  writeBundle(dir, manifest);
  fake_set_processor_count(smCount);
  tessera_device *device = nullptr;
  tessera_bundle *bundle = nullptr;
  tessera_kernel *k = nullptr;
  tessera_args *args = nullptr;
  char buffer[4];
  tessera_status s = tessera_device_open("cuda", 0, &device);
  if (!s && !(s = tessera_bundle_load(device, dir.path().c_str(), &bundle)) && !(s = tessera_kernel_get(bundle, "gemm", &k))) {
    args = gemmArgs(k, m, n, buffer);
    s = tessera_launch_grid(k, args, grid);
  }
  if (args)
    tessera_args_destroy(args);
  if (bundle)
    tessera_bundle_unload(bundle);
  if (device)
    tessera_device_close(device);
  return s;
}

// unittests/data/grid-expressions.json: the cases the simulator's tests run too (GridTest.cpp),
// every operator of the shared table among them.
TEST_F(RuntimeTest, SharedGridExpressionCases) {
  std::ifstream in(TESSERA_SHARED_TEST_DATA_DIR "/grid-expressions.json");
  json cases = json::parse(in);
  std::set<std::string> used;
  for (const json &c : cases) {
    SCOPED_TRACE(c["what"].get<std::string>() + ": " + c["expr"].dump());
    if (c["expr"].is_array())
      used.insert(c["expr"][0].get<std::string>());
    uint32_t grid[3] = {};
    tessera_status s = gridOf(dir, c["expr"], c["M"], c["N"], c.value("sm_count", 132), grid);
    if (c.contains("error")) {
      EXPECT_EQ(s, TESSERA_ERROR_ARGUMENT) << tessera_last_error();
      EXPECT_THAT(tessera_last_error(), ::testing::ContainsRegex("^kernel gemm: " + c["error"].get<std::string>()));
    } else {
      ASSERT_EQ(s, TESSERA_SUCCESS) << tessera_last_error();
      EXPECT_EQ(grid[0], c["value"].get<uint32_t>());
    }
  }
  for (grid::Op op : {grid::Op::CeilDiv, grid::Op::Div, grid::Op::Mul, grid::Op::Max, grid::Op::Min,
                     grid::Op::Add})
    EXPECT_TRUE(used.count(grid::opName(op))) << grid::opName(op) << " has no case";
}

TEST_F(GridErrorTest, ProcessorCountTheBackendDoesNotReport) {
  json manifest = amdManifest();
  manifest["kernels"][0]["grid"] = json::parse(R"([["min", "M", "$sm_count"], 1, 1])");
  tessera_kernel *k = kernel(load("hip", manifest));
  char buffer[4];
  tessera_args *args = gemmArgs(k, 10, 1, buffer);
  uint32_t grid[3];
  EXPECT_TESSERA_ERROR(tessera_launch_grid(k, args, grid), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm: grid\\[0\\]: \\$sm_count is not reported by the 'hip' backend$");
  tessera_args_destroy(args);
}

TEST_F(GridErrorTest, DivisionByZero) {
  EXPECT_TESSERA_ERROR(launchWithGrid(json::parse(R"([["ceil_div", "M", "N"], 1, 1])"), 10, 0), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm: grid\\[0\\]: ceil_div\\(10, 0\\) needs a non-negative dividend and a positive divisor$");
}

TEST_F(GridErrorTest, Overflow) {
  EXPECT_TESSERA_ERROR(launchWithGrid(json::parse(R"([1, ["mul", "M", "N"], 1])"), int64_t(1) << 40, int64_t(1) << 40),
                       TESSERA_ERROR_ARGUMENT, "^kernel gemm: grid\\[1\\]: 1099511627776 \\* 1099511627776 overflows$");
}

TEST_F(GridErrorTest, NegativeOrHugeDimension) {
  EXPECT_TESSERA_ERROR(launchWithGrid(json::parse(R"([1, 1, "M"])"), -3, 1), TESSERA_ERROR_ARGUMENT,
                       "^kernel gemm: grid\\[2\\] = -3 is outside \\[0, 2\\^32\\)$");
}

TEST_F(GridErrorTest, NestedExpressions) {
  // max(ceil_div(M, 64) * 2, N): M = 100 -> 4, N = 3.
  EXPECT_EQ(launchWithGrid(json::parse(R"([["max", ["mul", ["ceil_div", "M", 64], 2], "N"], 1, 1])"), 100, 3),
            TESSERA_SUCCESS);
  ASSERT_EQ(fake_launch_count(), 1);
  EXPECT_EQ(fake_launch_at(0)->grid[0], 4u);
}

TEST_F(GridErrorTest, PersistentGridIsCappedAtTheProcessorCount) {
  // min(M * N, $sm_count): the fake device has 132 SMs.
  EXPECT_EQ(launchWithGrid(json::parse(R"([["min", ["mul", "M", "N"], "$sm_count"], 1, 1])"), 1000, 3),
            TESSERA_SUCCESS);
  EXPECT_EQ(launchWithGrid(json::parse(R"([["min", ["mul", "M", "N"], "$sm_count"], 1, 1])"), 10, 3),
            TESSERA_SUCCESS);
  ASSERT_EQ(fake_launch_count(), 2);
  EXPECT_EQ(fake_launch_at(0)->grid[0], 132u);
  EXPECT_EQ(fake_launch_at(1)->grid[0], 30u);
}

TEST_F(GridErrorTest, FloorDivisionSwitchesBetweenPersistentAndOnePerTile) {
  // min(M * 4, max($sm_count, div(N, 4097) * M * 4)): persistent for N <= 4096, else one per tile.
  json grid = json::parse(R"([["min", ["mul", "M", 4], ["max", "$sm_count", ["mul", ["div", "N", 4097],
                                                                             ["mul", "M", 4]]]], 1, 1])");
  EXPECT_EQ(launchWithGrid(grid, 1000, 4096), TESSERA_SUCCESS);
  EXPECT_EQ(launchWithGrid(grid, 1000, 8192), TESSERA_SUCCESS);
  ASSERT_EQ(fake_launch_count(), 2);
  EXPECT_EQ(fake_launch_at(0)->grid[0], 132u);
  EXPECT_EQ(fake_launch_at(1)->grid[0], 4000u);
}

/// A kernel copying x (rows x 64 f16, row stride x_stride) with TMA: the runtime encodes x_tma.
static json tmaManifest() {
  json m = nvidiaManifest("sm_90a");
  m["kernels"] = {json::parse(R"({
    "name": "tma_copy", "directive": "flash_attn", "entry": "tma_copy", "code_object": "tma_copy.ptx",
    "block": [384, 1, 1], "grid": [["ceil_div", "rows", 64], 1, 1], "dynamic_lds_bytes": 65536,
    "args": [
      {"name": "x", "type": "ptr", "dtype": "f16", "role": "input"},
      {"name": "rows", "type": "i64", "role": "size"},
      {"name": "x_stride", "type": "i64", "role": "stride"},
      {"name": "x_tma", "type": "tensor_map", "role": "tensor_map"}
    ],
    "tensor_maps": [{"arg": "x_tma", "tensor": "x", "dims": [64, "rows"], "strides": ["x_stride"],
                     "box": [64, 32], "swizzle": "128B"}]})")};
  return m;
}

class TmaLaunchTest : public KernelTest {
protected:
  void SetUp() override {
    RuntimeTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(loadKernel(tmaManifest(), "tma_copy"));
  }
  void set(void *x, int64_t rows, int64_t stride) {
    ASSERT_TESSERA_OK(tessera_args_reset(args));
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "x", x));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "rows", rows));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "x_stride", stride));
  }
};

TEST_F(TmaLaunchTest, EncodesTensorMapsAtLaunchIntoTheParameter) {
  set(buffer, 100, 72);
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  ASSERT_EQ(fake_calls("cuTensorMapEncodeTiled"), 1);
  const fake_tensor_map *t = fake_last_tensor_map();
  EXPECT_EQ(t->data_type, 6); // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
  EXPECT_EQ(t->rank, 2);
  EXPECT_EQ(t->address, buffer);
  EXPECT_EQ(t->dims[0], 64u);
  EXPECT_EQ(t->dims[1], 100u);
  EXPECT_EQ(t->strides[0], 144u); // bytes
  EXPECT_EQ(t->box[0], 64u);
  EXPECT_EQ(t->box[1], 32u);
  EXPECT_EQ(t->swizzle, 3); // 128B
  EXPECT_EQ(t->oob_fill, 0);
  // The 128-byte parameter sits 64-byte aligned after x, rows, x_stride and holds the map.
  ASSERT_EQ(fake_launch_count(), 1);
  const fake_launch *l = fake_launch_at(0);
  EXPECT_EQ(l->args_size, 64u + 128u);
  uint64_t words[2];
  std::memcpy(words, l->args + 64, sizeof words);
  EXPECT_EQ(words[0], reinterpret_cast<uint64_t>(buffer));
  EXPECT_EQ(words[1], 64u);
  EXPECT_EQ(l->shared_bytes, 65536u);
  EXPECT_EQ(fake_max_dynamic_shared(), 65536);
}

TEST_F(TmaLaunchTest, SameTensorReusesTheEncodedMap) {
  set(buffer, 100, 64);
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  EXPECT_EQ(fake_calls("cuTensorMapEncodeTiled"), 1);
  set(buffer, 101, 64);
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  EXPECT_EQ(fake_calls("cuTensorMapEncodeTiled"), 2);
  EXPECT_EQ(fake_last_tensor_map()->dims[1], 101u);
  EXPECT_EQ(fake_launch_count(), 3);
}

TEST_F(TmaLaunchTest, ExtentOneDimensionIgnoresItsStride) {
  set(buffer, 1, 3); // one row: its stride is never applied
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  EXPECT_EQ(fake_last_tensor_map()->strides[0] % 16, 0u);
}

TEST_F(TmaLaunchTest, StridesTmaCannotUseAreRejectedBeforeTheDriver) {
  set(buffer, 100, 65);
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "argument 'x' of kernel tma_copy: TMA needs positive strides that are multiples of 16 "
                       "bytes; 'x_stride' = 65 elements of 2 bytes");
  set(buffer + 8, 100, 64);
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "argument 'x' of kernel tma_copy: TMA needs a 16-byte aligned address");
  EXPECT_EQ(fake_calls("cuTensorMapEncodeTiled"), 0);
  EXPECT_EQ(fake_launch_count(), 0);
}

TEST_F(TmaLaunchTest, TensorMapsAreNotSetByCallers) {
  EXPECT_TESSERA_ERROR(tessera_args_set_ptr(args, "x_tma", buffer), TESSERA_ERROR_ARGUMENT,
                       "argument 'x_tma' of kernel tma_copy is a TMA tensor map the runtime encodes at launch");
  ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "x", buffer));
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "^kernel tma_copy: arguments not set: rows, x_stride$");
}

TEST_F(TmaLaunchTest, SetAllIgnoresTheTensorMapEntry) {
  uint64_t values[] = {word(buffer), 100, 72, 0xbad}; // x, rows, x_stride, x_tma (encoded at launch)
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 4));
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  ASSERT_EQ(fake_calls("cuTensorMapEncodeTiled"), 1);
  EXPECT_EQ(fake_last_tensor_map()->address, buffer);
  EXPECT_EQ(fake_last_tensor_map()->strides[0], 144u);
  ASSERT_EQ(fake_launch_count(), 1);
  uint64_t words[2];
  std::memcpy(words, fake_launch_at(0)->args + 64, sizeof words);
  EXPECT_EQ(words[0], reinterpret_cast<uint64_t>(buffer));
  EXPECT_EQ(words[1], 64u);
}

TEST_F(TmaLaunchTest, DriverFailureNamesTheCall) {
  fake_fail("cuTensorMapEncodeTiled", 1, 0);
  set(buffer, 100, 64);
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, nullptr), TESSERA_ERROR_DRIVER, "cuTensorMapEncodeTiled");
  EXPECT_EQ(fake_launch_count(), 0);
}

TEST_F(RuntimeTest, TensorMapManifestErrors) {
  json m = tmaManifest();
  m["kernels"][0].erase("tensor_maps");
  tessera_device *dev = open("cuda");
  writeBundle(dir, m);
  tessera_bundle *b = nullptr;
  EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST,
                       "tensor_map argument 'x_tma' has no entry in tensor_maps");
  m = tmaManifest();
  m["kernels"][0]["tensor_maps"][0]["tensor"] = "rows";
  writeBundle(dir, m);
  EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST,
                       "tensor_maps\\[0\\].tensor: 'rows' is not a ptr argument");
  m = tmaManifest();
  m["kernels"][0]["args"][3]["role"] = "input";
  writeBundle(dir, m);
  EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST,
                       "type tensor_map exactly when its role is tensor_map");
}

/// A dynamically scheduled kernel: the runtime passes tile_counter, one per stream.
static json tileCounterManifest() {
  json m = nvidiaManifest("sm_90a");
  m["kernels"] = {json::parse(R"({
    "name": "claim", "directive": "flash_attn", "entry": "claim", "code_object": "claim.ptx",
    "block": [384, 1, 1], "grid": [["min", "tiles", "$sm_count"], 1, 1],
    "args": [
      {"name": "x", "type": "ptr", "dtype": "f16", "role": "input"},
      {"name": "tiles", "type": "i64", "role": "size"},
      {"name": "tile_counter", "type": "ptr", "dtype": "i32", "role": "tile_counter"}
    ]})")};
  return m;
}

class TileCounterTest : public KernelTest {
protected:
  void SetUp() override {
    RuntimeTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(loadKernel(tileCounterManifest(), "claim"));
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "x", buffer));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "tiles", 1000));
  }
  /// The tile_counter the kernel of launch `i` received.
  uint64_t counterOf(int i) {
    uint64_t word = 0;
    std::memcpy(&word, fake_launch_at(i)->args + 16, sizeof word);
    return word;
  }
};

TEST_F(TileCounterTest, OneZeroedCounterPerStreamFromASlabReservedAtLoad) {
  // The kernel's load reserved one zeroed slab; launches make no allocation or synchronisation,
  // which a CUDA graph capture (on a stream new to the runtime) would refuse.
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), 1);
  EXPECT_EQ(fake_calls("cuMemsetD8_v2"), 1);
  int syncs = fake_calls("cuCtxSynchronize");
  auto *a = reinterpret_cast<void *>(0x1000), *b = reinterpret_cast<void *>(0x2000);
  for (void *stream : {a, a, b, a})
    ASSERT_TESSERA_OK(tessera_launch(k, args, stream));
  ASSERT_EQ(fake_launch_count(), 4);
  EXPECT_NE(counterOf(0), 0u);
  EXPECT_EQ(counterOf(1), counterOf(0));
  EXPECT_NE(counterOf(2), counterOf(0));
  EXPECT_EQ(counterOf(3), counterOf(0));
  EXPECT_EQ(counterOf(2) - counterOf(0), 128u); // a line each
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), 1);
  EXPECT_EQ(fake_calls("cuMemsetD8_v2"), 1); // zeroed once; each launch leaves it zero
  EXPECT_EQ(fake_calls("cuCtxSynchronize"), syncs);
  uint32_t words[2] = {1, 1};
  std::memcpy(words, reinterpret_cast<const void *>(counterOf(2)), sizeof words);
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(words[1], 0u);
  // The counters live as long as the device.
  EXPECT_EQ(fake_live_allocations(), 1);
  tessera_args_destroy(args);
  args = nullptr;
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  ASSERT_TESSERA_OK(tessera_device_close(device));
  device = nullptr;
  EXPECT_EQ(fake_live_allocations(), 0);
}

TEST_F(TileCounterTest, AnotherSlabOnceOneIsUsedUp) {
  // 64 counters a slab: the 65th stream's launch allocates the second, zeroed.
  std::set<uint64_t> seen;
  for (uintptr_t stream = 1; stream <= 65; ++stream) {
    ASSERT_TESSERA_OK(tessera_launch(k, args, reinterpret_cast<void *>(stream)));
    seen.insert(counterOf(int(stream) - 1));
  }
  EXPECT_EQ(seen.size(), 65u);
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), 2);
  EXPECT_EQ(fake_calls("cuMemsetD8_v2"), 2);
  EXPECT_EQ(fake_live_allocations(), 2);
  uint32_t words[2] = {1, 1};
  std::memcpy(words, reinterpret_cast<const void *>(counterOf(64)), sizeof words);
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(words[1], 0u);
}

TEST_F(TileCounterTest, IsNotSetByCallers) {
  EXPECT_TESSERA_ERROR(tessera_args_set_ptr(args, "tile_counter", buffer), TESSERA_ERROR_ARGUMENT,
                       "argument 'tile_counter' of kernel claim is the tile counter the runtime passes at launch");
  uint64_t values[] = {word(buffer), 1000, 0xbad}; // x, tiles, tile_counter (the runtime's)
  ASSERT_TESSERA_OK(tessera_args_reset(args));
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 3));
  ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
  ASSERT_EQ(fake_launch_count(), 1);
  EXPECT_NE(counterOf(0), 0xbadu);
  EXPECT_NE(counterOf(0), 0u);
}

TEST_F(RuntimeTest, TileCounterAllocationFailureFailsTheLoadNamingTheCall) {
  ASSERT_NE(load("cuda", tileCounterManifest()), nullptr);
  fake_fail("cuMemAlloc_v2", 2, 0); // CUDA_ERROR_OUT_OF_MEMORY
  tessera_kernel *k = nullptr;
  EXPECT_TESSERA_ERROR(tessera_kernel_get(bundle, "claim", &k), TESSERA_ERROR_DRIVER, "cuMemAlloc");
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 0);
  fake_fail("cuMemAlloc_v2", 0, 0);
  ASSERT_TESSERA_OK(tessera_kernel_get(bundle, "claim", &k)); // retried
  EXPECT_EQ(fake_live_allocations(), 1);
}

TEST_F(TileCounterTest, SlabAllocationFailureAtLaunchNamesTheCallAndLaunchesNothing) {
  for (uintptr_t stream = 1; stream <= 64; ++stream)
    ASSERT_TESSERA_OK(tessera_launch(k, args, reinterpret_cast<void *>(stream)));
  fake_fail("cuMemAlloc_v2", 2, 0);
  EXPECT_TESSERA_ERROR(tessera_launch(k, args, reinterpret_cast<void *>(65)), TESSERA_ERROR_DRIVER, "cuMemAlloc");
  EXPECT_EQ(fake_launch_count(), 64);
}

TEST_F(RuntimeTest, TileCounterManifestErrors) {
  tessera_device *dev = open("cuda");
  tessera_bundle *b = nullptr;
  json m = tileCounterManifest();
  m["kernels"][0]["args"][1]["role"] = "tile_counter";
  writeBundle(dir, m);
  EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST,
                       "args\\[1\\].role: a tile_counter argument has type ptr");
  m = tileCounterManifest();
  m["kernels"][0]["args"][0]["role"] = "tile_counter";
  writeBundle(dir, m);
  EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST,
                       "a kernel has at most one tile_counter argument");
}

TEST_F(RuntimeTest, BackendWithoutTmaSaysSo) {
  json m = tmaManifest();
  m["target"] = "gfx942";
  m["vendor"] = "amd";
  m["code_object_format"] = "hsaco";
  m["code_object_version"] = 5;
  m["kernels"][0]["code_object"] = "tma_copy.hsaco";
  ASSERT_NE(load("sim:gfx942", m), nullptr);
  tessera_kernel *kk = kernel(bundle, "tma_copy");
  tessera_args *a = nullptr;
  ASSERT_TESSERA_OK(tessera_args_create(kk, &a));
  alignas(16) char x[16];
  ASSERT_TESSERA_OK(tessera_args_set_ptr(a, "x", x));
  ASSERT_TESSERA_OK(tessera_args_set_i64(a, "rows", 4));
  ASSERT_TESSERA_OK(tessera_args_set_i64(a, "x_stride", 64));
  EXPECT_TESSERA_ERROR(tessera_launch(kk, a, nullptr), TESSERA_ERROR_ARGUMENT,
                       "kernel tma_copy copies 'x' with TMA, which the 'sim' backend does not have");
  tessera_args_destroy(a);
}

} // namespace
} // namespace tessera::runtime::test

// Kernel sets: one argument set by name for several kernels, and the per-stream workspaces the runtime allocates, zeroes and reuses.
#include "TestSupport.h"

#include <cstring>
#include <vector>

namespace tessera::runtime::test {
namespace {

/// Two kernels sharing the f32 workspace `acc` of N elements, zeroed: "partial" adds the M x N
/// input x into it, "finish" writes out = acc * scale. Set arguments: x, acc, N, M, out, scale.
json setManifest(const std::string &vendor = "nvidia") {
  json m = vendor == "amd" ? amdManifest() : nvidiaManifest();
  std::string ext = vendor == "amd" ? ".hsaco" : ".ptx";
  m["kernels"] = json::array();
  m["kernels"].push_back(json::parse(R"({
    "name": "partial", "directive": "colsum", "entry": "partial", "block": [64, 1, 1],
    "grid": [["ceil_div", "N", 64], 1, 1],
    "args": [
      {"name": "x", "type": "ptr", "dtype": "f32", "role": "input"},
      {"name": "acc", "type": "ptr", "dtype": "f32", "role": "workspace", "bytes": ["mul", "N", 4], "zero": true},
      {"name": "N", "type": "i64", "role": "size"},
      {"name": "M", "type": "i64", "role": "size"}]})"));
  m["kernels"].push_back(json::parse(R"({
    "name": "finish", "directive": "colsum", "entry": "finish", "block": [64, 1, 1],
    "grid": [["ceil_div", "N", 64], 1, 1],
    "args": [
      {"name": "acc", "type": "ptr", "dtype": "f32", "role": "workspace", "bytes": ["mul", "N", 4], "zero": true},
      {"name": "out", "type": "ptr", "dtype": "f32", "role": "output"},
      {"name": "N", "type": "i64", "role": "size"},
      {"name": "scale", "type": "f32", "role": "scale"}]})"));
  for (json &k : m["kernels"])
    k["code_object"] = k["name"].get<std::string>() + ext;
  m["kernel_sets"] = json::parse(R"([{"name": "colsum", "directive": "colsum", "kernels": ["partial", "finish"]}])");
  return m;
}

template <typename T> T argAt(const fake_launch *l, size_t offset) {
  T value;
  std::memcpy(&value, l->args + offset, sizeof value);
  return value;
}

void *const kStreamA = reinterpret_cast<void *>(0xa000);
void *const kStreamB = reinterpret_cast<void *>(0xb000);
void *const kCapture = reinterpret_cast<void *>(0xc000);

class KernelSetTest : public RuntimeTest {
protected:
  void SetUp() override {
    RuntimeTest::SetUp();
    loadSet("cuda", setManifest());
  }
  void TearDown() override {
    fake_set_capturing(nullptr);
    for (tessera_args *a : argSets)
      tessera_args_destroy(a);
    RuntimeTest::TearDown();
  }
  void loadSet(const char *backend, const json &manifest) {
    ASSERT_NE(load(backend, manifest), nullptr);
    ASSERT_TESSERA_OK(tessera_kernel_set_get(bundle, "colsum", &set));
  }
  /// Every argument callers set, for N columns.
  tessera_args *argsFor(int64_t n, int64_t m = 3) {
    tessera_args *args = nullptr;
    EXPECT_EQ(tessera_set_args_create(set, &args), TESSERA_SUCCESS) << tessera_last_error();
    argSets.push_back(args);
    EXPECT_EQ(tessera_args_set_ptr(args, "x", x), TESSERA_SUCCESS);
    EXPECT_EQ(tessera_args_set_ptr(args, "out", out), TESSERA_SUCCESS);
    EXPECT_EQ(tessera_args_set_i64(args, "N", n), TESSERA_SUCCESS);
    EXPECT_EQ(tessera_args_set_i64(args, "M", m), TESSERA_SUCCESS);
    EXPECT_EQ(tessera_args_set_f32(args, "scale", 0.5f), TESSERA_SUCCESS);
    return args;
  }
  /// The workspace launch `i` received: partial has it at offset 8, finish at 0.
  void *workspaceOf(int i) {
    const fake_launch *l = fake_launch_at(i);
    return argAt<void *>(l, std::strcmp(l->entry, "partial") == 0 ? 8 : 0);
  }

  tessera_kernel_set *set = nullptr;
  std::vector<tessera_args *> argSets;
  alignas(16) float x[16] = {}, out[16] = {};
};

TEST_F(KernelSetTest, LaunchesItsKernelsInOrderEachWithTheArgumentsItDeclares) {
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  ASSERT_EQ(fake_launch_count(), 2);
  const fake_launch *partial = fake_launch_at(0), *finish = fake_launch_at(1);
  EXPECT_STREQ(partial->entry, "partial");
  EXPECT_STREQ(finish->entry, "finish");
  for (const fake_launch *l : {partial, finish}) {
    EXPECT_EQ(l->grid[0], 2u); // ceil_div(100, 64)
    EXPECT_EQ(l->stream, kStreamA);
  }
  // partial(x, acc, N, M) and finish(acc, out, N, scale), each in its own C layout.
  EXPECT_EQ(argAt<void *>(partial, 0), static_cast<void *>(x));
  EXPECT_EQ(argAt<int64_t>(partial, 16), 100);
  EXPECT_EQ(argAt<int64_t>(partial, 24), 3);
  EXPECT_EQ(argAt<void *>(finish, 8), static_cast<void *>(out));
  EXPECT_EQ(argAt<int64_t>(finish, 16), 100);
  EXPECT_EQ(argAt<float>(finish, 24), 0.5f);
  // One workspace for both, zeroed on the stream before the first kernel.
  void *acc = workspaceOf(0);
  ASSERT_NE(acc, nullptr);
  EXPECT_EQ(workspaceOf(1), acc);
  ASSERT_EQ(fake_memset_count(), 1);
  const fake_memset *zero = fake_memset_at(0);
  EXPECT_EQ(zero->dst, acc);
  EXPECT_EQ(zero->value, 0);
  EXPECT_EQ(zero->bytes, 400u);
  EXPECT_EQ(zero->stream, kStreamA);
  EXPECT_EQ(zero->launches_before, 0);
}

TEST_F(KernelSetTest, WorkspaceIsAllocatedOnceReusedGrownAndNeverShrunk) {
  int allocs = fake_calls("cuMemAlloc_v2");
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  // The stream's workspace and the spare a new stream would take.
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 2);
  void *first = workspaceOf(0);
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(120), kStreamA)); // 480 bytes fit the 512 allocated
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 2);
  EXPECT_EQ(workspaceOf(2), first);
  EXPECT_EQ(workspaceOf(4), first);
  // 4000 bytes: a larger one (and a larger spare); the old one is kept, not freed.
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(1000), kStreamA));
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 4);
  EXPECT_EQ(fake_calls("cuMemFree_v2"), 0);
  void *grown = workspaceOf(6);
  EXPECT_NE(grown, first);
  EXPECT_EQ(fake_memset_at(3)->bytes, 4000u);
  // Smaller again: the grown one, zeroed over what this launch uses.
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(10), kStreamA));
  EXPECT_EQ(workspaceOf(8), grown);
  EXPECT_EQ(fake_memset_at(4)->bytes, 40u);
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 4);
  // Everything goes with the bundle.
  for (tessera_args *a : argSets)
    tessera_args_destroy(a);
  argSets.clear();
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  EXPECT_EQ(fake_calls("cuMemFree_v2"), 4);
  EXPECT_EQ(fake_live_allocations(), 0);
}

TEST_F(KernelSetTest, EveryLaunchZeroesTheWorkspace) {
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(16), kStreamA));
  auto *acc = static_cast<float *>(workspaceOf(0));
  for (int i = 0; i < 16; ++i)
    acc[i] = 7.0f; // what the first launch's kernels left there
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(16), kStreamA));
  EXPECT_EQ(workspaceOf(2), acc);
  ASSERT_EQ(fake_memset_count(), 2);
  EXPECT_EQ(fake_memset_at(1)->launches_before, 2);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(acc[i], 0.0f) << i;
}

TEST_F(RuntimeTest, AWorkspaceWithoutZeroIsNotZeroed) {
  json m = setManifest();
  for (json &k : m["kernels"])
    for (json &a : k["args"])
      if (a["role"] == "workspace")
        a.erase("zero");
  ASSERT_NE(load("cuda", m), nullptr);
  tessera_kernel_set *set = nullptr;
  ASSERT_TESSERA_OK(tessera_kernel_set_get(bundle, "colsum", &set));
  tessera_args *args = nullptr;
  ASSERT_TESSERA_OK(tessera_set_args_create(set, &args));
  float x[4];
  uint64_t values[6] = {reinterpret_cast<uint64_t>(x), 0, 4, 1, reinterpret_cast<uint64_t>(x), 0};
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 6));
  ASSERT_TESSERA_OK(tessera_launch_set(set, args, nullptr));
  EXPECT_EQ(fake_launch_count(), 2);
  EXPECT_EQ(fake_memset_count(), 0);
  tessera_args_destroy(args);
}

TEST_F(KernelSetTest, EachStreamHasItsOwn) {
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  int allocs = fake_calls("cuMemAlloc_v2");
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamB));
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  EXPECT_NE(workspaceOf(2), workspaceOf(0));
  EXPECT_EQ(workspaceOf(4), workspaceOf(0));
  // B took the spare; only the next spare was allocated.
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 1);
}

TEST_F(KernelSetTest, ANewStreamNeedingMoreThanTheSpareAllocatesAndTheSpareGrows) {
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA)); // A and the spare: 512 bytes
  int allocs = fake_calls("cuMemAlloc_v2");
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(1000), kStreamB));
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 2); // B's 4000 bytes, and a spare as large
  int grown = fake_calls("cuMemAlloc_v2");
  fake_set_capturing(kCapture); // the grown spare serves a capture of the larger call
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(1000), kCapture));
  fake_set_capturing(nullptr);
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), grown);
  for (tessera_args *a : argSets)
    tessera_args_destroy(a);
  argSets.clear();
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  EXPECT_EQ(fake_live_allocations(), 0); // the outgrown spare too
}

TEST_F(KernelSetTest, GraphCaptureAfterOneLaunchAllocatesAndSynchronisesNothing) {
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA)); // the warm-up, on another stream
  int allocs = fake_calls("cuMemAlloc_v2"), syncs = fake_calls("cuCtxSynchronize");
  fake_set_capturing(kCapture); // a stream the runtime has not seen, as torch's capture stream
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kCapture));
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(64), kCapture));
  fake_set_capturing(nullptr);
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs);
  EXPECT_EQ(fake_calls("cuCtxSynchronize"), syncs);
  ASSERT_EQ(fake_launch_count(), 6);
  EXPECT_EQ(fake_launch_at(2)->stream, kCapture);
  EXPECT_NE(workspaceOf(2), workspaceOf(0));
  EXPECT_EQ(workspaceOf(4), workspaceOf(2));
  EXPECT_EQ(fake_memset_at(1)->stream, kCapture);
  EXPECT_EQ(fake_memset_at(2)->bytes, 256u);
  // Outside the capture again, the spare the capture stream took is replaced.
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 1);
}

TEST_F(KernelSetTest, ACaptureNeedingMoreThanReservedFailsAndSaysWhatToDo) {
  fake_set_capturing(kCapture);
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, argsFor(100), kCapture), TESSERA_ERROR_ARGUMENT,
                       "^kernel set colsum: workspace 'acc' needs 400 bytes, but 0 are ready for this stream, which is "
                       "capturing a CUDA graph \\(nothing can be allocated during a capture\\): run the call once before "
                       "capturing, or reserve the workspaces first \\(tessera_kernel_set_reserve\\)$");
  fake_set_capturing(nullptr);
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  fake_set_capturing(kCapture);
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, argsFor(1000), kCapture), TESSERA_ERROR_ARGUMENT,
                       "workspace 'acc' needs 4000 bytes, but 512 are ready");
  EXPECT_EQ(fake_launch_count(), 2); // nothing of the failed launches reached the stream
  EXPECT_EQ(fake_memset_count(), 1);
  // Reserved outside the capture, the larger call captures.
  fake_set_capturing(nullptr);
  int allocs = fake_calls("cuMemAlloc_v2");
  ASSERT_TESSERA_OK(tessera_kernel_set_reserve(set, argsFor(1000), kStreamA));
  EXPECT_EQ(fake_launch_count(), 2);
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 2);
  fake_set_capturing(kCapture);
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(1000), kCapture));
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs + 2);
  EXPECT_EQ(fake_launch_count(), 4);
}

TEST_F(KernelSetTest, ReserveAlsoGrowsAStreamAnEarlierCaptureUsed) {
  // torch captures on a stream of its own, often the one an earlier capture used: reserving on
  // the current stream must grow that stream's workspaces too (found on the H200).
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kStreamA));
  fake_set_capturing(kCapture);
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(100), kCapture)); // takes the spare
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, argsFor(1000), kCapture), TESSERA_ERROR_ARGUMENT,
                       "workspace 'acc' needs 4000 bytes, but 512 are ready");
  fake_set_capturing(nullptr);
  ASSERT_TESSERA_OK(tessera_kernel_set_reserve(set, argsFor(1000), kStreamA));
  fake_set_capturing(kCapture);
  int allocs = fake_calls("cuMemAlloc_v2");
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(1000), kCapture));
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs);
  fake_set_capturing(nullptr);
}

TEST_F(KernelSetTest, WorkspacesAreNotSetByCallers) {
  tessera_args *args = nullptr;
  ASSERT_TESSERA_OK(tessera_set_args_create(set, &args));
  argSets.push_back(args);
  EXPECT_TESSERA_ERROR(tessera_args_set_ptr(args, "acc", x), TESSERA_ERROR_ARGUMENT,
                       "^argument 'acc' of kernel set colsum is a workspace the runtime allocates for the launch; it is not set$");
  EXPECT_TESSERA_ERROR(tessera_args_set_ptr(args, "y", x), TESSERA_ERROR_ARGUMENT,
                       "^kernel set colsum has no argument 'y' \\(arguments: x, acc, N, M, out, scale\\)$");
  EXPECT_TESSERA_ERROR(tessera_args_set_all(args, nullptr, 0), TESSERA_ERROR_INVALID_ARGUMENT,
                       "kernel set colsum has 6 arguments, got 0 values");
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "^kernel set colsum: arguments not set: x, N, M, out, scale$");
  uint64_t values[6] = {reinterpret_cast<uint64_t>(x), 0xbad, 8, 1, reinterpret_cast<uint64_t>(out), 0};
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 6));
  ASSERT_TESSERA_OK(tessera_launch_set(set, args, nullptr));
  EXPECT_NE(workspaceOf(0), reinterpret_cast<void *>(0xbad));
}

TEST_F(KernelSetTest, AKernelWithAWorkspaceIsLaunchedWithItsSet) {
  tessera_kernel *partial = kernel(bundle, "partial");
  tessera_args *args = nullptr;
  ASSERT_TESSERA_OK(tessera_args_create(partial, &args));
  argSets.push_back(args);
  ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "x", x));
  ASSERT_TESSERA_OK(tessera_args_set_i64(args, "N", 8));
  ASSERT_TESSERA_OK(tessera_args_set_i64(args, "M", 1));
  EXPECT_TESSERA_ERROR(tessera_launch(partial, args, nullptr), TESSERA_ERROR_ARGUMENT,
                       "^kernel partial shares the workspace 'acc' with kernel set 'colsum': launch the set \\(tessera_launch_set\\)$");
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, args, nullptr), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_launch_set: args were created for kernel partial, not colsum$");
  EXPECT_TESSERA_ERROR(tessera_launch(partial, argsFor(8), nullptr), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_launch: args were created for kernel set colsum, not partial$");
  EXPECT_EQ(fake_launch_count(), 0);
}

TEST_F(KernelSetTest, EmptyGridsLaunchNothing) {
  ASSERT_TESSERA_OK(tessera_launch_set(set, argsFor(0), kStreamA));
  EXPECT_EQ(fake_launch_count(), 0);
  EXPECT_EQ(fake_memset_count(), 0);
}

TEST_F(KernelSetTest, ErrorsComeBeforeAnyDeviceWork) {
  int allocs = fake_calls("cuMemAlloc_v2");
  tessera_args *args = argsFor(int64_t(1) << 62);
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, args, kStreamA), TESSERA_ERROR_ARGUMENT,
                       "^kernel partial: grid\\[0\\] = 72057594037927936 is outside \\[0, 2\\^32\\)$");
  EXPECT_EQ(fake_calls("cuMemAlloc_v2"), allocs);
  fake_fail("cuMemsetD8Async", 1, 0);
  EXPECT_TESSERA_ERROR(tessera_launch_set(set, argsFor(8), kStreamA), TESSERA_ERROR_DRIVER,
                       "^cuMemsetD8Async failed: CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(fake_launch_count(), 0);
}

TEST_F(KernelSetTest, TheBundleListsItsSetsWithTheirArguments) {
  int count = 0;
  ASSERT_TESSERA_OK(tessera_bundle_kernel_set_count(bundle, &count));
  EXPECT_EQ(count, 1);
  const char *name = nullptr, *text = nullptr;
  ASSERT_TESSERA_OK(tessera_bundle_kernel_set_name(bundle, 0, &name));
  EXPECT_STREQ(name, "colsum");
  ASSERT_TESSERA_OK(tessera_bundle_kernel_set_json(bundle, 0, &text));
  json entry = json::parse(text);
  EXPECT_EQ(entry["kernels"], json::parse(R"(["partial", "finish"])"));
  EXPECT_EQ(entry["directive"], "colsum");
  std::vector<std::string> names, roles;
  for (const json &a : entry["args"]) {
    names.push_back(a["name"]);
    roles.push_back(a["role"]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"x", "acc", "N", "M", "out", "scale"}));
  EXPECT_EQ(roles, (std::vector<std::string>{"input", "workspace", "size", "size", "output", "scale"}));
  ASSERT_TESSERA_OK(tessera_kernel_set_json(set, &text));
  EXPECT_EQ(json::parse(text), entry);
  EXPECT_TESSERA_ERROR(tessera_bundle_kernel_set_name(bundle, 1, &name), TESSERA_ERROR_INVALID_ARGUMENT,
                       "tessera_bundle_kernel_set_name: index 1 is outside \\[0, 1\\)");
  tessera_kernel_set *other = nullptr;
  EXPECT_TESSERA_ERROR(tessera_kernel_set_get(bundle, "colsums", &other), TESSERA_ERROR_KERNEL_NOT_FOUND,
                       "has no kernel set 'colsums' \\(kernel sets: colsum\\)$");
  // The kernels are manifest kernels too (their role names included).
  tessera_kernel *finish = kernel(bundle, "finish");
  const char *role = nullptr;
  ASSERT_TESSERA_OK(tessera_kernel_arg_role(finish, 0, &role));
  EXPECT_STREQ(role, "workspace");
}

/// The same launch on the other backends: hip (hipMemsetAsync) and a sim plugin.
class KernelSetBackendTest : public RuntimeTest, public ::testing::WithParamInterface<const char *> {};

TEST_P(KernelSetBackendTest, LaunchesAndZeroes) {
  std::string backend = GetParam();
  ASSERT_NE(load(backend.c_str(), setManifest(backend == "cuda" ? "nvidia" : "amd")), nullptr);
  tessera_kernel_set *set = nullptr;
  ASSERT_TESSERA_OK(tessera_kernel_set_get(bundle, "colsum", &set));
  tessera_args *args = nullptr;
  ASSERT_TESSERA_OK(tessera_set_args_create(set, &args));
  alignas(16) float x[4], out[4];
  uint64_t values[6] = {reinterpret_cast<uint64_t>(x), 0, 64, 1, reinterpret_cast<uint64_t>(out), 0};
  ASSERT_TESSERA_OK(tessera_args_set_all(args, values, 6));
  ASSERT_TESSERA_OK(tessera_launch_set(set, args, kStreamA));
  ASSERT_EQ(fake_launch_count(), 2);
  EXPECT_STREQ(fake_launch_at(0)->entry, "partial");
  EXPECT_STREQ(fake_launch_at(1)->entry, "finish");
  void *acc = argAt<void *>(fake_launch_at(0), 8);
  EXPECT_EQ(argAt<void *>(fake_launch_at(1), 0), acc);
  ASSERT_EQ(fake_memset_count(), 1);
  EXPECT_EQ(fake_memset_at(0)->dst, acc);
  EXPECT_EQ(fake_memset_at(0)->bytes, 256u);
  EXPECT_EQ(fake_memset_at(0)->stream, kStreamA);
  tessera_args_destroy(args);
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelSetBackendTest, ::testing::Values("cuda", "hip", "sim:gfx942"),
                         [](const auto &info) { return std::string(info.param).substr(0, 3) == "sim" ? "sim" : info.param; });

TEST_F(RuntimeTest, KernelSetManifestErrors) {
  tessera_device *dev = open("cuda");
  tessera_bundle *b = nullptr;
  auto expectError = [&](const json &m, const char *pattern) {
    writeBundle(dir, m);
    EXPECT_TESSERA_ERROR(tessera_bundle_load(dev, dir.path().c_str(), &b), TESSERA_ERROR_MANIFEST, pattern);
  };
  json m = setManifest();
  m["kernels"][1]["args"][0]["bytes"] = json::parse(R"(["mul", "N", 8])");
  expectError(m, "kernel_sets\\[0\\].kernels\\[1\\]: workspace 'acc' has bytes \\[\"mul\",\"N\",8\\], zero true in "
                 "kernel finish but bytes \\[\"mul\",\"N\",4\\], zero true in kernel partial$");
  m = setManifest();
  m["kernels"][1]["args"][0]["zero"] = false;
  expectError(m, "workspace 'acc' has bytes \\[\"mul\",\"N\",4\\], zero false in kernel finish");
  m = setManifest();
  m["kernels"][1]["args"][2]["type"] = "i32";
  expectError(m, "kernels\\[1\\]: argument 'N' is i32 in kernel finish but i64 in kernel partial$");
  m = setManifest();
  m["kernels"][1]["args"][0] = json::parse(R"({"name": "acc", "type": "ptr", "dtype": "f32", "role": "input"})");
  expectError(m, "argument 'acc' is input in kernel finish but workspace in kernel partial \\(a workspace is one in every kernel of its set\\)$");
  m = setManifest();
  m["kernels"][0]["args"][1].erase("bytes");
  expectError(m, "kernels\\[0\\].args\\[1\\]: missing field 'bytes'$");
  m = setManifest();
  m["kernels"][0]["args"][1]["bytes"] = json::parse(R"(["mul", "rows", 4])");
  expectError(m, "kernels\\[0\\].args\\[1\\].bytes\\[1\\]: 'rows' is not an argument of kernel partial$");
  m = setManifest();
  m["kernels"][0]["args"][1]["zero"] = 1;
  expectError(m, "kernels\\[0\\].args\\[1\\].zero: expected true or false, got 1$");
  m = setManifest();
  m["kernels"][0]["args"][1]["type"] = "i64";
  expectError(m, "kernels\\[0\\].args\\[1\\].role: a workspace argument has type ptr$");
  m = setManifest();
  m["kernels"][0]["args"][0]["bytes"] = 4;
  expectError(m, "kernels\\[0\\].args\\[0\\].bytes: only workspace arguments have 'bytes' and 'zero'$");
  m = setManifest();
  m.erase("kernel_sets");
  expectError(m, "kernels\\[0\\]: kernel 'partial' has the workspace 'acc' but is in no kernel set");
  m = setManifest();
  m["kernel_sets"][0]["kernels"] = json::parse(R"(["partial", "finish", "partial"])");
  expectError(m, "kernel_sets\\[0\\].kernels\\[2\\]: kernel 'partial' is listed twice$");
  m = setManifest();
  m["kernel_sets"].push_back(json::parse(R"({"name": "again", "kernels": ["finish"]})"));
  expectError(m, "kernel_sets\\[1\\].kernels\\[0\\]: kernel 'finish' is already in kernel set 'colsum'$");
  m = setManifest();
  m["kernel_sets"][0]["kernels"] = json::parse(R"(["partial", "final"])");
  expectError(m, "kernel_sets\\[0\\].kernels\\[1\\]: 'final' is not a kernel of the bundle$");
  m = setManifest();
  m["kernel_sets"][0]["kernels"] = json::array();
  expectError(m, "kernel_sets\\[0\\].kernels: a kernel set has at least one kernel$");
  EXPECT_EQ(b, nullptr);
  tessera_device_close(dev);
}

} // namespace
} // namespace tessera::runtime::test

// Runtime tests on a real NVIDIA GPU (skipped where no CUDA driver or device is found): JIT, launch, results.
#include "TestSupport.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tessera::runtime::test {
namespace {

// y[i] = alpha * x[i] + offset for i < n. Written for sm_80 so the driver JIT-compiles it
// forward for newer chips; the i32 and f32 arguments between 8-byte ones exercise packing.
const char *kAxpbPtx = R"(.version 8.0
.target sm_80
.address_size 64

.visible .entry axpb(
  .param .u64 axpb_param_y,
  .param .u64 axpb_param_x,
  .param .u32 axpb_param_n,
  .param .f32 axpb_param_alpha,
  .param .u64 axpb_param_offset
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<8>;

  ld.param.u64 %rd1, [axpb_param_y];
  ld.param.u64 %rd2, [axpb_param_x];
  ld.param.u32 %r1, [axpb_param_n];
  ld.param.f32 %f1, [axpb_param_alpha];
  ld.param.u64 %rd3, [axpb_param_offset];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.s32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd4, %rd2;
  cvta.to.global.u64 %rd5, %rd1;
  mul.wide.s32 %rd6, %r5, 4;
  add.s64 %rd7, %rd4, %rd6;
  ld.global.f32 %f2, [%rd7];
  cvt.rn.f32.s64 %f3, %rd3;
  fma.rn.f32 %f2, %f2, %f1, %f3;
  add.s64 %rd7, %rd5, %rd6;
  st.global.f32 [%rd7], %f2;
DONE:
  ret;
}
)";

json axpbManifest(const std::string &target) {
  return {{"format", "tessera-bundle"},
          {"version", 1},
          {"target", target},
          {"vendor", "nvidia"},
          {"code_object_format", "ptx"},
          {"kernels", json::parse(R"([{
             "name": "axpb", "entry": "axpb", "code_object": "axpb.ptx", "directive": "test",
             "block": [128, 1, 1], "grid": [["ceil_div", "n", 128], 1, 1],
             "args": [
               {"name": "y", "type": "ptr", "dtype": "f32", "role": "output"},
               {"name": "x", "type": "ptr", "dtype": "f32", "role": "input"},
               {"name": "n", "type": "i32", "role": "size"},
               {"name": "alpha", "type": "f32", "role": "scale"},
               {"name": "offset", "type": "i64", "role": "param"}]}])")}};
}

class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    tessera_status s = tessera_device_open("cuda", 0, &device);
    if (s == TESSERA_ERROR_BACKEND_UNAVAILABLE || s == TESSERA_ERROR_DRIVER)
      GTEST_SKIP() << "no CUDA device: " << tessera_last_error();
    ASSERT_EQ(s, TESSERA_SUCCESS) << tessera_last_error();
  }
  void TearDown() override {
    if (bundle)
      tessera_bundle_unload(bundle);
    if (device)
      tessera_device_close(device);
  }
  tessera_status loadAxpb(json manifest, const char *ptx = kAxpbPtx) {
    dir.write("manifest.json", manifest.dump());
    dir.write("axpb.ptx", ptx);
    return tessera_bundle_load(device, dir.path().c_str(), &bundle);
  }
  /// Runs axpb over n elements of random-ish input into a NaN-poisoned output; checks every element.
  void runAndCheck(int n) {
    tessera_kernel *k = nullptr;
    ASSERT_TESSERA_OK(tessera_kernel_get(bundle, "axpb", &k));
    std::vector<float> x(n + 7), y(n + 7);
    for (int i = 0; i < n + 7; ++i)
      x[i] = static_cast<float>((i * 37) % 101) / 8 - 6;
    size_t bytes = x.size() * sizeof(float);
    void *dx = nullptr, *dy = nullptr;
    ASSERT_TESSERA_OK(tessera_malloc(device, bytes, &dx));
    ASSERT_TESSERA_OK(tessera_malloc(device, bytes, &dy));
    ASSERT_TESSERA_OK(tessera_memcpy_htod(device, dx, x.data(), bytes));
    ASSERT_TESSERA_OK(tessera_memset(device, dy, 0xff, bytes)); // NaN
    tessera_args *args = nullptr;
    ASSERT_TESSERA_OK(tessera_args_create(k, &args));
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "y", dy));
    ASSERT_TESSERA_OK(tessera_args_set_ptr(args, "x", dx));
    ASSERT_TESSERA_OK(tessera_args_set_i32(args, "n", n));
    ASSERT_TESSERA_OK(tessera_args_set_f32(args, "alpha", 0.5f));
    ASSERT_TESSERA_OK(tessera_args_set_i64(args, "offset", -3));
    ASSERT_TESSERA_OK(tessera_launch(k, args, nullptr));
    ASSERT_TESSERA_OK(tessera_synchronize(device));
    ASSERT_TESSERA_OK(tessera_memcpy_dtoh(device, y.data(), dy, bytes));
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(y[i], 0.5f * x[i] - 3) << "element " << i;
    for (int i = n; i < n + 7; ++i)
      ASSERT_TRUE(std::isnan(y[i])) << "element " << i << " past n was written";
    tessera_args_destroy(args);
    tessera_free(device, dx);
    tessera_free(device, dy);
  }

  tessera_device *device = nullptr;
  tessera_bundle *bundle = nullptr;
  TempDir dir;
};

TEST_F(GpuTest, ArchIsAnSmName) {
  const char *arch = nullptr;
  ASSERT_TESSERA_OK(tessera_device_arch(device, &arch));
  EXPECT_THAT(arch, ::testing::MatchesRegex("sm_[0-9]+"));
}

TEST_F(GpuTest, OlderPtxIsJitCompiledAndComputesExactly) {
  ASSERT_TESSERA_OK(loadAxpb(axpbManifest("sm_80")));
  runAndCheck(1000); // not a multiple of the block
}

TEST_F(GpuTest, LargeDynamicSharedMemoryLaunches) {
  json manifest = axpbManifest("sm_80");
  manifest["kernels"][0]["dynamic_lds_bytes"] = 100 * 1024; // needs the per-function opt-in
  ASSERT_TESSERA_OK(loadAxpb(manifest));
  runAndCheck(257);
}

TEST_F(GpuTest, NewerTargetIsRefused) {
  const char *arch = nullptr;
  ASSERT_TESSERA_OK(tessera_device_arch(device, &arch));
  EXPECT_TESSERA_ERROR(loadAxpb(axpbManifest("sm_999")), TESSERA_ERROR_TARGET_MISMATCH,
                       std::string("^bundle target sm_999 does not match device ") + arch);
}

TEST_F(GpuTest, JitErrorCarriesTheLog) {
  std::string bad = kAxpbPtx;
  bad.replace(bad.find("fma.rn.f32"), 10, "fma.rn.q32");
  ASSERT_TESSERA_OK(loadAxpb(axpbManifest("sm_80"), bad.c_str())); // the JIT runs on the first get
  tessera_kernel *k = nullptr;
  EXPECT_TESSERA_ERROR(tessera_kernel_get(bundle, "axpb", &k), TESSERA_ERROR_DRIVER,
                       "^cuModuleLoadDataEx failed: CUDA_ERROR_[A-Z_]+ \\(.*\\)\nJIT log: .*ptxas");
}

} // namespace
} // namespace tessera::runtime::test

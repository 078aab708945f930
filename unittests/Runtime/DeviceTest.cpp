// Runtime device tests: opening each backend, driver libraries missing or failing, memory calls.
#include "TestSupport.h"

#include <thread>
#include <vector>

namespace tessera::runtime::test {
namespace {

using DeviceTest = RuntimeTest;

TEST_F(DeviceTest, CudaReportsComputeCapabilityAsArch) {
  fake_set_cuda_arch(8, 6);
  device = open("cuda");
  ASSERT_NE(device, nullptr);
  const char *arch = nullptr, *backend = nullptr;
  ASSERT_TESSERA_OK(tessera_device_arch(device, &arch));
  ASSERT_TESSERA_OK(tessera_device_backend(device, &backend));
  EXPECT_STREQ(arch, "sm_86");
  EXPECT_STREQ(backend, "cuda");
  // The primary context is what torch uses, so its pointers are valid in ours.
  EXPECT_EQ(fake_calls("cuDevicePrimaryCtxRetain"), 1);
}

TEST_F(DeviceTest, CloseReleasesPrimaryContext) {
  device = open("cuda");
  ASSERT_TESSERA_OK(tessera_device_close(device));
  device = nullptr;
  EXPECT_EQ(fake_calls("cuDevicePrimaryCtxRelease_v2"), 1);
}

TEST_F(DeviceTest, HipArchDropsFeatureSuffix) {
  fake_set_hip_arch("gfx90a:sramecc+:xnack-");
  device = open("hip");
  ASSERT_NE(device, nullptr);
  const char *arch = nullptr;
  ASSERT_TESSERA_OK(tessera_device_arch(device, &arch));
  EXPECT_STREQ(arch, "gfx90a");
}

TEST_F(DeviceTest, MissingCudaDriverIsBackendUnavailable) {
  setenv("TESSERA_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda", 0, &device), TESSERA_ERROR_BACKEND_UNAVAILABLE,
                       "^CUDA driver unavailable: cannot load /nonexistent/libcuda.so.1 \\(from TESSERA_CUDA_LIBRARY\\): ");
  EXPECT_EQ(device, nullptr);
}

TEST_F(DeviceTest, MissingHipRuntimeIsBackendUnavailable) {
  setenv("TESSERA_HIP_LIBRARY", "/nonexistent/libamdhip64.so", 1);
  EXPECT_TESSERA_ERROR(tessera_device_open("hip", 0, &device), TESSERA_ERROR_BACKEND_UNAVAILABLE,
                       "^HIP runtime unavailable: cannot load /nonexistent/libamdhip64.so");
}

TEST_F(DeviceTest, DriverWithoutAFunctionIsBackendUnavailable) {
  setenv("TESSERA_CUDA_LIBRARY", "libm.so.6", 1);
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda", 0, &device), TESSERA_ERROR_BACKEND_UNAVAILABLE,
                       "^libm.so.6 has no function cuInit$");
}

TEST_F(DeviceTest, FailingDriverCallIsNamed) {
  fake_fail("cuInit", 100, 0);
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda", 0, &device), TESSERA_ERROR_DRIVER,
                       "^cuInit failed: CUDA_ERROR_NO_DEVICE \\(no CUDA-capable device is detected\\)$");
}

TEST_F(DeviceTest, BadOrdinalIsADriverError) {
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda", 3, &device), TESSERA_ERROR_DRIVER,
                       "^cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE");
  EXPECT_TESSERA_ERROR(tessera_device_open("hip", 1, &device), TESSERA_ERROR_DRIVER,
                       "^hipSetDevice failed: hipErrorInvalidDevice");
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda", -1, &device), TESSERA_ERROR_INVALID_ARGUMENT,
                       "ordinal -1 is negative");
}

TEST_F(DeviceTest, UnknownBackendAndMisuseAreInvalidArguments) {
  EXPECT_TESSERA_ERROR(tessera_device_open("opencl", 0, &device), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^unknown backend 'opencl' \\(expected cuda, hip or sim\\[:<target>\\]\\)$");
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda:sm_90", 0, &device), TESSERA_ERROR_INVALID_ARGUMENT,
                       "backend cuda takes no options");
  EXPECT_TESSERA_ERROR(tessera_device_open("cuda", 0, nullptr), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_device_open: out is NULL$");
  const char *arch = nullptr;
  EXPECT_TESSERA_ERROR(tessera_device_arch(nullptr, &arch), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_device_arch: device is NULL$");
}

TEST_F(DeviceTest, SimWithoutPluginSaysWhereItLooked) {
  setenv("TESSERA_SIM_PLUGIN", "/nonexistent/libtessera_sim_plugin.so", 1);
  EXPECT_TESSERA_ERROR(tessera_device_open("sim", 0, &device), TESSERA_ERROR_BACKEND_UNAVAILABLE,
                       "^sim backend plugin unavailable: cannot load /nonexistent/libtessera_sim_plugin.so "
                       "\\(from TESSERA_SIM_PLUGIN\\)");
  // Without the variable it looks next to libtessera_runtime.so and says how to point elsewhere.
  unsetenv("TESSERA_SIM_PLUGIN");
  tessera_status s = tessera_device_open("sim", 0, &device);
  if (s != TESSERA_SUCCESS) {
    EXPECT_THAT(tessera_last_error(),
                ::testing::ContainsRegex("/libtessera_sim_plugin.so \\(set TESSERA_SIM_PLUGIN to its path\\)"));
  }
}

TEST_F(DeviceTest, SimPluginWithoutEntryPointIsRefused) {
  setenv("TESSERA_SIM_PLUGIN", "libm.so.6", 1);
  EXPECT_TESSERA_ERROR(tessera_device_open("sim", 0, &device), TESSERA_ERROR_BACKEND_UNAVAILABLE,
                       "^libm.so.6 has no function tessera_backend_plugin$");
}

TEST_F(DeviceTest, SimPluginOptionsNameTheTarget) {
  device = open("sim:gfx950");
  ASSERT_NE(device, nullptr);
  const char *arch = nullptr, *backend = nullptr;
  ASSERT_TESSERA_OK(tessera_device_arch(device, &arch));
  ASSERT_TESSERA_OK(tessera_device_backend(device, &backend));
  EXPECT_STREQ(arch, "gfx950");
  EXPECT_STREQ(backend, "sim");
}

TEST_F(DeviceTest, PluginFailuresReachLastError) {
  fake_fail("sim_open", 1, 0);
  EXPECT_TESSERA_ERROR(tessera_device_open("sim", 0, &device), TESSERA_ERROR_DRIVER,
                       "^sim_open failed: injected by the fake plugin$");
}

class MemoryTest : public RuntimeTest, public ::testing::WithParamInterface<const char *> {};

TEST_P(MemoryTest, RoundTripThroughDeviceMemory) {
  device = open(GetParam());
  ASSERT_NE(device, nullptr);
  std::vector<int> in = {3, 1, 4, 1, 5, 9, 2, 6}, out(8, 0);
  void *ptr = nullptr;
  ASSERT_TESSERA_OK(tessera_malloc(device, 32, &ptr));
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(fake_live_allocations(), 1);
  ASSERT_TESSERA_OK(tessera_memcpy_htod(device, ptr, in.data(), 32));
  ASSERT_TESSERA_OK(tessera_memset(device, ptr, 0, 4));
  ASSERT_TESSERA_OK(tessera_synchronize(device));
  ASSERT_TESSERA_OK(tessera_memcpy_dtoh(device, out.data(), ptr, 32));
  in[0] = 0;
  EXPECT_EQ(out, in);
  ASSERT_TESSERA_OK(tessera_free(device, ptr));
  EXPECT_EQ(fake_live_allocations(), 0);
}

TEST_P(MemoryTest, ZeroBytesNeedNoDriverCall) {
  device = open(GetParam());
  void *ptr = reinterpret_cast<void *>(1);
  ASSERT_TESSERA_OK(tessera_malloc(device, 0, &ptr));
  EXPECT_EQ(ptr, nullptr);
  ASSERT_TESSERA_OK(tessera_free(device, nullptr));
  ASSERT_TESSERA_OK(tessera_memcpy_htod(device, nullptr, nullptr, 0));
  EXPECT_EQ(fake_live_allocations(), 0);
}

// The driver's current context / device is per thread: a call from a new thread must work.
TEST_P(MemoryTest, WorksFromAnotherThread) {
  device = open(GetParam());
  tessera_status status = TESSERA_ERROR_INTERNAL;
  void *ptr = nullptr;
  std::thread([&] { status = tessera_malloc(device, 16, &ptr); }).join();
  EXPECT_EQ(status, TESSERA_SUCCESS) << tessera_last_error();
  EXPECT_EQ(tessera_free(device, ptr), TESSERA_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(Backends, MemoryTest, ::testing::Values("cuda", "hip", "sim"),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

TEST_F(DeviceTest, FailingCopyNamesTheCall) {
  device = open("cuda");
  void *ptr = nullptr;
  int value = 0;
  ASSERT_TESSERA_OK(tessera_malloc(device, 4, &ptr));
  fake_fail("cuMemcpyHtoD_v2", 1, 0);
  EXPECT_TESSERA_ERROR(tessera_memcpy_htod(device, ptr, &value, 4), TESSERA_ERROR_DRIVER,
                       "^cuMemcpyHtoD_v2 failed: CUDA_ERROR_INVALID_VALUE \\(invalid argument\\)$");
  ASSERT_TESSERA_OK(tessera_free(device, ptr));
}

TEST_F(DeviceTest, LastErrorIsPerThread) {
  EXPECT_EQ(tessera_device_open("opencl", 0, &device), TESSERA_ERROR_INVALID_ARGUMENT);
  std::string other = "unset";
  std::thread([&] { other = tessera_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_THAT(tessera_last_error(), ::testing::HasSubstr("opencl"));
}

TEST(StatusNameTest, NamesEveryStatus) {
  EXPECT_STREQ(tessera_status_name(TESSERA_SUCCESS), "TESSERA_SUCCESS");
  EXPECT_STREQ(tessera_status_name(TESSERA_ERROR_CODE_OBJECT_CORRUPT), "TESSERA_ERROR_CODE_OBJECT_CORRUPT");
  EXPECT_STREQ(tessera_status_name(TESSERA_ERROR_INTERNAL), "TESSERA_ERROR_INTERNAL");
  EXPECT_STREQ(tessera_status_name(99), "TESSERA_UNKNOWN_STATUS");
}

} // namespace
} // namespace tessera::runtime::test

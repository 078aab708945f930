// The sim backend end to end: libtessera_runtime loading the real libtessera_sim_plugin.so and running a bundle's
// kernel IR.
#include "tessera/Runtime/tessera_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace {
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

#define ASSERT_OK(call) ASSERT_EQ((call), TESSERA_SUCCESS) << tessera_last_error()

const char *kManifest = R"({
  "format": "tessera-bundle", "version": 1, "target": "gfx942", "vendor": "amd",
  "code_object_format": "hsaco", "compiler": "hand-written",
  "kernels": [{
    "name": "scale", "entry": "scale", "code_object": "scale.hsaco", "kernel_ir": "scale.kernel.mlir",
    "block": [64, 1, 1], "grid": [["ceil_div", "n", 64], 1, 1],
    "args": [{"name": "x", "type": "ptr", "dtype": "f32", "role": "input"},
             {"name": "y", "type": "ptr", "dtype": "f32", "role": "output"},
             {"name": "n", "type": "i64", "role": "size"},
             {"name": "s", "type": "f32", "role": "scale"}]}]
})";

// y[i] = s * x[i] for i < n.
const char *kScale = R"(module attributes {gpu.container_module} {
  gpu.module @scale [#rocdl.target<chip = "gfx942">] {
    gpu.func @scale(%x: memref<?xf32>, %y: memref<?xf32>, %n: index, %s: f32) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>, tessera.arg_names = ["x", "y", "n", "s"]} {
      %b = gpu.block_id x
      %t = gpu.thread_id x
      %c64 = arith.constant 64 : index
      %base = arith.muli %b, %c64 : index
      %i = arith.addi %base, %t : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %x[%i] : memref<?xf32>
        %w = arith.mulf %v, %s : f32
        memref.store %w, %y[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
}
)";

class SimBackend : public ::testing::Test {
protected:
  void SetUp() override {
    setenv("TESSERA_SIM_PLUGIN", TESSERA_SIM_PLUGIN_PATH, 1);
    dir = std::filesystem::temp_directory_path() / ("tessera-sim-plugin-" + std::to_string(getpid()) + "-" +
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir);
    write("manifest.json", kManifest);
    write("scale.kernel.mlir", kScale);
    ASSERT_OK(tessera_device_open("sim:gfx942", 0, &device));
  }
  void TearDown() override {
    if (bundle)
      tessera_bundle_unload(bundle);
    if (device)
      tessera_device_close(device);
    std::filesystem::remove_all(dir);
  }
  void write(const std::string &name, const std::string &text) { std::ofstream(dir / name) << text; }

  /// Launches scale with n elements on buffers x, y; returns the status.
  tessera_status launch(void *x, void *y, int64_t n, float s) {
    tessera_kernel *kernel = nullptr;
    tessera_args *args = nullptr;
    if (tessera_status st = tessera_kernel_get(bundle, "scale", &kernel))
      return st;
    tessera_args_create(kernel, &args);
    tessera_args_set_ptr(args, "x", x);
    tessera_args_set_ptr(args, "y", y);
    tessera_args_set_i64(args, "n", n);
    tessera_args_set_f32(args, "s", s);
    tessera_status st = tessera_launch(kernel, args, nullptr);
    tessera_args_destroy(args);
    return st;
  }

  std::filesystem::path dir;
  tessera_device *device = nullptr;
  tessera_bundle *bundle = nullptr;
};

TEST_F(SimBackend, RunsABundleKernelOnDeviceMemory) {
  const char *arch = nullptr, *backend = nullptr;
  ASSERT_OK(tessera_device_arch(device, &arch));
  ASSERT_OK(tessera_device_backend(device, &backend));
  EXPECT_STREQ(arch, "gfx942");
  EXPECT_STREQ(backend, "sim");
  ASSERT_OK(tessera_bundle_load(device, dir.c_str(), &bundle));
  const int n = 150; // three workgroups, the last one partly masked
  std::vector<float> x(n), y(n, -1);
  for (int i = 0; i < n; ++i)
    x[i] = float(i);
  void *dx = nullptr, *dy = nullptr;
  ASSERT_OK(tessera_malloc(device, n * 4, &dx));
  ASSERT_OK(tessera_malloc(device, n * 4, &dy));
  ASSERT_OK(tessera_memcpy_htod(device, dx, x.data(), n * 4));
  ASSERT_OK(launch(dx, dy, n, 2.5f));
  ASSERT_OK(tessera_synchronize(device));
  ASSERT_OK(tessera_memcpy_dtoh(device, y.data(), dy, n * 4));
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(y[i], 2.5f * i) << i;
  // A pointer into the middle of an allocation is bounded by that allocation.
  ASSERT_OK(launch(static_cast<float *>(dx) + 50, static_cast<float *>(dy) + 50, n - 50, 1.0f));
  EXPECT_EQ(tessera_launch(nullptr, nullptr, nullptr), TESSERA_ERROR_INVALID_ARGUMENT);
  ASSERT_OK(tessera_free(device, dx));
  ASSERT_OK(tessera_free(device, dy));
}

TEST_F(SimBackend, OutOfBoundsAccessFailsTheLaunchWithTheReport) {
  ASSERT_OK(tessera_bundle_load(device, dir.c_str(), &bundle));
  void *dx = nullptr, *dy = nullptr;
  ASSERT_OK(tessera_malloc(device, 100 * 4, &dx));
  ASSERT_OK(tessera_malloc(device, 100 * 4, &dy));
  EXPECT_EQ(launch(dx, dy, 101, 1.0f), TESSERA_ERROR_DRIVER);
  EXPECT_THAT(tessera_last_error(),
              ContainsRegex("^simulated launch of scale failed: .*scale.kernel.mlir:12:14: error: memref.load: "
                            "out-of-bounds load from x at index \\[100\\]: bytes \\[400, 404\\) of a global buffer of "
                            "400 bytes, in thread \\(36,0,0\\) of block \\(1,0,0\\)"));
  tessera_free(device, dx);
  tessera_free(device, dy);
}

TEST_F(SimBackend, HostPointersAndForeignRangesAreRejected) {
  ASSERT_OK(tessera_bundle_load(device, dir.c_str(), &bundle));
  std::vector<float> host(64);
  void *dy = nullptr;
  ASSERT_OK(tessera_malloc(device, 64 * 4, &dy));
  EXPECT_EQ(launch(host.data(), dy, 64, 1.0f), TESSERA_ERROR_ARGUMENT);
  EXPECT_THAT(tessera_last_error(), HasSubstr("argument 'x' of kernel scale"));
  EXPECT_THAT(tessera_last_error(), HasSubstr("does not point into a simulator allocation"));
  EXPECT_NE(tessera_memcpy_htod(device, dy, host.data(), 65 * 4), TESSERA_SUCCESS);
  EXPECT_THAT(tessera_last_error(), HasSubstr("is not inside one simulator allocation"));
  EXPECT_NE(tessera_free(device, host.data()), TESSERA_SUCCESS);
  tessera_free(device, dy);
}

// The plugin reads a kernel's IR when the runtime loads the kernel, on its first get. A failed
// load is not cached, so the next get reads the directory again.
TEST_F(SimBackend, KernelIrOutsideTheSupportedSetFailsTheFirstGet) {
  std::string ir = kScale;
  write("scale.kernel.mlir", ir.replace(ir.find("gpu.block_id x"), 14, "gpu.cluster_id x"));
  ASSERT_OK(tessera_bundle_load(device, dir.c_str(), &bundle));
  tessera_kernel *kernel = nullptr;
  EXPECT_EQ(tessera_kernel_get(bundle, "scale", &kernel), TESSERA_ERROR_CODE_OBJECT_CORRUPT);
  EXPECT_THAT(tessera_last_error(), ContainsRegex("cannot simulate kernel scale: .*scale.kernel.mlir:5:12: error: "
                                                  "unsupported operation 'gpu.cluster_id'"));
  std::filesystem::remove(dir / "scale.kernel.mlir");
  EXPECT_EQ(tessera_kernel_get(bundle, "scale", &kernel), TESSERA_ERROR_CODE_OBJECT_MISSING);
  EXPECT_THAT(tessera_last_error(), ContainsRegex("^kernel IR .*scale.kernel.mlir of kernel scale does not exist"));
  EXPECT_EQ(kernel, nullptr);
}

TEST_F(SimBackend, ManifestArgumentsMustMatchTheKernelIr) {
  std::string manifest = kManifest;
  manifest.replace(manifest.find(R"("type": "f32", "role": "scale")"), 13, R"("type": "i32")");
  write("manifest.json", manifest);
  ASSERT_OK(tessera_bundle_load(device, dir.c_str(), &bundle));
  tessera_kernel *kernel = nullptr;
  EXPECT_EQ(tessera_kernel_get(bundle, "scale", &kernel), TESSERA_ERROR_CODE_OBJECT_CORRUPT);
  EXPECT_THAT(tessera_last_error(), HasSubstr("manifest argument 3 is i32 but kernel IR parameter 's' is f32"));
}

TEST(SimBackendOpen, UnknownTargetsAreRefused) {
  setenv("TESSERA_SIM_PLUGIN", TESSERA_SIM_PLUGIN_PATH, 1);
  tessera_device *device = nullptr;
  EXPECT_EQ(tessera_device_open("sim:gfx9000", 0, &device), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(tessera_last_error(), HasSubstr("unknown simulator target 'gfx9000' (known: gfx942"));
}

} // namespace

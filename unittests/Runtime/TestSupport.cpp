// Runtime test support: the fixture that points the runtime at the fake drivers and plugin.
#include "TestSupport.h"

#include <cstdlib>

namespace tessera::runtime::test {

void RuntimeTest::SetUp() {
  setenv("TESSERA_CUDA_LIBRARY", TESSERA_FAKE_DRIVER, 1);
  setenv("TESSERA_HIP_LIBRARY", TESSERA_FAKE_DRIVER, 1);
  setenv("TESSERA_SIM_PLUGIN", TESSERA_FAKE_DRIVER, 1);
  fake_reset();
  ASSERT_FALSE(dir.path().empty());
}

void RuntimeTest::TearDown() {
  if (bundle) {
    EXPECT_EQ(tessera_bundle_unload(bundle), TESSERA_SUCCESS);
  }
  if (device) {
    EXPECT_EQ(tessera_device_close(device), TESSERA_SUCCESS);
  }
}

tessera_device *RuntimeTest::open(const char *backend) {
  tessera_device *d = nullptr;
  tessera_status s = tessera_device_open(backend, 0, &d);
  EXPECT_EQ(s, TESSERA_SUCCESS) << tessera_last_error();
  return d;
}

tessera_bundle *RuntimeTest::load(const char *backend, const json &manifest) {
  device = open(backend);
  writeBundle(dir, manifest);
  tessera_bundle *b = nullptr;
  tessera_status s = device ? tessera_bundle_load(device, dir.path().c_str(), &b) : TESSERA_ERROR_INVALID_ARGUMENT;
  EXPECT_EQ(s, TESSERA_SUCCESS) << tessera_last_error();
  return bundle = b;
}

tessera_kernel *RuntimeTest::kernel(tessera_bundle *b, const char *name) {
  tessera_kernel *k = nullptr;
  tessera_status s = b ? tessera_kernel_get(b, name, &k) : TESSERA_ERROR_INVALID_ARGUMENT;
  EXPECT_EQ(s, TESSERA_SUCCESS) << tessera_last_error();
  return k;
}

} // namespace tessera::runtime::test

// Runtime test support: temporary bundles written from JSON, and a fixture wired to the fake drivers.
#ifndef TESSERA_UNITTESTS_RUNTIME_TESTSUPPORT_H
#define TESSERA_UNITTESTS_RUNTIME_TESTSUPPORT_H

#include "FakeDriver.h"

#include "tessera/Runtime/tessera_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace tessera::runtime::test {

using nlohmann::json;

/// Asserts a call's status and that tessera_last_error() matches `pattern` (POSIX ERE).
#define EXPECT_TESSERA_ERROR(call, status, pattern)                                                    \
  do {                                                                                                 \
    tessera_status s_ = (call);                                                                        \
    EXPECT_EQ(s_, status) << tessera_status_name(s_) << ": " << tessera_last_error();                  \
    EXPECT_THAT(tessera_last_error(), ::testing::ContainsRegex(pattern));                              \
  } while (0)

#define ASSERT_TESSERA_OK(call)                                                                        \
  do {                                                                                                 \
    tessera_status s_ = (call);                                                                        \
    ASSERT_EQ(s_, TESSERA_SUCCESS) << tessera_status_name(s_) << ": " << tessera_last_error();         \
  } while (0)

/// A manifest for one NVIDIA kernel "gemm" (ptr a, b, c; i64 M, N, K; f32 alpha) on sm_90.
json nvidiaManifest(const std::string &target = "sm_90");
/// The same kernel for AMD (hsaco).
json amdManifest(const std::string &target = "gfx942");

/// PTX text declaring `.entry <entry>` with parameters matching the manifest kernel's args.
std::string ptxFor(const json &kernel);
/// The smallest hsaco the runtime accepts: an ELF64 AMDGPU header and one null section header.
std::string tinyHsaco();

/// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
public:
  TempDir();
  ~TempDir();
  const std::string &path() const { return path_; }
  /// Writes `content` to `name` inside the directory.
  void write(const std::string &name, const std::string &content) const;
  void remove(const std::string &name) const;

private:
  std::string path_;
};

/// Writes manifest.json and every kernel's code object (PTX from ptxFor, or tinyHsaco).
void writeBundle(const TempDir &dir, const json &manifest);

/// Points the runtime at the fake drivers and plugin and resets their records.
class RuntimeTest : public ::testing::Test {
protected:
  void SetUp() override;
  void TearDown() override;
  /// Opens `backend` device 0, failing the test if it cannot.
  tessera_device *open(const char *backend);
  /// Opens a device and loads `manifest` written to a temporary bundle.
  tessera_bundle *load(const char *backend, const json &manifest);
  tessera_kernel *kernel(tessera_bundle *bundle, const char *name = "gemm");

  TempDir dir;
  tessera_device *device = nullptr;
  tessera_bundle *bundle = nullptr;
};

} // namespace tessera::runtime::test

#endif // TESSERA_UNITTESTS_RUNTIME_TESTSUPPORT_H

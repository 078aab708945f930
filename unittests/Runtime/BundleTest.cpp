// Runtime bundle tests: manifest, target and code object checks at load, driver loads on first get, introspection.
#include "TestSupport.h"

#include <atomic>
#include <thread>
#include <vector>

namespace tessera::runtime::test {
namespace {

using BundleTest = RuntimeTest;

/// Loads the bundle in `dir` on `device`, expecting failure; returns the status.
tessera_status loadFails(tessera_device *device, const TempDir &dir) {
  tessera_bundle *b = nullptr;
  tessera_status s = tessera_bundle_load(device, dir.path().c_str(), &b);
  EXPECT_EQ(b, nullptr);
  if (b)
    tessera_bundle_unload(b);
  return s;
}

/// Gets `name` from `bundle`, expecting failure; returns the status.
tessera_status getFails(const tessera_bundle *bundle, const char *name) {
  tessera_kernel *k = nullptr;
  tessera_status s = tessera_kernel_get(bundle, name, &k);
  EXPECT_EQ(k, nullptr);
  return s;
}

/// nvidiaManifest() with a second kernel, gemm2.
json twoKernelManifest() {
  json manifest = nvidiaManifest();
  json second = manifest["kernels"][0];
  second["name"] = second["entry"] = "gemm2";
  second["code_object"] = "gemm2.ptx";
  manifest["kernels"].push_back(second);
  return manifest;
}

TEST_F(BundleTest, LoadsAndDescribesKernels) {
  ASSERT_NE(load("cuda", nvidiaManifest()), nullptr);
  const char *target = nullptr, *name = nullptr, *entry = nullptr;
  int count = 0;
  ASSERT_TESSERA_OK(tessera_bundle_target(bundle, &target));
  ASSERT_TESSERA_OK(tessera_bundle_kernel_count(bundle, &count));
  ASSERT_TESSERA_OK(tessera_bundle_kernel_name(bundle, 0, &name));
  ASSERT_TESSERA_OK(tessera_bundle_kernel_json(bundle, 0, &entry));
  EXPECT_STREQ(target, "sm_90");
  EXPECT_EQ(count, 1);
  EXPECT_STREQ(name, "gemm");
  EXPECT_EQ(json::parse(entry)["directive"], "wmma_gemm");
  EXPECT_TESSERA_ERROR(tessera_bundle_kernel_name(bundle, 1, &name), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_bundle_kernel_name: index 1 is outside \\[0, 1\\)$");
  EXPECT_TESSERA_ERROR(tessera_bundle_kernel_json(bundle, -1, &entry), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_bundle_kernel_json: index -1 is outside \\[0, 1\\)$");
  EXPECT_TESSERA_ERROR(tessera_bundle_kernel_json(bundle, 0, nullptr), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_bundle_kernel_json: out is NULL$");
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 0); // describing a bundle loads nothing

  tessera_kernel *k = kernel(bundle);
  int args = 0;
  ASSERT_TESSERA_OK(tessera_kernel_arg_count(k, &args));
  ASSERT_EQ(args, 7);
  const char *argName, *type, *dtype, *role;
  ASSERT_TESSERA_OK(tessera_kernel_arg_name(k, 2, &argName));
  ASSERT_TESSERA_OK(tessera_kernel_arg_type(k, 2, &type));
  ASSERT_TESSERA_OK(tessera_kernel_arg_dtype(k, 2, &dtype));
  ASSERT_TESSERA_OK(tessera_kernel_arg_role(k, 2, &role));
  EXPECT_STREQ(argName, "c");
  EXPECT_STREQ(type, "ptr");
  EXPECT_STREQ(dtype, "f32");
  EXPECT_STREQ(role, "output");
  ASSERT_TESSERA_OK(tessera_kernel_arg_type(k, 6, &type));
  ASSERT_TESSERA_OK(tessera_kernel_arg_dtype(k, 6, &dtype));
  ASSERT_TESSERA_OK(tessera_kernel_arg_role(k, 6, &role));
  EXPECT_STREQ(type, "f32");
  EXPECT_EQ(dtype, nullptr);
  EXPECT_STREQ(role, "scale");
  EXPECT_TESSERA_ERROR(tessera_kernel_arg_name(k, 7, &argName), TESSERA_ERROR_INVALID_ARGUMENT,
                       "^tessera_kernel_arg_name: argument index 7 is outside \\[0, 7\\) of kernel gemm$");

  // Directive attributes reach Python through the kernel's manifest entry.
  const char *text = nullptr;
  ASSERT_TESSERA_OK(tessera_kernel_json(k, &text));
  EXPECT_STREQ(text, entry);
  EXPECT_EQ(json::parse(text)["attributes"]["tile"]["n"], 128);
}

// A bundle's kernels cost nothing until used: the driver (a PTX JIT on CUDA) sees a kernel on
// its first get, and only then.
TEST_F(BundleTest, KernelIsLoadedOnItsFirstGet) {
  ASSERT_NE(load("cuda", nvidiaManifest()), nullptr);
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 0);
  tessera_kernel *first = kernel(bundle);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 1);
  EXPECT_EQ(fake_calls("cuModuleGetFunction"), 1);
  EXPECT_EQ(kernel(bundle), first);
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 1);
}

TEST_F(BundleTest, ConcurrentFirstGetsLoadOnce) {
  ASSERT_NE(load("cuda", nvidiaManifest()), nullptr);
  fake_set_jit_ms(50); // every thread asks while the first one's JIT runs
  std::atomic<bool> go{false};
  std::vector<tessera_kernel *> got(8, nullptr);
  std::vector<tessera_status> status(got.size(), TESSERA_ERROR_INTERNAL);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      while (!go)
        std::this_thread::yield();
      status[i] = tessera_kernel_get(bundle, "gemm", &got[i]);
    });
  go = true;
  for (std::thread &t : threads)
    t.join();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(status[i], TESSERA_SUCCESS) << "thread " << i;
    EXPECT_EQ(got[i], got[0]) << "thread " << i;
  }
  EXPECT_NE(got[0], nullptr);
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 1);
}

TEST_F(BundleTest, UnloadUnloadsOnlyTheKernelsGot) {
  ASSERT_NE(load("cuda", twoKernelManifest()), nullptr);
  ASSERT_NE(kernel(bundle, "gemm2"), nullptr);
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 1);
  EXPECT_EQ(fake_calls("cuModuleUnload"), 1);
}

// Python may collect the device before its bundles: the bundle keeps the device open.
TEST_F(BundleTest, BundleKeepsItsDeviceOpen) {
  ASSERT_NE(load("cuda", nvidiaManifest()), nullptr);
  ASSERT_NE(kernel(bundle), nullptr);
  ASSERT_TESSERA_OK(tessera_device_close(device));
  device = nullptr;
  EXPECT_EQ(fake_calls("cuDevicePrimaryCtxRelease_v2"), 0);
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  EXPECT_EQ(fake_calls("cuModuleUnload"), 1);
  EXPECT_EQ(fake_calls("cuDevicePrimaryCtxRelease_v2"), 1);
}

TEST_F(BundleTest, OtherChipIsRefusedBeforeAnyCodeIsLoaded) {
  device = open("cuda");
  writeBundle(dir, amdManifest("gfx942"));
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_TARGET_MISMATCH,
                       "^bundle target gfx942 does not match device sm_90 \\(");
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 0);
}

TEST_F(BundleTest, TargetIsCheckedBeforeCodeObjectsAreRead) {
  fake_set_cuda_arch(8, 0);
  device = open("cuda");
  writeBundle(dir, nvidiaManifest("sm_90"));
  dir.remove("gemm.ptx");
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_TARGET_MISMATCH,
                       "^bundle target sm_90 does not match device sm_80");
}

TEST_F(BundleTest, AmdDeviceRefusesAnotherAmdChip) {
  fake_set_hip_arch("gfx1151");
  device = open("hip");
  writeBundle(dir, amdManifest("gfx1100"));
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_TARGET_MISMATCH,
                       "^bundle target gfx1100 does not match device gfx1151");
  EXPECT_EQ(fake_calls("hipModuleLoadData"), 0);
}

TEST_F(BundleTest, CodeObjectFormatMustSuitTheBackend) {
  fake_set_hip_arch("sm_90"); // a HIP runtime cannot report this; it isolates the format check
  device = open("hip");
  writeBundle(dir, nvidiaManifest("sm_90"));
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_TARGET_MISMATCH,
                       "^bundle code objects are ptx but the hip backend loads hsaco");
}

struct TargetCase {
  int major, minor;
  const char *target;
  bool runs;
};

class TargetCompatibilityTest : public RuntimeTest, public ::testing::WithParamInterface<TargetCase> {};

// NVIDIA: PTX is JIT-compiled forward; "a" targets need that exact chip, "f" the same major.
TEST_P(TargetCompatibilityTest, PtxBundleOnDevice) {
  const TargetCase &c = GetParam();
  fake_set_cuda_arch(c.major, c.minor);
  device = open("cuda");
  writeBundle(dir, nvidiaManifest(c.target));
  tessera_bundle *b = nullptr;
  tessera_status s = tessera_bundle_load(device, dir.path().c_str(), &b);
  EXPECT_EQ(s, c.runs ? TESSERA_SUCCESS : TESSERA_ERROR_TARGET_MISMATCH) << tessera_last_error();
  if (b)
    tessera_bundle_unload(b);
}

INSTANTIATE_TEST_SUITE_P(Nvidia, TargetCompatibilityTest,
                         ::testing::Values(TargetCase{9, 0, "sm_90", true}, TargetCase{9, 0, "sm_90a", true},
                                           TargetCase{9, 0, "sm_80", true}, TargetCase{9, 0, "sm_89", true},
                                           TargetCase{9, 0, "sm_100", false}, TargetCase{8, 0, "sm_86", false},
                                           TargetCase{10, 0, "sm_90a", false}, TargetCase{10, 0, "sm_90", true},
                                           TargetCase{10, 3, "sm_100f", true}, TargetCase{12, 0, "sm_100f", false},
                                           TargetCase{9, 0, "gfx942", false}),
                         [](const ::testing::TestParamInfo<TargetCase> &info) {
                           const TargetCase &c = info.param;
                           return std::string(c.target) + "_on_sm_" + std::to_string(c.major * 10 + c.minor);
                         });

TEST_F(BundleTest, MissingManifest) {
  device = open("cuda");
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_MANIFEST,
                       "/manifest.json: cannot read: No such file or directory$");
}

TEST_F(BundleTest, ManifestThatIsNotJson) {
  device = open("cuda");
  dir.write("manifest.json", "{\"format\": \"tessera-bundle\", ");
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_MANIFEST, "/manifest.json: not valid JSON: .*parse error");
}

struct ManifestCase {
  const char *name;
  void (*edit)(json &);
  const char *pattern;
};

class ManifestTest : public RuntimeTest, public ::testing::WithParamInterface<ManifestCase> {};

TEST_P(ManifestTest, RejectsWithWhereAndWhat) {
  json manifest = nvidiaManifest();
  GetParam().edit(manifest);
  device = open("cuda");
  writeBundle(dir, nvidiaManifest()); // code objects
  dir.write("manifest.json", manifest.dump());
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_MANIFEST, std::string("/manifest.json: ") + GetParam().pattern);
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ManifestTest,
    ::testing::Values(
        ManifestCase{"NotAnObject", [](json &m) { m = json::array(); }, ": expected an object, got \\[\\]$"},
        ManifestCase{"Format", [](json &m) { m["format"] = "zip"; }, "format: 'zip' is not 'tessera-bundle'$"},
        ManifestCase{"Version", [](json &m) { m["version"] = 2; },
                     "version: unsupported version 2 \\(this runtime reads version 1\\)$"},
        ManifestCase{"MissingTarget", [](json &m) { m.erase("target"); }, "manifest: missing field 'target'$"},
        ManifestCase{"Vendor", [](json &m) { m["vendor"] = "intel"; }, "vendor: 'intel' is not one of amd, nvidia$"},
        ManifestCase{"VendorFormat", [](json &m) { m["code_object_format"] = "hsaco"; },
                     "code_object_format: hsaco is not a code object of vendor nvidia$"},
        ManifestCase{"MissingEntry", [](json &m) { m["kernels"][0].erase("entry"); },
                     "kernels\\[0\\]: missing field 'entry'$"},
        ManifestCase{"EmptyName", [](json &m) { m["kernels"][0]["name"] = ""; },
                     "kernels\\[0\\].name: expected a non-empty string, got \"\"$"},
        ManifestCase{"DuplicateKernel", [](json &m) { m["kernels"].push_back(m["kernels"][0]); },
                     "kernels\\[1\\]: duplicate kernel name 'gemm'$"},
        ManifestCase{"EscapingPath", [](json &m) { m["kernels"][0]["code_object"] = "../gemm.ptx"; },
                     "kernels\\[0\\].code_object: '../gemm.ptx' must be a path inside the bundle directory$"},
        ManifestCase{"BlockSize", [](json &m) { m["kernels"][0]["block"] = {128, 1}; },
                     "kernels\\[0\\].block: expected an array of 3, got \\[128,1\\]$"},
        ManifestCase{"BlockZero", [](json &m) { m["kernels"][0]["block"][1] = 0; },
                     "kernels\\[0\\].block\\[1\\]: 0 is outside \\[1, 65535\\]$"},
        ManifestCase{"ArgType", [](json &m) { m["kernels"][0]["args"][3]["type"] = "u64"; },
                     "kernels\\[0\\].args\\[3\\].type: 'u64' is not one of ptr, i32, i64, f32, tensor_map$"},
        ManifestCase{"ArgRole", [](json &m) { m["kernels"][0]["args"][3]["role"] = "shape"; },
                     "kernels\\[0\\].args\\[3\\].role: 'shape' is not one of input, output"},
        ManifestCase{"DuplicateArg", [](json &m) { m["kernels"][0]["args"][1]["name"] = "a"; },
                     "kernels\\[0\\].args\\[1\\]: duplicate argument 'a'$"},
        ManifestCase{"GridOperator", [](json &m) { m["kernels"][0]["grid"][0] = {"sub", "N", 128}; },
                     "kernels\\[0\\].grid\\[0\\]: unknown operator 'sub' \\(expected ceil_div, div, mul, max, min or add\\)$"},
        ManifestCase{"GridUnknownArg", [](json &m) { m["kernels"][0]["grid"][1] = {"mul", "B", 2}; },
                     "kernels\\[0\\].grid\\[1\\]\\[1\\]: 'B' is not an argument of kernel gemm$"},
        ManifestCase{"GridPointerArg", [](json &m) { m["kernels"][0]["grid"][2] = "a"; },
                     "kernels\\[0\\].grid\\[2\\]: argument 'a' is ptr; grid expressions use i32 or i64 arguments$"},
        ManifestCase{"GridShape", [](json &m) { m["kernels"][0]["grid"][2] = {"max", 1}; },
                     "kernels\\[0\\].grid\\[2\\]: expected an integer, an argument name or \\[op, e1, e2\\]"},
        ManifestCase{"GridNegative", [](json &m) { m["kernels"][0]["grid"][2] = -1; },
                     "kernels\\[0\\].grid\\[2\\]: -1 is outside \\[0, 4294967295\\]$"}),
    [](const ::testing::TestParamInfo<ManifestCase> &info) { return std::string(info.param.name); });

TEST_F(BundleTest, MissingCodeObject) {
  device = open("cuda");
  writeBundle(dir, nvidiaManifest());
  dir.remove("gemm.ptx");
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_CODE_OBJECT_MISSING,
                       "^code object .*/gemm.ptx cannot be read: No such file or directory$");
}

struct CorruptCase {
  const char *name;
  const char *backend;
  std::string (*content)();
  const char *pattern;
};

class CorruptCodeObjectTest : public RuntimeTest, public ::testing::WithParamInterface<CorruptCase> {};

std::string truncatedHsaco() { return tinyHsaco().substr(0, 100); }
std::string hsacoWithMachine(uint16_t machine) {
  std::string elf = tinyHsaco();
  elf[18] = static_cast<char>(machine & 0xff), elf[19] = static_cast<char>(machine >> 8);
  return elf;
}
std::string hsacoWithSection(uint64_t offset, uint64_t size) {
  std::string elf = tinyHsaco();
  elf[64 + 4] = 1; // SHT_PROGBITS
  for (int i = 0; i < 8; ++i)
    elf[64 + 24 + i] = static_cast<char>(offset >> (8 * i)), elf[64 + 32 + i] = static_cast<char>(size >> (8 * i));
  return elf;
}

// Corrupt images are refused by the runtime, before a driver sees them, each with its defect.
TEST_P(CorruptCodeObjectTest, IsRefusedBeforeTheDriver) {
  const CorruptCase &c = GetParam();
  bool hip = std::string(c.backend) == "hip";
  device = open(c.backend);
  writeBundle(dir, hip ? amdManifest() : nvidiaManifest());
  dir.write(hip ? "gemm.hsaco" : "gemm.ptx", c.content());
  EXPECT_TESSERA_ERROR(loadFails(device, dir), TESSERA_ERROR_CODE_OBJECT_CORRUPT,
                       std::string("^code object .*/gemm.") + (hip ? "hsaco " : "ptx ") + c.pattern);
  EXPECT_EQ(fake_calls(hip ? "hipModuleLoadData" : "cuModuleLoadDataEx"), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Images, CorruptCodeObjectTest,
    ::testing::Values(
        CorruptCase{"EmptyPtx", "cuda", [] { return std::string(); }, "is empty$"},
        CorruptCase{"PtxWithoutVersion", "cuda", [] { return std::string(".target sm_90\n.entry gemm()\n"); },
                    "is not PTX \\(no .version directive\\)$"},
        CorruptCase{"PtxWithoutEntry", "cuda",
                    [] { return std::string(".version 8.0\n.target sm_90\n.visible .entry gemm_f16()\n"); },
                    "has no .entry gemm$"},
        CorruptCase{"BinaryPtx", "cuda", [] { return std::string(".version 8.0\n.target\0 sm_90", 23); },
                    "is not PTX text \\(contains a NUL byte\\)$"},
        CorruptCase{"ShortHsaco", "hip", [] { return tinyHsaco().substr(0, 40); },
                    "is truncated: 40 bytes, shorter than an ELF header$"},
        CorruptCase{"TruncatedHsaco", "hip", truncatedHsaco,
                    "is truncated: the section header table ends at byte 128 but the file has 100 bytes$"},
        CorruptCase{"SectionPastEnd", "hip", [] { return hsacoWithSection(120, 64); },
                    "is truncated: section 0 ends at byte 184 but the file has 128 bytes$"},
        CorruptCase{"NotElf", "hip", [] { return std::string(128, 'x'); }, "is not an ELF file$"},
        CorruptCase{"Elf32", "hip", [] { std::string e = tinyHsaco(); e[4] = 1; return e; },
                    "is not a 64-bit little-endian ELF file$"},
        CorruptCase{"X86Elf", "hip", [] { return hsacoWithMachine(62); },
                    "is not an AMDGPU code object \\(e_machine 62, expected 224\\)$"}),
    [](const ::testing::TestParamInfo<CorruptCase> &info) { return std::string(info.param.name); });

TEST_F(BundleTest, ValidHsacoIsHandedToHip) {
  ASSERT_NE(load("hip", amdManifest()), nullptr);
  EXPECT_EQ(fake_calls("hipModuleLoadData"), 0);
  ASSERT_NE(kernel(bundle), nullptr);
  EXPECT_EQ(fake_calls("hipModuleLoadData"), 1);
  EXPECT_EQ(fake_calls("hipModuleGetFunction"), 1);
}

TEST_F(BundleTest, MissingKernelHasItsOwnError) {
  ASSERT_NE(load("cuda", nvidiaManifest()), nullptr);
  EXPECT_TESSERA_ERROR(getFails(bundle, "attention"), TESSERA_ERROR_KERNEL_NOT_FOUND,
                       "^bundle .* has no kernel 'attention' \\(kernels: gemm\\)$");
}

// The JIT runs at the first get, so its failure is that get's. It is not cached: each get tries
// again (a driver may have run out of memory only for a while) and reports its own attempt.
TEST_F(BundleTest, JitFailureAtGetNamesTheCallAndCarriesTheLog) {
  ASSERT_NE(load("cuda", nvidiaManifest()), nullptr);
  fake_fail("cuModuleLoadDataEx", 218, 0);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    EXPECT_TESSERA_ERROR(getFails(bundle, "gemm"), TESSERA_ERROR_DRIVER,
                         "^cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX \\(a PTX JIT compilation failed\\)\n"
                         "JIT log: ptxas application ptx input, line 7; error   : fake JIT failure$");
    EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), attempt);
  }
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  EXPECT_EQ(fake_calls("cuModuleUnload"), 0);
}

TEST_F(BundleTest, HipLoadFailureAtGetNamesTheCall) {
  ASSERT_NE(load("hip", amdManifest()), nullptr);
  fake_fail("hipModuleLoadData", 200, 0);
  EXPECT_TESSERA_ERROR(getFails(bundle, "gemm"), TESSERA_ERROR_DRIVER,
                       "^hipModuleLoadData failed: hipErrorInvalidImage \\(invalid kernel file\\)$");
}

// A kernel that fails to load leaves nothing behind, and the kernels loaded before it stay usable.
TEST_F(BundleTest, FailedGetUnloadsItsModuleAndKeepsTheOthers) {
  ASSERT_NE(load("cuda", twoKernelManifest()), nullptr);
  tessera_kernel *gemm = kernel(bundle, "gemm");
  ASSERT_NE(gemm, nullptr);
  fake_fail("cuModuleGetFunction", 500, 1);
  EXPECT_TESSERA_ERROR(getFails(bundle, "gemm2"), TESSERA_ERROR_DRIVER,
                       "^cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND");
  EXPECT_EQ(fake_calls("cuModuleLoadDataEx"), 2);
  EXPECT_EQ(fake_calls("cuModuleUnload"), 1);
  EXPECT_EQ(kernel(bundle, "gemm"), gemm);
  ASSERT_TESSERA_OK(tessera_bundle_unload(bundle));
  bundle = nullptr;
  EXPECT_EQ(fake_calls("cuModuleUnload"), 2);
}

TEST_F(BundleTest, LargeDynamicSharedMemoryIsOptedIn) {
  json manifest = nvidiaManifest();
  manifest["kernels"][0]["dynamic_lds_bytes"] = 200 * 1024;
  ASSERT_NE(load("cuda", manifest), nullptr);
  EXPECT_EQ(fake_max_dynamic_shared(), -1); // with the module, at the first get
  ASSERT_NE(kernel(bundle), nullptr);
  EXPECT_EQ(fake_max_dynamic_shared(), 200 * 1024);
}

TEST_F(BundleTest, SmallSharedMemoryNeedsNoOptIn) {
  json manifest = nvidiaManifest();
  manifest["kernels"][0]["dynamic_lds_bytes"] = 32 * 1024; // + 16 KiB static = exactly 48 KiB
  ASSERT_NE(load("cuda", manifest), nullptr);
  ASSERT_NE(kernel(bundle), nullptr);
  EXPECT_EQ(fake_calls("cuModuleGetFunction"), 1);
  EXPECT_EQ(fake_calls("cuFuncSetAttribute"), 0);
}

TEST_F(BundleTest, SimPluginGetsTheKernelEntryAndDirectory) {
  ASSERT_NE(load("sim:gfx942", amdManifest()), nullptr);
  EXPECT_EQ(fake_calls("sim_load_kernel"), 0);
  ASSERT_NE(kernel(bundle), nullptr);
  EXPECT_EQ(fake_sim_bundle_dir(), dir.path());
  EXPECT_EQ(json::parse(fake_sim_kernel_json())["name"], "gemm");
  // The simulator reads the kernel IR itself; the runtime hands it no code object.
  EXPECT_EQ(fake_sim_code_object_given(), 0);
}

} // namespace
} // namespace tessera::runtime::test

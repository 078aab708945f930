// Runtime test support: manifests, PTX and hsaco stand-ins, and temporary bundle directories.
#include "TestSupport.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tessera::runtime::test {

static json gemmKernel() {
  return json::parse(R"({
    "name": "gemm", "directive": "wmma_gemm", "entry": "gemm", "code_object": "gemm.ptx",
    "attributes": {"dtype": "f16", "tile": {"m": 64, "n": 128}},
    "block": [128, 1, 1], "grid": [["ceil_div", "N", 128], ["ceil_div", "M", 64], 1],
    "lds_bytes": 16384,
    "args": [
      {"name": "a", "type": "ptr", "dtype": "f16", "role": "input"},
      {"name": "b", "type": "ptr", "dtype": "f16", "role": "input"},
      {"name": "c", "type": "ptr", "dtype": "f32", "role": "output"},
      {"name": "M", "type": "i64", "role": "size"},
      {"name": "N", "type": "i64", "role": "size"},
      {"name": "K", "type": "i64", "role": "size"},
      {"name": "alpha", "type": "f32", "role": "scale"}
    ]})");
}

json nvidiaManifest(const std::string &target) {
  return {{"format", "tessera-bundle"}, {"version", 1},        {"target", target}, {"vendor", "nvidia"},
          {"code_object_format", "ptx"}, {"kernels", {gemmKernel()}}};
}

json amdManifest(const std::string &target) {
  json m = nvidiaManifest(target);
  m["vendor"] = "amd";
  m["code_object_format"] = "hsaco";
  m["code_object_version"] = 5;
  m["kernels"][0]["code_object"] = "gemm.hsaco";
  return m;
}

std::string ptxFor(const json &kernel) {
  std::string params;
  for (const json &arg : kernel["args"]) {
    std::string type = arg["type"] == "ptr" || arg["type"] == "i64" ? ".u64" : arg["type"] == "i32" ? ".u32" : ".f32";
    std::string name = kernel["entry"].get<std::string>() + "_param_" + arg["name"].get<std::string>();
    std::string param = arg["type"] == "tensor_map" ? ".align 64 .b8 " + name + "[128]" : type + " " + name;
    params += std::string(params.empty() ? "" : ",\n") + "  .param " + param;
  }
  return ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry " + kernel["entry"].get<std::string>() +
         "(\n" + params + "\n)\n{\n  ret;\n}\n";
}

std::string tinyHsaco() {
  std::string elf(128, '\0');
  auto put = [&](size_t offset, uint64_t value, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i)
      elf[offset + i] = static_cast<char>(value >> (8 * i));
  };
  elf.replace(0, 4, "\x7f" "ELF");
  put(4, 2, 1);    // ELFCLASS64
  put(5, 1, 1);    // little-endian
  put(6, 1, 1);    // EV_CURRENT
  put(7, 64, 1);   // ELFOSABI_AMDGPU_HSA
  put(16, 3, 2);   // ET_DYN
  put(18, 224, 2); // EM_AMDGPU
  put(40, 64, 8);  // e_shoff: the section headers follow the ELF header
  put(52, 64, 2);  // e_ehsize
  put(58, 64, 2);  // e_shentsize
  put(60, 1, 2);   // e_shnum: the null section
  return elf;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "tessera-rt-XXXXXX").string();
  path_ = mkdtemp(pattern.data()) ? pattern : "";
}

TempDir::~TempDir() { std::filesystem::remove_all(path_); }

void TempDir::write(const std::string &name, const std::string &content) const {
  std::ofstream(path_ + "/" + name, std::ios::binary) << content;
}

void TempDir::remove(const std::string &name) const { std::filesystem::remove(path_ + "/" + name); }

void writeBundle(const TempDir &dir, const json &manifest) {
  dir.write("manifest.json", manifest.dump(2));
  for (const json &kernel : manifest["kernels"]) {
    bool amd = manifest["code_object_format"] == "hsaco";
    dir.write(kernel["code_object"], amd ? tinyHsaco() : ptxFor(kernel));
  }
}

} // namespace tessera::runtime::test

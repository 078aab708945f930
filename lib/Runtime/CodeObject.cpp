// Code objects: reading them, and checking PTX text and AMDGPU ELF images before loading.
#include "CodeObject.h"

#include "Error.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tessera::runtime {

tessera_status readCodeObject(const std::string &path, std::string &bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail(TESSERA_ERROR_CODE_OBJECT_MISSING, "code object " + path + " cannot be read: " + std::strerror(errno));
  std::stringstream content;
  content << in.rdbuf();
  bytes = content.str();
  return TESSERA_SUCCESS;
}

namespace {

bool isIdentifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

/// Where `.entry <entry>` is declared: "entry" must be a whole token, not a prefix of another.
bool declaresEntry(const std::string &ptx, const std::string &entry) {
  std::string needle = ".entry " + entry;
  for (size_t at = ptx.find(needle); at != std::string::npos; at = ptx.find(needle, at + 1)) {
    size_t end = at + needle.size();
    if (end == ptx.size() || !isIdentifierChar(ptx[end]))
      return true;
  }
  return false;
}

std::string validatePtx(const std::string &text, const std::string &entry) {
  if (text.empty())
    return "is empty";
  if (text.find('\0') != std::string::npos)
    return "is not PTX text (contains a NUL byte)";
  for (const char *directive : {".version", ".target"})
    if (text.find(directive) == std::string::npos)
      return std::string("is not PTX (no ") + directive + " directive)";
  if (!declaresEntry(text, entry))
    return "has no .entry " + entry;
  return {};
}

// ELF64 fields the check reads (little-endian, as the AMDGPU target only is).
template <typename T> T readLE(const std::string &bytes, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

constexpr size_t kElfHeaderSize = 64, kSectionHeaderSize = 64;
constexpr uint16_t kEmAmdgpu = 224;
constexpr uint32_t kShtNobits = 8;

/// An hsaco is an ELF64 little-endian AMDGPU object; every table and section it declares must
/// lie inside the file, which catches truncation anywhere after the header.
std::string validateHsaco(const std::string &bytes) {
  if (bytes.size() < kElfHeaderSize)
    return "is truncated: " + std::to_string(bytes.size()) + " bytes, shorter than an ELF header";
  if (bytes.compare(0, 4, "\x7f" "ELF") != 0)
    return "is not an ELF file";
  if (bytes[4] != 2 || bytes[5] != 1)
    return "is not a 64-bit little-endian ELF file";
  uint16_t machine = readLE<uint16_t>(bytes, 18);
  if (machine != kEmAmdgpu)
    return "is not an AMDGPU code object (e_machine " + std::to_string(machine) + ", expected 224)";
  uint64_t phoff = readLE<uint64_t>(bytes, 32), shoff = readLE<uint64_t>(bytes, 40);
  uint16_t phentsize = readLE<uint16_t>(bytes, 54), phnum = readLE<uint16_t>(bytes, 56);
  uint16_t shentsize = readLE<uint16_t>(bytes, 58), shnum = readLE<uint16_t>(bytes, 60);
  uint64_t size = bytes.size();
  auto truncated = [&](uint64_t end, const std::string &what) {
    return "is truncated: " + what + " ends at byte " + std::to_string(end) + " but the file has " +
           std::to_string(size) + " bytes";
  };
  // Offsets come from the file: compare by subtraction so a huge value cannot wrap around.
  if (phoff > size || uint64_t(phnum) * phentsize > size - phoff)
    return truncated(phoff + uint64_t(phnum) * phentsize, "the program header table");
  if (shnum == 0)
    return "has no section headers";
  if (shentsize != kSectionHeaderSize)
    return "has section headers of " + std::to_string(shentsize) + " bytes, expected 64";
  if (shoff > size || uint64_t(shnum) * shentsize > size - shoff)
    return truncated(shoff + uint64_t(shnum) * shentsize, "the section header table");
  for (uint16_t i = 0; i < shnum; ++i) {
    size_t header = shoff + size_t(i) * shentsize;
    if (readLE<uint32_t>(bytes, header + 4) == kShtNobits)
      continue; // .bss-like sections occupy no file bytes
    uint64_t offset = readLE<uint64_t>(bytes, header + 24), length = readLE<uint64_t>(bytes, header + 32);
    if (offset > size || length > size - offset)
      return truncated(offset + length, "section " + std::to_string(i));
  }
  return {};
}

} // namespace

tessera_status validateCodeObject(const std::string &format, const std::string &bytes, const std::string &entry,
                                  const std::string &path) {
  std::string defect = format == "ptx" ? validatePtx(bytes, entry) : validateHsaco(bytes);
  if (defect.empty())
    return TESSERA_SUCCESS;
  return fail(TESSERA_ERROR_CODE_OBJECT_CORRUPT, "code object " + path + " " + defect);
}

} // namespace tessera::runtime

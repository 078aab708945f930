// Reads and validates manifest.json (docs/bundle.md); every rejection says where and what.
#include "Manifest.h"

#include "Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace tessera::runtime {

using nlohmann::json;

const char *argTypeName(ArgType type) {
  switch (type) {
  case ArgType::Ptr: return "ptr";
  case ArgType::I32: return "i32";
  case ArgType::I64: return "i64";
  case ArgType::F32: return "f32";
  case ArgType::TensorMap: return "tensor_map";
  }
  return "?";
}

size_t argSize(ArgType type) {
  if (type == ArgType::TensorMap)
    return 128;
  return type == ArgType::I32 || type == ArgType::F32 ? 4 : 8;
}

size_t argAlignment(ArgType type) { return type == ArgType::TensorMap ? 64 : argSize(type); }

int ArgList::argIndex(const std::string &name) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == name)
      return static_cast<int>(i);
  return -1;
}

namespace {

/// Thrown by the validators below and turned into TESSERA_ERROR_MANIFEST by readManifest;
/// exceptions keep the many checks one line each.
struct ManifestError {
  std::string where;
  std::string what;
};

std::string describe(const json &value) { return value.dump(); }

/// A JSON object being validated, with its path ("kernels[0]") for messages.
class Object {
public:
  Object(const json &value, std::string path) : value_(value), path_(std::move(path)) {
    if (!value_.is_object())
      throw ManifestError{path_, "expected an object, got " + describe(value_)};
  }
  std::string at(const char *key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const char *key) const { return value_.contains(key) && !value_[key].is_null(); }

  const json &field(const char *key) const {
    if (!value_.contains(key))
      throw ManifestError{path_.empty() ? "manifest" : path_, std::string("missing field '") + key + "'"};
    return value_[key];
  }
  std::string string(const char *key) const {
    const json &v = field(key);
    if (!v.is_string() || v.get<std::string>().empty())
      throw ManifestError{at(key), "expected a non-empty string, got " + describe(v)};
    return v.get<std::string>();
  }
  std::string oneOf(const char *key, std::initializer_list<const char *> allowed) const {
    std::string v = string(key);
    std::string list;
    for (const char *a : allowed) {
      if (v == a)
        return v;
      appendToList(list, a);
    }
    throw ManifestError{at(key), "'" + v + "' is not one of " + list};
  }
  int64_t integer(const char *key, int64_t min, int64_t max) const {
    return checkedInteger(field(key), at(key), min, max);
  }
  bool optionalBool(const char *key) const {
    if (!has(key))
      return false;
    const json &v = field(key);
    if (!v.is_boolean())
      throw ManifestError{at(key), "expected true or false, got " + describe(v)};
    return v.get<bool>();
  }
  uint32_t optionalBytes(const char *key) const {
    return has(key) ? static_cast<uint32_t>(integer(key, 0, std::numeric_limits<int32_t>::max())) : 0;
  }
  const json &array(const char *key, std::optional<size_t> size = std::nullopt) const {
    const json &v = field(key);
    if (!v.is_array() || (size && v.size() != *size))
      throw ManifestError{at(key), (size ? "expected an array of " + std::to_string(*size) : std::string("expected an array")) +
                                       ", got " + describe(v)};
    return v;
  }

  static int64_t checkedInteger(const json &v, const std::string &where, int64_t min, int64_t max) {
    if (!v.is_number_integer())
      throw ManifestError{where, "expected an integer, got " + describe(v)};
    int64_t i = v.get<int64_t>();
    if (i < min || i > max)
      throw ManifestError{where, std::to_string(i) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]"};
    return i;
  }

private:
  const json &value_;
  std::string path_;
};

std::string indexed(const std::string &path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

ArgInfo parseArg(const Object &o) {
  ArgInfo arg;
  arg.name = o.string("name");
  std::string type = o.oneOf("type", {"ptr", "i32", "i64", "f32", "tensor_map"});
  arg.type = type == "ptr"          ? ArgType::Ptr
             : type == "i32"        ? ArgType::I32
             : type == "i64"        ? ArgType::I64
             : type == "tensor_map" ? ArgType::TensorMap
                                    : ArgType::F32;
  if (o.has("dtype"))
    arg.dtype = o.string("dtype");
  std::string role = o.string("role");
  std::optional<ArgRole> parsed = parseArgRole(role);
  if (!parsed)
    throw ManifestError{o.at("role"), "'" + role + "' is not one of " + argRoleNames()};
  arg.role = *parsed;
  if ((arg.role == ArgRole::TensorMap) != (arg.type == ArgType::TensorMap))
    throw ManifestError{o.at("role"), "an argument has type tensor_map exactly when its role is tensor_map"};
  if ((arg.role == ArgRole::TileCounter || arg.role == ArgRole::Workspace) && arg.type != ArgType::Ptr)
    throw ManifestError{o.at("role"), std::string("a ") + argRoleName(arg.role) + " argument has type ptr"};
  arg.runtimeFilled = isRuntimeFilled(arg.role);
  return arg;
}

GridExpr parseGridExpr(const json &v, const std::string &where, const KernelInfo &kernel) {
  if (v.is_number_integer())
    return GridExpr::constant(Object::checkedInteger(v, where, 0, std::numeric_limits<uint32_t>::max()));
  if (v.is_string() && v.get<std::string>() == grid::kSmCount)
    return GridExpr::smCount();
  if (v.is_string()) {
    std::string name = v.get<std::string>();
    int index = kernel.argIndex(name);
    if (index < 0)
      throw ManifestError{where, "'" + name + "' is not an argument of kernel " + kernel.name};
    ArgType type = kernel.args[index].type;
    if (type != ArgType::I32 && type != ArgType::I64)
      throw ManifestError{where, "argument '" + name + "' is " + argTypeName(type) + "; grid expressions use i32 or i64 arguments"};
    return GridExpr::argument(index);
  }
  if (!v.is_array() || v.size() != 3 || !v[0].is_string())
    throw ManifestError{where, "expected an integer, an argument name or [op, e1, e2], got " + describe(v)};
  std::string name = v[0].get<std::string>();
  std::optional<grid::Op> op = grid::parseOp(name);
  if (!op)
    throw ManifestError{where, "unknown operator '" + name + "' (expected " + grid::opNames() + ")"};
  GridExpr a = parseGridExpr(v[1], indexed(where, 1), kernel);
  return GridExpr::apply(*op, std::move(a), parseGridExpr(v[2], indexed(where, 2), kernel));
}

/// One "tensor_maps" entry: {"arg", "tensor", "dims", "strides", "box", "swizzle": "128B"}.
TensorMapInfo parseTensorMap(const Object &o, const KernelInfo &kernel) {
  TensorMapInfo m;
  auto argOf = [&](const char *key, ArgType type) {
    std::string name = o.string(key);
    int index = kernel.argIndex(name);
    if (index < 0 || kernel.args[index].type != type)
      throw ManifestError{o.at(key), "'" + name + "' is not a " + argTypeName(type) + " argument"};
    return index;
  };
  m.arg = argOf("arg", ArgType::TensorMap);
  m.tensor = argOf("tensor", ArgType::Ptr);
  const json &dims = o.array("dims"), &strides = o.array("strides"), &box = o.array("box");
  if (dims.empty() || dims.size() > 5 || strides.size() + 1 != dims.size() || box.size() != dims.size())
    throw ManifestError{o.at("dims"), "a tensor map has 1 to 5 dims, one stride fewer and one box size per dim"};
  for (size_t i = 0; i < dims.size(); ++i) {
    m.dims.push_back(parseGridExpr(dims[i], indexed(o.at("dims"), i), kernel));
    m.box.push_back(static_cast<uint32_t>(Object::checkedInteger(box[i], indexed(o.at("box"), i), 1, 256)));
  }
  for (size_t i = 0; i < strides.size(); ++i)
    m.strides.push_back(parseGridExpr(strides[i], indexed(o.at("strides"), i), kernel));
  o.oneOf("swizzle", {"128B"});
  return m;
}

/// The C ABI of the argument list: each argument at its natural alignment, pointers 8 bytes.
void layoutArgs(ArgList &kernel) {
  size_t offset = 0, maxAlign = 1;
  for (ArgInfo &arg : kernel.args) {
    size_t size = argSize(arg.type), align = argAlignment(arg.type);
    offset = (offset + align - 1) / align * align;
    arg.offset = offset;
    offset += size;
    maxAlign = std::max(maxAlign, align);
  }
  kernel.argBufferSize = (offset + maxAlign - 1) / maxAlign * maxAlign;
}

/// A code object path must stay inside the bundle directory.
void checkRelativePath(const std::string &path, const std::string &where) {
  std::stringstream parts(path);
  std::string part;
  bool escapes = path.front() == '/';
  while (std::getline(parts, part, '/'))
    escapes |= part == "..";
  if (escapes)
    throw ManifestError{where, "'" + path + "' must be a path inside the bundle directory"};
}

KernelInfo parseKernel(const Object &o) {
  KernelInfo k;
  k.name = o.string("name");
  k.entry = o.string("entry");
  k.codeObject = o.string("code_object");
  checkRelativePath(k.codeObject, o.at("code_object"));
  const json &args = o.array("args");
  for (size_t i = 0; i < args.size(); ++i) {
    ArgInfo arg = parseArg(Object(args[i], indexed(o.at("args"), i)));
    if (k.argIndex(arg.name) >= 0)
      throw ManifestError{indexed(o.at("args"), i), "duplicate argument '" + arg.name + "'"};
    if (arg.role == ArgRole::TileCounter) {
      if (k.tileCounterArg >= 0)
        throw ManifestError{indexed(o.at("args"), i), "a kernel has at most one tile_counter argument"};
      k.tileCounterArg = int(i);
    }
    k.args.push_back(std::move(arg));
  }
  layoutArgs(k);
  const json &block = o.array("block", 3);
  for (size_t i = 0; i < 3; ++i)
    k.block[i] = static_cast<uint32_t>(Object::checkedInteger(block[i], indexed(o.at("block"), i), 1, 65535));
  const json &grid = o.array("grid", 3);
  for (size_t i = 0; i < 3; ++i)
    k.grid[i] = parseGridExpr(grid[i], indexed(o.at("grid"), i), k);
  if (o.has("tensor_maps")) {
    const json &maps = o.array("tensor_maps");
    for (size_t i = 0; i < maps.size(); ++i)
      k.tensorMaps.push_back(parseTensorMap(Object(maps[i], indexed(o.at("tensor_maps"), i)), k));
  }
  if (o.has("divisible")) {
    const json &rules = o.array("divisible");
    for (size_t i = 0; i < rules.size(); ++i) {
      Object rule(rules[i], indexed(o.at("divisible"), i));
      DivisibleInfo d;
      // The argument as a grid expression: the same name and integer-type checks.
      GridExpr arg = parseGridExpr(json(rule.string("arg")), rule.at("arg"), k);
      if (arg.kind != GridExpr::Kind::Arg)
        throw ManifestError{rule.at("arg"), "expected the name of an integer argument"};
      d.arg = arg.arg;
      d.by = parseGridExpr(rule.field("by"), rule.at("by"), k);
      d.byText = rule.field("by").dump();
      k.divisible.push_back(std::move(d));
    }
  }
  for (size_t i = 0; i < k.args.size(); ++i)
    if (k.args[i].type == ArgType::TensorMap &&
        std::none_of(k.tensorMaps.begin(), k.tensorMaps.end(), [&](const TensorMapInfo &m) { return m.arg == int(i); }))
      throw ManifestError{indexed(o.at("args"), i), "tensor_map argument '" + k.args[i].name + "' has no entry in tensor_maps"};
  // Workspace sizes may name any integer argument, so they are read once all are known.
  for (size_t i = 0; i < args.size(); ++i) {
    Object arg(args[i], indexed(o.at("args"), i));
    if (k.args[i].role != ArgRole::Workspace) {
      if (arg.has("bytes") || arg.has("zero"))
        throw ManifestError{arg.at("bytes"), "only workspace arguments have 'bytes' and 'zero'"};
      continue;
    }
    WorkspaceInfo w;
    w.arg = int(i);
    w.bytes = parseGridExpr(arg.field("bytes"), arg.at("bytes"), k);
    w.bytesText = arg.field("bytes").dump();
    w.zero = arg.optionalBool("zero");
    k.workspaces.push_back(std::move(w));
  }
  k.ldsBytes = o.optionalBytes("lds_bytes");
  k.dynamicLdsBytes = o.optionalBytes("dynamic_lds_bytes");
  return k;
}

/// "ptr f16", "i64": an argument's type as messages about kernel sets show it.
std::string typeLabel(const ArgInfo &arg) {
  return std::string(argTypeName(arg.type)) + (arg.dtype ? " " + *arg.dtype : "");
}

/// One "kernel_sets" entry: {"name", "kernels": [launch order]}; the kernels' arguments become the
/// set's, shared by name, which must agree in type and in being a workspace or not.
KernelSetInfo parseKernelSet(const json &value, const std::string &path, int index, Manifest &m) {
  Object o(value, path);
  KernelSetInfo set;
  set.name = o.string("name");
  const json &names = o.array("kernels");
  if (names.empty())
    throw ManifestError{o.at("kernels"), "a kernel set has at least one kernel"};
  for (size_t pos = 0; pos < names.size(); ++pos) {
    std::string where = indexed(o.at("kernels"), pos);
    if (!names[pos].is_string())
      throw ManifestError{where, "expected a kernel name, got " + describe(names[pos])};
    std::string name = names[pos].get<std::string>();
    auto found = std::find_if(m.kernels.begin(), m.kernels.end(), [&](const KernelInfo &k) { return k.name == name; });
    if (found == m.kernels.end())
      throw ManifestError{where, "'" + name + "' is not a kernel of the bundle"};
    if (found->kernelSet >= 0)
      throw ManifestError{where, "kernel '" + name + "' is already in kernel set '" + m.kernelSets[found->kernelSet].name + "'"};
    if (found->kernelSet == -2)
      throw ManifestError{where, "kernel '" + name + "' is listed twice"};
    found->kernelSet = -2; // listed; set to `index` once the set is complete
    const KernelInfo &kernel = *found;
    set.kernels.push_back(int(found - m.kernels.begin()));
    std::vector<int> &argOf = set.argOf.emplace_back();
    for (const ArgInfo &arg : kernel.args) {
      int shared = set.argIndex(arg.name);
      if (shared < 0) {
        set.args.push_back(arg);
        shared = int(set.args.size() - 1);
      } else {
        const ArgInfo &first = set.args[shared];
        std::string firstKernel;
        for (size_t p = 0; p < pos && firstKernel.empty(); ++p)
          if (m.kernels[set.kernels[p]].argIndex(arg.name) >= 0)
            firstKernel = m.kernels[set.kernels[p]].name;
        if (first.type != arg.type || first.dtype != arg.dtype)
          throw ManifestError{where, "argument '" + arg.name + "' is " + typeLabel(arg) + " in kernel " + kernel.name +
                                         " but " + typeLabel(first) + " in kernel " + firstKernel};
        if ((first.role == ArgRole::Workspace) != (arg.role == ArgRole::Workspace))
          throw ManifestError{where, "argument '" + arg.name + "' is " + argRoleName(arg.role) + " in kernel " + kernel.name +
                                         " but " + argRoleName(first.role) + " in kernel " + firstKernel +
                                         " (a workspace is one in every kernel of its set)"};
      }
      argOf.push_back(shared);
    }
    for (size_t w = 0; w < kernel.workspaces.size(); ++w) {
      const WorkspaceInfo &info = kernel.workspaces[w];
      int arg = argOf[info.arg];
      auto same = std::find_if(set.workspaces.begin(), set.workspaces.end(),
                               [&](const KernelSetInfo::Workspace &s) { return s.arg == arg; });
      if (same == set.workspaces.end()) {
        set.workspaces.push_back({arg, int(pos), int(w)});
        continue;
      }
      const KernelInfo &firstKernel = m.kernels[set.kernels[same->kernel]];
      const WorkspaceInfo &first = firstKernel.workspaces[same->workspace];
      auto describeWorkspace = [](const WorkspaceInfo &x) {
        return "bytes " + x.bytesText + ", zero " + (x.zero ? "true" : "false");
      };
      if (first.bytesText != info.bytesText || first.zero != info.zero)
        throw ManifestError{where, "workspace '" + set.args[arg].name + "' has " + describeWorkspace(info) + " in kernel " +
                                       kernel.name + " but " + describeWorkspace(first) + " in kernel " + firstKernel.name};
    }
  }
  for (int k : set.kernels)
    m.kernels[k].kernelSet = index;
  layoutArgs(set);
  json entry = value;
  json args = json::array();
  for (const ArgInfo &arg : set.args) {
    json a = {{"name", arg.name}, {"type", argTypeName(arg.type)}, {"role", argRoleName(arg.role)}};
    if (arg.dtype)
      a["dtype"] = *arg.dtype;
    args.push_back(std::move(a));
  }
  entry["args"] = std::move(args);
  set.json = entry.dump();
  return set;
}

Manifest parseManifest(const json &root) {
  Object o(root, "");
  std::string format = o.string("format");
  if (format != "tessera-bundle")
    throw ManifestError{"format", "'" + format + "' is not 'tessera-bundle'"};
  int64_t version = o.integer("version", 0, std::numeric_limits<int32_t>::max());
  if (version != 1)
    throw ManifestError{"version", "unsupported version " + std::to_string(version) + " (this runtime reads version 1)"};
  Manifest m;
  m.target = o.string("target");
  m.vendor = o.oneOf("vendor", {"amd", "nvidia"});
  m.codeObjectFormat = o.oneOf("code_object_format", {"hsaco", "ptx"});
  if ((m.vendor == "amd") != (m.codeObjectFormat == "hsaco"))
    throw ManifestError{"code_object_format", m.codeObjectFormat + " is not a code object of vendor " + m.vendor};
  const json &kernels = o.array("kernels");
  std::set<std::string> names;
  for (size_t i = 0; i < kernels.size(); ++i) {
    KernelInfo k = parseKernel(Object(kernels[i], indexed("kernels", i)));
    if (!names.insert(k.name).second)
      throw ManifestError{indexed("kernels", i), "duplicate kernel name '" + k.name + "'"};
    k.json = kernels[i].dump();
    m.kernels.push_back(std::move(k));
  }
  if (o.has("kernel_sets")) {
    const json &sets = o.array("kernel_sets");
    std::set<std::string> setNames;
    for (size_t i = 0; i < sets.size(); ++i) {
      KernelSetInfo set = parseKernelSet(sets[i], indexed("kernel_sets", i), int(i), m);
      if (!setNames.insert(set.name).second)
        throw ManifestError{indexed("kernel_sets", i), "duplicate kernel set name '" + set.name + "'"};
      m.kernelSets.push_back(std::move(set));
    }
  }
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const KernelInfo &k = m.kernels[i];
    if (!k.workspaces.empty() && k.kernelSet < 0)
      throw ManifestError{indexed("kernels", i), "kernel '" + k.name + "' has the workspace '" + k.args[k.workspaces[0].arg].name +
                                                     "' but is in no kernel set (workspaces belong to the launch of a set: "
                                                     "list the kernel in kernel_sets)"};
  }
  return m;
}

} // namespace

tessera_status readManifest(const std::string &dir, Manifest &out) {
  std::string file = dir + "/manifest.json";
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return fail(TESSERA_ERROR_MANIFEST, file + ": cannot read: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
  } catch (const json::parse_error &e) {
    return fail(TESSERA_ERROR_MANIFEST, file + ": not valid JSON: " + e.what());
  }
  try {
    out = parseManifest(root);
  } catch (const ManifestError &e) {
    return fail(TESSERA_ERROR_MANIFEST, file + ": " + e.where + ": " + e.what);
  }
  return TESSERA_SUCCESS;
}

} // namespace tessera::runtime

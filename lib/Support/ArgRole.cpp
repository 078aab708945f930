// Kernel argument roles: the name table (docs/bundle.md "args").
#include "tessera/Support/ArgRole.h"

#include <iterator>
#include <string>

namespace tessera {

namespace {
struct RoleEntry {
  ArgRole role;
  const char *name;
};
constexpr RoleEntry kRoles[] = {
    {ArgRole::Input, "input"},         {ArgRole::Output, "output"},     {ArgRole::InOut, "inout"},
    {ArgRole::Size, "size"},           {ArgRole::Stride, "stride"},     {ArgRole::Scale, "scale"},
    {ArgRole::Param, "param"},         {ArgRole::TensorMap, "tensor_map"}, {ArgRole::TileCounter, "tile_counter"},
    {ArgRole::Workspace, "workspace"}};
} // namespace

const char *argRoleName(ArgRole role) {
  for (const RoleEntry &e : kRoles)
    if (e.role == role)
      return e.name;
  return "?";
}

std::optional<ArgRole> parseArgRole(std::string_view name) {
  for (const RoleEntry &e : kRoles)
    if (name == e.name)
      return e.role;
  return std::nullopt;
}

const char *argRoleNames() {
  static const std::string names = [] {
    std::string list;
    for (const RoleEntry &e : kRoles)
      list += std::string(list.empty() ? "" : ", ") + e.name;
    return list;
  }();
  return names.c_str();
}

bool isRuntimeFilled(ArgRole role) {
  return role == ArgRole::TensorMap || role == ArgRole::TileCounter || role == ArgRole::Workspace;
}

} // namespace tessera

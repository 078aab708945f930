// Kernel argument roles (docs/bundle.md "args"): the one name <-> enum table of the compiler, the simulator and the runtime.
//
// Plain C++ with no LLVM dependency, like GridExpr.h: the runtime builds it without LLVM.
#ifndef TESSERA_SUPPORT_ARGROLE_H
#define TESSERA_SUPPORT_ARGROLE_H

#include <optional>
#include <string_view>

namespace tessera {

/// What a kernel argument is for, recorded in the manifest as the role's name.
/// TensorMap: a 128-byte TMA descriptor the runtime encodes at launch from a recipe;
/// TileCounter: a pointer to the per-stream tile counter of a dynamically scheduled persistent
/// kernel (two i32, zero at launch, left zero at exit); Workspace: a pointer to device memory
/// the runtime allocates (and zeroes where asked), sized by an expression over the arguments
/// and shared by the kernels of one kernel set. Callers set none of these three: the runtime does.
enum class ArgRole { Input, Output, InOut, Size, Stride, Scale, Param, TensorMap, TileCounter, Workspace };

/// The role's manifest name: "input", "output", "inout", "size", "stride", "scale", "param",
/// "tensor_map", "tile_counter", "workspace".
const char *argRoleName(ArgRole role);
/// The role called `name`, or nullopt.
std::optional<ArgRole> parseArgRole(std::string_view name);
/// "input, output, ..., workspace", for messages.
const char *argRoleNames();
/// True for the roles the runtime fills at launch (tensor_map, tile_counter, workspace).
bool isRuntimeFilled(ArgRole role);

} // namespace tessera

#endif // TESSERA_SUPPORT_ARGROLE_H

// Kernel arguments: set by name, validated before launch, grid evaluated from the manifest.
#include "Args.h"

#include "Error.h"

#include <algorithm>
#include <cstring>
#include <limits>

tessera_args::tessera_args(const tessera_kernel &kernel)
    : kernel(kernel), buffer((kernel.info->argBufferSize + 7) / 8), isSet(kernel.info->args.size(), false) {
  auto *bytes = reinterpret_cast<unsigned char *>(buffer.data());
  for (const tessera::runtime::ArgInfo &arg : kernel.info->args)
    pointers.push_back(bytes + arg.offset);
}

namespace tessera::runtime {

namespace {

std::string argLabel(const KernelInfo &kernel, const std::string &name) {
  return "argument '" + name + "' of kernel " + kernel.name;
}

/// The value of an i32 or i64 argument stored at `at`.
int64_t integerAt(ArgType type, const void *at) {
  if (type == ArgType::I32) {
    int32_t v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  int64_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

/// Evaluates one grid expression; a failure message names the grid dimension.
tessera_status evaluate(const tessera_args &args, const GridExpr &e, const std::string &where, int64_t &out) {
  if (e.op == GridExpr::Op::Const) {
    out = e.value;
    return TESSERA_SUCCESS;
  }
  if (e.op == GridExpr::Op::Arg) {
    out = integerAt(args.kernel.info->args[e.arg].type, args.pointers[e.arg]);
    return TESSERA_SUCCESS;
  }
  int64_t a = 0, b = 0;
  if (tessera_status s = evaluate(args, e.operands[0], where, a); s || (s = evaluate(args, e.operands[1], where, b)))
    return s;
  switch (e.op) {
  case GridExpr::Op::CeilDiv:
    if (b <= 0 || a < 0)
      return fail(TESSERA_ERROR_ARGUMENT, where + ": ceil_div(" + std::to_string(a) + ", " + std::to_string(b) +
                                              ") needs a non-negative dividend and a positive divisor");
    out = a / b + (a % b != 0);
    return TESSERA_SUCCESS;
  case GridExpr::Op::Mul:
    if (__builtin_mul_overflow(a, b, &out))
      return fail(TESSERA_ERROR_ARGUMENT, where + ": " + std::to_string(a) + " * " + std::to_string(b) + " overflows");
    return TESSERA_SUCCESS;
  default:
    out = std::max(a, b);
    return TESSERA_SUCCESS;
  }
}

} // namespace

tessera_status setArg(tessera_args &args, const char *name, ArgType type, const void *value) {
  const KernelInfo &kernel = *args.kernel.info;
  int index = kernel.argIndex(name);
  if (index < 0) {
    std::string known;
    for (const ArgInfo &arg : kernel.args)
      appendToList(known, arg.name);
    return fail(TESSERA_ERROR_ARGUMENT, "kernel " + kernel.name + " has no argument '" + name + "' (arguments: " + known + ")");
  }
  const ArgInfo &arg = kernel.args[index];
  std::string label = argLabel(kernel, arg.name);
  if (arg.type != type)
    return fail(TESSERA_ERROR_ARGUMENT, label + " is " + argTypeName(arg.type) + ", not " + argTypeName(type));
  if (args.isSet[index])
    return fail(TESSERA_ERROR_ARGUMENT, label + " is already set");
  if (type == ArgType::Ptr && *static_cast<void *const *>(value) == nullptr)
    return fail(TESSERA_ERROR_ARGUMENT, label + " is a null pointer");
  bool integer = type == ArgType::I32 || type == ArgType::I64;
  if (integer && arg.role == "size" && integerAt(type, value) < 0)
    return fail(TESSERA_ERROR_ARGUMENT, label + " is a size and must not be negative (got " +
                                            std::to_string(integerAt(type, value)) + ")");
  std::memcpy(args.pointers[index], value, argSize(type));
  args.isSet[index] = true;
  return TESSERA_SUCCESS;
}

tessera_status evaluateGrid(const tessera_args &args, uint32_t grid[3]) {
  const KernelInfo &kernel = *args.kernel.info;
  std::string unset;
  for (size_t i = 0; i < kernel.args.size(); ++i)
    if (!args.isSet[i])
      appendToList(unset, kernel.args[i].name);
  if (!unset.empty())
    return fail(TESSERA_ERROR_ARGUMENT, "kernel " + kernel.name + ": arguments not set: " + unset);
  for (int d = 0; d < 3; ++d) {
    std::string where = "kernel " + kernel.name + ": grid[" + std::to_string(d) + "]";
    int64_t value = 0;
    if (tessera_status s = evaluate(args, kernel.grid[d], where, value))
      return s;
    if (value < 0 || value > std::numeric_limits<uint32_t>::max())
      return fail(TESSERA_ERROR_ARGUMENT, where + " = " + std::to_string(value) + " is outside [0, 2^32)");
    grid[d] = static_cast<uint32_t>(value);
  }
  return TESSERA_SUCCESS;
}

tessera_status launch(const tessera_args &args, void *stream) {
  const KernelInfo &kernel = *args.kernel.info;
  tessera_backend_launch l = {};
  if (tessera_status s = evaluateGrid(args, l.grid))
    return s;
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0)
    return TESSERA_SUCCESS; // nothing to do, as for an empty tensor; drivers reject empty grids
  std::copy(kernel.block, kernel.block + 3, l.block);
  l.dynamic_lds_bytes = kernel.dynamicLdsBytes;
  l.arg_buffer = args.buffer.data();
  l.arg_buffer_size = kernel.argBufferSize;
  l.arg_pointers = args.pointers.data();
  l.arg_count = args.pointers.size();
  l.stream = stream;
  const Device &device = *args.kernel.bundle->device;
  return device.backend->launch(device.handle, args.kernel.handle, &l);
}

} // namespace tessera::runtime

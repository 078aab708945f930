// Grid expressions: the operator table and the evaluation rules (docs/bundle.md).
#include "tessera/Support/GridExpr.h"

#include <algorithm>
#include <iterator>

namespace tessera::grid {

namespace {
struct OpEntry {
  Op op;
  const char *name;
};
/// The one spelling of every operator.
constexpr OpEntry kOps[] = {
    {Op::CeilDiv, "ceil_div"}, {Op::Div, "div"}, {Op::Mul, "mul"}, {Op::Max, "max"}, {Op::Min, "min"},
    {Op::Add, "add"}};
} // namespace

const char *opName(Op op) {
  for (const OpEntry &e : kOps)
    if (e.op == op)
      return e.name;
  return "?";
}

std::optional<Op> parseOp(std::string_view name) {
  for (const OpEntry &e : kOps)
    if (name == e.name)
      return e.op;
  return std::nullopt;
}

const char *opNames() {
  static const std::string names = [] {
    std::string list;
    for (size_t i = 0; i < std::size(kOps); ++i)
      list += std::string(i == 0 ? "" : i + 1 == std::size(kOps) ? " or " : ", ") + kOps[i].name;
    return list;
  }();
  return names.c_str();
}

Expr Expr::constant(int64_t value) {
  Expr e;
  e.value = value;
  return e;
}

Expr Expr::argument(int index) {
  Expr e;
  e.kind = Kind::Arg;
  e.arg = index;
  return e;
}

Expr Expr::smCount() {
  Expr e;
  e.kind = Kind::SmCount;
  return e;
}

Expr Expr::apply(Op op, Expr a, Expr b) {
  Expr e;
  e.kind = Kind::Apply;
  e.op = op;
  e.operands.push_back(std::move(a));
  e.operands.push_back(std::move(b));
  return e;
}

std::optional<int64_t> apply(Op op, int64_t a, int64_t b, std::string &error) {
  switch (op) {
  case Op::CeilDiv:
  case Op::Div:
    if (b <= 0 || a < 0) {
      error = std::string(opName(op)) + "(" + std::to_string(a) + ", " + std::to_string(b) +
              ") needs a non-negative dividend and a positive divisor";
      return std::nullopt;
    }
    return a / b + (op == Op::CeilDiv && a % b != 0);
  case Op::Mul: {
    int64_t product = 0;
    if (__builtin_mul_overflow(a, b, &product)) {
      error = std::to_string(a) + " * " + std::to_string(b) + " overflows";
      return std::nullopt;
    }
    return product;
  }
  case Op::Add: {
    int64_t sum = 0;
    if (__builtin_add_overflow(a, b, &sum)) {
      error = std::to_string(a) + " + " + std::to_string(b) + " overflows";
      return std::nullopt;
    }
    return sum;
  }
  case Op::Max:
    return std::max(a, b);
  case Op::Min:
    return std::min(a, b);
  }
  error = "unknown grid operator";
  return std::nullopt;
}

std::optional<int64_t> evaluate(const Expr &e, const Values &values, std::string &error) {
  switch (e.kind) {
  case Expr::Kind::Const:
    return e.value;
  case Expr::Kind::Arg:
    return values.arg(e.arg);
  case Expr::Kind::SmCount:
    if (std::optional<int64_t> count = values.smCount())
      return count;
    error = std::string(kSmCount) + " is not reported by " + values.smCountSource();
    return std::nullopt;
  case Expr::Kind::Apply:
    break;
  }
  std::optional<int64_t> a = evaluate(e.operands[0], values, error);
  if (!a)
    return std::nullopt;
  std::optional<int64_t> b = evaluate(e.operands[1], values, error);
  if (!b)
    return std::nullopt;
  return apply(e.op, *a, *b, error);
}

} // namespace tessera::grid

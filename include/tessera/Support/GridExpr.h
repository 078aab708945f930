// Grid expressions (docs/bundle.md): the operator table and the evaluation rules, shared by the runtime, the simulator and the generators.
//
// Plain C++ with no LLVM or JSON dependency: the runtime builds it without LLVM
// (-DTESSERA_RUNTIME_ONLY=ON). Each user converts its own JSON into an Expr.
#ifndef TESSERA_SUPPORT_GRIDEXPR_H
#define TESSERA_SUPPORT_GRIDEXPR_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::grid {

/// The binary operators, written `[name, e1, e2]`.
enum class Op { CeilDiv, Div, Mul, Max, Min, Add };

/// The manifest spelling of `op`: "ceil_div", "div" (floor), "mul", "max", "min", "add".
const char *opName(Op op);
/// The operator spelled `name`, or nullopt.
std::optional<Op> parseOp(std::string_view name);
/// "ceil_div, div, mul, max, min or add", for messages.
const char *opNames();

/// How an expression names the device's multiprocessor count.
inline constexpr const char *kSmCount = "$sm_count";

/// An expression: an integer, an argument (an index into the caller's argument list), the
/// device's multiprocessor count, or an operator applied to two expressions.
struct Expr {
  enum class Kind { Const, Arg, SmCount, Apply };
  Kind kind = Kind::Const;
  int64_t value = 0;          ///< Const
  int arg = -1;               ///< Arg
  Op op = Op::Mul;            ///< Apply
  std::vector<Expr> operands; ///< Apply: two

  static Expr constant(int64_t value);
  static Expr argument(int index);
  static Expr smCount();
  static Expr apply(Op op, Expr a, Expr b);
};

/// What an expression is evaluated against.
class Values {
public:
  virtual ~Values() = default;
  /// The value of argument `index`.
  virtual int64_t arg(int index) const = 0;
  /// The device's multiprocessor count; nullopt when the device does not report one.
  virtual std::optional<int64_t> smCount() const = 0;
  /// Who failed to report the count, for the message ("the 'hip' backend").
  virtual std::string smCountSource() const = 0;
};

/// `a op b`, or nullopt with `error` set: a division needs a non-negative dividend and a
/// positive divisor ("ceil_div(10, 0) needs a non-negative dividend and a positive divisor"),
/// a product or sum must fit in int64 ("1099511627776 * 1099511627776 overflows"). Other operands,
/// negative ones included, are fine (callers bound the result).
std::optional<int64_t> apply(Op op, int64_t a, int64_t b, std::string &error);

/// Evaluates `e`; nullopt with `error` set on the first failure.
std::optional<int64_t> evaluate(const Expr &e, const Values &values, std::string &error);

} // namespace tessera::grid

#endif // TESSERA_SUPPORT_GRIDEXPR_H

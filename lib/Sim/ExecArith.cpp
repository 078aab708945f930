// The interpreter's pure operations: integer and float arithmetic, conversions, math and data movement.
//
// Each runs over all T threads of the workgroup with unit-stride loops. Integers are kept
// sign-extended to 64 bits and renormalised to their width after every operation; floats are
// exact doubles rounded to their type after every operation (for +, -, *, /, sqrt this equals
// the correctly rounded result in the narrower type, since f64 carries more than 2p + 2 bits).
#include "Executor.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace tessera::sim::detail {

namespace {

/// Rounds every result of `f` to float kind `k`.
template <typename F> void mapFloat(ElemKind k, size_t n, Cell *d, F f) {
  switch (k) {
  case ElemKind::F64:
    for (size_t i = 0; i < n; ++i)
      d[i].f = f(i);
    break;
  case ElemKind::F32:
    for (size_t i = 0; i < n; ++i)
      d[i].f = double(float(f(i)));
    break;
  default:
    for (size_t i = 0; i < n; ++i)
      d[i].f = roundToKind(f(i), k);
  }
}

template <typename F> void mapInt(unsigned bits, size_t n, Cell *d, F f) {
  for (size_t i = 0; i < n; ++i)
    d[i].i = signExtend(f(i), bits);
}

bool compareInt(int64_t predicate, int64_t a, int64_t b, unsigned bits) {
  uint64_t ua = zeroExtend(a, bits), ub = zeroExtend(b, bits);
  switch (predicate) { // arith::CmpIPredicate
  case 0: return a == b;
  case 1: return a != b;
  case 2: return a < b;
  case 3: return a <= b;
  case 4: return a > b;
  case 5: return a >= b;
  case 6: return ua < ub;
  case 7: return ua <= ub;
  case 8: return ua > ub;
  default: return ua >= ub;
  }
}

bool compareFloat(int64_t predicate, double a, double b) {
  bool unordered = std::isnan(a) || std::isnan(b);
  switch (predicate) { // arith::CmpFPredicate
  case 0: return false;
  case 1: return !unordered && a == b;
  case 2: return !unordered && a > b;
  case 3: return !unordered && a >= b;
  case 4: return !unordered && a < b;
  case 5: return !unordered && a <= b;
  case 6: return !unordered && a != b;
  case 7: return !unordered;
  case 8: return unordered || a == b;
  case 9: return unordered || a > b;
  case 10: return unordered || a >= b;
  case 11: return unordered || a < b;
  case 12: return unordered || a <= b;
  case 13: return unordered || a != b;
  case 14: return unordered;
  default: return true;
  }
}

/// IEEE 754-2019 maximum/minimum: NaN-propagating, -0 < +0.
double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) ? a : b;
  if (a == b)
    return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) ? a : b;
  if (a == b)
    return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

double mathUnary(MathFn fn, double x) {
  switch (fn) {
  case MathFn::Exp2: return std::exp2(x);
  case MathFn::Exp: return std::exp(x);
  case MathFn::Expm1: return std::expm1(x);
  case MathFn::Log2: return std::log2(x);
  case MathFn::Log: return std::log(x);
  case MathFn::Log1p: return std::log1p(x);
  case MathFn::Log10: return std::log10(x);
  case MathFn::Tanh: return std::tanh(x);
  case MathFn::Sqrt: return std::sqrt(x);
  case MathFn::Rsqrt: return 1.0 / std::sqrt(x);
  case MathFn::Abs: return std::fabs(x);
  case MathFn::Floor: return std::floor(x);
  case MathFn::Ceil: return std::ceil(x);
  case MathFn::Round: return std::round(x);
  case MathFn::RoundEven: return std::nearbyint(x);
  case MathFn::Trunc: return std::trunc(x);
  case MathFn::Sin: return std::sin(x);
  case MathFn::Cos: return std::cos(x);
  case MathFn::Tan: return std::tan(x);
  case MathFn::Atan: return std::atan(x);
  case MathFn::Erf: return std::erf(x);
  case MathFn::Sinh: return std::sinh(x);
  case MathFn::Cosh: return std::cosh(x);
  }
  return x;
}

/// Float to integer, truncating; NaN gives 0 and out-of-range values saturate (LLVM's
/// fptosi.sat), where MLIR leaves them poison.
int64_t floatToInt(double v, unsigned bits, bool isSigned) {
  if (std::isnan(v))
    return 0;
  v = std::trunc(v);
  if (isSigned) {
    double hi = std::ldexp(1.0, int(bits) - 1);
    if (v >= hi)
      return bits >= 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (bits - 1)) - 1;
    if (v < -hi)
      return bits >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (bits - 1));
    return int64_t(v);
  }
  double hi = std::ldexp(1.0, int(bits));
  if (v <= 0)
    return 0;
  if (v >= hi)
    return int64_t(bits >= 64 ? std::numeric_limits<uint64_t>::max() : (uint64_t(1) << bits) - 1);
  return int64_t(uint64_t(v));
}

double intToFloat(int64_t v, unsigned srcBits, bool isSigned, ElemKind to) {
  if (isSigned)
    return to == ElemKind::F32 ? double(float(v)) : roundToKind(double(v), to);
  uint64_t u = zeroExtend(v, srcBits);
  return to == ElemKind::F32 ? double(float(u)) : roundToKind(double(u), to);
}

uint64_t elemBits(Cell c, ElemKind k) { return isFloat(k) ? encodeFloat(c.f, k) : zeroExtend(c.i, bitWidth(k)); }
Cell elemFromBits(uint64_t bits, ElemKind k) {
  Cell c;
  if (isFloat(k))
    c.f = decodeFloat(bits, k);
  else
    c.i = signExtend(int64_t(bits), bitWidth(k));
  return c;
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t ceilDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q;
}

} // namespace

void Executor::execPure(const Inst &I) {
  const size_t n = size_t(I.count) * T;
  const unsigned bits = bitWidth(I.kind);
  Cell *d = I.out.empty() ? nullptr : cells(I.out[0]);
  const Cell *a = I.in.size() > 0 ? cells(I.in[0]) : nullptr;
  const Cell *b = I.in.size() > 1 ? cells(I.in[1]) : nullptr;
  const Cell *c = I.in.size() > 2 ? cells(I.in[2]) : nullptr;
  auto u = [bits](int64_t v) { return zeroExtend(v, bits); };
  // Division by zero and signed overflow are undefined in MLIR; lanes of an untaken branch
  // may still compute them here, so they yield 0 instead of trapping the host.
  auto safe = [bits](int64_t x, int64_t y) {
    return y != 0 && !(y == -1 && x == signExtend(int64_t(1) << (bits - 1), bits));
  };
  switch (I.op) {
  case Op::AddI: return mapInt(bits, n, d, [&](size_t i) { return int64_t(uint64_t(a[i].i) + uint64_t(b[i].i)); });
  case Op::SubI: return mapInt(bits, n, d, [&](size_t i) { return int64_t(uint64_t(a[i].i) - uint64_t(b[i].i)); });
  case Op::MulI: return mapInt(bits, n, d, [&](size_t i) { return int64_t(uint64_t(a[i].i) * uint64_t(b[i].i)); });
  case Op::DivSI: return mapInt(bits, n, d, [&](size_t i) { return safe(a[i].i, b[i].i) ? a[i].i / b[i].i : 0; });
  case Op::RemSI: return mapInt(bits, n, d, [&](size_t i) { return safe(a[i].i, b[i].i) ? a[i].i % b[i].i : 0; });
  case Op::FloorDivSI:
    return mapInt(bits, n, d, [&](size_t i) { return safe(a[i].i, b[i].i) ? floorDiv(a[i].i, b[i].i) : 0; });
  case Op::CeilDivSI:
    return mapInt(bits, n, d, [&](size_t i) { return safe(a[i].i, b[i].i) ? ceilDiv(a[i].i, b[i].i) : 0; });
  case Op::DivUI: return mapInt(bits, n, d, [&](size_t i) { return u(b[i].i) ? int64_t(u(a[i].i) / u(b[i].i)) : 0; });
  case Op::RemUI: return mapInt(bits, n, d, [&](size_t i) { return u(b[i].i) ? int64_t(u(a[i].i) % u(b[i].i)) : 0; });
  case Op::CeilDivUI:
    return mapInt(bits, n, d, [&](size_t i) {
      uint64_t x = u(a[i].i), y = u(b[i].i);
      return y ? int64_t(x / y + (x % y != 0)) : 0;
    });
  case Op::AndI: return mapInt(bits, n, d, [&](size_t i) { return a[i].i & b[i].i; });
  case Op::OrI: return mapInt(bits, n, d, [&](size_t i) { return a[i].i | b[i].i; });
  case Op::XOrI: return mapInt(bits, n, d, [&](size_t i) { return a[i].i ^ b[i].i; });
  // Shifts by the width or more are poison in MLIR: 0 here.
  case Op::ShLI:
    return mapInt(bits, n, d, [&](size_t i) { return u(b[i].i) < bits ? int64_t(u(a[i].i) << u(b[i].i)) : 0; });
  case Op::ShRUI:
    return mapInt(bits, n, d, [&](size_t i) { return u(b[i].i) < bits ? int64_t(u(a[i].i) >> u(b[i].i)) : 0; });
  case Op::ShRSI: return mapInt(bits, n, d, [&](size_t i) { return u(b[i].i) < bits ? a[i].i >> u(b[i].i) : 0; });
  case Op::MaxSI: return mapInt(bits, n, d, [&](size_t i) { return std::max(a[i].i, b[i].i); });
  case Op::MinSI: return mapInt(bits, n, d, [&](size_t i) { return std::min(a[i].i, b[i].i); });
  case Op::MaxUI: return mapInt(bits, n, d, [&](size_t i) { return int64_t(std::max(u(a[i].i), u(b[i].i))); });
  case Op::MinUI: return mapInt(bits, n, d, [&](size_t i) { return int64_t(std::min(u(a[i].i), u(b[i].i))); });
  case Op::AbsI:
    return mapInt(bits, n, d, [&](size_t i) { return a[i].i < 0 ? int64_t(0 - uint64_t(a[i].i)) : a[i].i; });
  case Op::CmpI: {
    unsigned w = bits;
    return mapInt(1, n, d, [&](size_t i) { return int64_t(compareInt(I.imm, a[i].i, b[i].i, w)); });
  }
  case Op::ExtSI: return mapInt(bits, n, d, [&](size_t i) { return a[i].i; });
  case Op::ExtUI: {
    unsigned from = bitWidth(I.srcKind);
    return mapInt(bits, n, d, [&](size_t i) { return int64_t(zeroExtend(a[i].i, from)); });
  }
  case Op::TruncI: return mapInt(bits, n, d, [&](size_t i) { return a[i].i; });

  case Op::AddF: return mapFloat(I.kind, n, d, [&](size_t i) { return a[i].f + b[i].f; });
  case Op::SubF: return mapFloat(I.kind, n, d, [&](size_t i) { return a[i].f - b[i].f; });
  case Op::MulF: return mapFloat(I.kind, n, d, [&](size_t i) { return a[i].f * b[i].f; });
  case Op::DivF: return mapFloat(I.kind, n, d, [&](size_t i) { return a[i].f / b[i].f; });
  case Op::RemF: return mapFloat(I.kind, n, d, [&](size_t i) { return std::fmod(a[i].f, b[i].f); });
  case Op::MaxNumF: return mapFloat(I.kind, n, d, [&](size_t i) { return std::fmax(a[i].f, b[i].f); });
  case Op::MinNumF: return mapFloat(I.kind, n, d, [&](size_t i) { return std::fmin(a[i].f, b[i].f); });
  case Op::MaximumF: return mapFloat(I.kind, n, d, [&](size_t i) { return maximum(a[i].f, b[i].f); });
  case Op::MinimumF: return mapFloat(I.kind, n, d, [&](size_t i) { return minimum(a[i].f, b[i].f); });
  case Op::CopySign: return mapFloat(I.kind, n, d, [&](size_t i) { return std::copysign(a[i].f, b[i].f); });
  case Op::PowF: return mapFloat(I.kind, n, d, [&](size_t i) { return std::pow(a[i].f, b[i].f); });
  case Op::NegF: return mapFloat(I.kind, n, d, [&](size_t i) { return -a[i].f; });
  case Op::MathUnary: return mapFloat(I.kind, n, d, [&](size_t i) { return mathUnary(MathFn(I.imm), a[i].f); });
  case Op::Fma:
    if (I.kind == ElemKind::F32) // fused in f32 itself: rounding the f64 fma would round twice
      return mapFloat(I.kind, n, d, [&](size_t i) { return std::fma(float(a[i].f), float(b[i].f), float(c[i].f)); });
    return mapFloat(I.kind, n, d, [&](size_t i) { return std::fma(a[i].f, b[i].f, c[i].f); });
  case Op::CmpF: return mapInt(1, n, d, [&](size_t i) { return int64_t(compareFloat(I.imm, a[i].f, b[i].f)); });
  case Op::ExtF: return mapFloat(I.kind, n, d, [&](size_t i) { return a[i].f; });
  case Op::TruncF: return mapFloat(I.kind, n, d, [&](size_t i) { return a[i].f; });
  case Op::SIToFP: {
    unsigned from = bitWidth(I.srcKind);
    return mapFloat(ElemKind::F64, n, d, [&](size_t i) { return intToFloat(a[i].i, from, true, I.kind); });
  }
  case Op::UIToFP: {
    unsigned from = bitWidth(I.srcKind);
    return mapFloat(ElemKind::F64, n, d, [&](size_t i) { return intToFloat(a[i].i, from, false, I.kind); });
  }
  case Op::FPToSI: return mapInt(bits, n, d, [&](size_t i) { return floatToInt(a[i].f, bits, true); });
  case Op::FPToUI: return mapInt(bits, n, d, [&](size_t i) { return floatToInt(a[i].f, bits, false); });
  case Op::Select: {
    const uint32_t count = I.count;
    for (uint32_t e = 0; e < count; ++e)
      for (uint32_t t = 0; t < T; ++t) {
        size_t i = size_t(e) * T + t;
        d[i] = (I.imm ? a[t].i : a[i].i) ? b[i] : c[i];
      }
    return;
  }
  case Op::Bitcast: {
    // Concatenate the operand's elements' bits (element 0 lowest), then split them again.
    const Slot &src = P.slots[I.in[0]];
    unsigned srcBits = bitWidth(src.kind), dstBits = bits;
    std::vector<uint64_t> stream((size_t(src.count) * srcBits + 63) / 64 + 1);
    for (uint32_t t = 0; t < T; ++t) {
      std::fill(stream.begin(), stream.end(), 0);
      for (uint32_t e = 0; e < src.count; ++e) {
        uint64_t v = elemBits(a[size_t(e) * T + t], src.kind);
        size_t at = size_t(e) * srcBits;
        stream[at / 64] |= v << (at % 64);
        if (at % 64 + srcBits > 64)
          stream[at / 64 + 1] |= v >> (64 - at % 64);
      }
      for (uint32_t e = 0; e < I.count; ++e) {
        size_t at = size_t(e) * dstBits;
        uint64_t v = stream[at / 64] >> (at % 64);
        if (at % 64 + dstBits > 64)
          v |= stream[at / 64 + 1] << (64 - at % 64);
        d[size_t(e) * T + t] = elemFromBits(zeroExtend(int64_t(v), dstBits), I.kind);
      }
    }
    return;
  }
  case Op::Gather:
    for (size_t q = 0; q + 3 < I.list.size(); q += 4)
      std::memcpy(cells(int32_t(I.list[q + 2])) + size_t(I.list[q + 3]) * T,
                  cells(int32_t(I.list[q])) + size_t(I.list[q + 1]) * T, sizeof(Cell) * T);
    return;
  case Op::Reduce: {
    // Sequential from element 0 (or from the accumulator), as llvm.vector.reduce without reassoc.
    const ElemKind k = I.kind;
    const bool floating = isFloat(k);
    for (uint32_t t = 0; t < T; ++t) {
      Cell acc = b ? b[t] : a[t];
      for (uint32_t e = b ? 0 : 1; e < I.count; ++e) {
        Cell v = a[size_t(e) * T + t];
        switch (ReduceKind(I.imm)) {
        case ReduceKind::Add:
          if (floating)
            acc.f += v.f;
          else
            acc.i = int64_t(uint64_t(acc.i) + uint64_t(v.i));
          break;
        case ReduceKind::Mul:
          if (floating)
            acc.f *= v.f;
          else
            acc.i = int64_t(uint64_t(acc.i) * uint64_t(v.i));
          break;
        case ReduceKind::MinUI: acc.i = zeroExtend(v.i, bits) < zeroExtend(acc.i, bits) ? v.i : acc.i; break;
        case ReduceKind::MaxUI: acc.i = zeroExtend(v.i, bits) > zeroExtend(acc.i, bits) ? v.i : acc.i; break;
        case ReduceKind::MinSI: acc.i = std::min(acc.i, v.i); break;
        case ReduceKind::MaxSI: acc.i = std::max(acc.i, v.i); break;
        case ReduceKind::MinNumF: acc.f = std::fmin(acc.f, v.f); break;
        case ReduceKind::MaxNumF: acc.f = std::fmax(acc.f, v.f); break;
        case ReduceKind::MinimumF: acc.f = minimum(acc.f, v.f); break;
        case ReduceKind::MaximumF: acc.f = maximum(acc.f, v.f); break;
        case ReduceKind::And: acc.i &= v.i; break;
        case ReduceKind::Or: acc.i |= v.i; break;
        case ReduceKind::Xor: acc.i ^= v.i; break;
        }
        if (floating)
          acc.f = roundToKind(acc.f, k);
        else
          acc.i = signExtend(acc.i, bits);
      }
      d[t] = acc;
    }
    return;
  }
  case Op::Poison:
    for (size_t i = 0; i < n; ++i) {
      if (isFloat(I.kind))
        d[i].f = std::numeric_limits<double>::quiet_NaN();
      else
        d[i].i = 0;
    }
    return;
  default: return;
  }
}

} // namespace tessera::sim::detail

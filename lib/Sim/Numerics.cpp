// Exact float conversions of the simulator: one rounding routine for every small float format.
#include "tessera/Sim/Numerics.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tessera::sim {

namespace {

/// How a format spells NaN and infinity.
enum class Special {
  Ieee,    ///< all-ones exponent: infinity (zero mantissa) or NaN
  AllOnes, ///< OCP "FN": only S.1111.111 is NaN, no infinities
  NegZero, ///< "FNUZ": the -0 encoding is the only NaN, no infinities
};

struct SmallFloat {
  int man, exp, bias;
  Special special;
  uint64_t signBit() const { return uint64_t(1) << (man + exp); }
  uint64_t expMax() const { return (uint64_t(1) << exp) - 1; }
  uint64_t manMax() const { return (uint64_t(1) << man) - 1; }
};

/// The formats narrower than f32 (f32 and f64 use the host's own conversions).
const SmallFloat *smallFormat(ElemKind k) {
  static const SmallFloat f16{10, 5, 15, Special::Ieee}, bf16{7, 8, 127, Special::Ieee},
      e4m3fn{3, 4, 7, Special::AllOnes}, e4m3fnuz{3, 4, 8, Special::NegZero}, e5m2{2, 5, 15, Special::Ieee},
      e5m2fnuz{2, 5, 16, Special::NegZero};
  switch (k) {
  case ElemKind::F16: return &f16;
  case ElemKind::BF16: return &bf16;
  case ElemKind::F8E4M3FN: return &e4m3fn;
  case ElemKind::F8E4M3FNUZ: return &e4m3fnuz;
  case ElemKind::F8E5M2: return &e5m2;
  case ElemKind::F8E5M2FNUZ: return &e5m2fnuz;
  default: return nullptr;
  }
}

uint64_t doubleBits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
double bitsDouble(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

uint64_t nanEncoding(const SmallFloat &f, bool negative, uint64_t payload) {
  switch (f.special) {
  case Special::Ieee:
    // Quiet, keeping the payload's top bits as a hardware f64 -> f32 conversion does.
    return (negative ? f.signBit() : 0) | (f.expMax() << f.man) | payload | (uint64_t(1) << (f.man - 1));
  case Special::AllOnes: return (negative ? f.signBit() : 0) | (f.expMax() << f.man) | f.manMax();
  case Special::NegZero: return f.signBit();
  }
  return 0;
}

uint64_t encodeSmall(double value, const SmallFloat &f) {
  bool negative = std::signbit(value);
  if (std::isnan(value))
    return nanEncoding(f, negative, (doubleBits(value) & ((uint64_t(1) << 52) - 1)) >> (52 - f.man));
  uint64_t sign = negative ? f.signBit() : 0;
  double a = std::fabs(value);
  if (std::isinf(a))
    return f.special == Special::Ieee ? sign | (f.expMax() << f.man) : nanEncoding(f, negative, 0);
  // Quantise to multiples of 2^(E - man), where E is the exponent of `a` clamped to the
  // smallest normal exponent (below it the quantum is fixed: subnormals).
  int e2 = 0;
  std::frexp(a, &e2);
  int exponent = std::max(e2 - 1, 1 - f.bias);
  double r = std::nearbyint(std::ldexp(a, f.man - exponent)); // ties to even (default mode)
  if (r >= std::ldexp(1.0, f.man + 1)) {                      // rounded up into the next binade
    r /= 2;
    ++exponent;
  }
  if (r == 0)
    return f.special == Special::NegZero ? 0 : sign;
  uint64_t mantissa = uint64_t(r);
  uint64_t expField = 0;
  if (mantissa >= (uint64_t(1) << f.man)) {
    expField = uint64_t(exponent + f.bias);
    mantissa -= uint64_t(1) << f.man;
  }
  bool overflow = f.special == Special::Ieee ? expField >= f.expMax()
                  : f.special == Special::AllOnes
                      ? expField > f.expMax() || (expField == f.expMax() && mantissa == f.manMax())
                      : expField > f.expMax();
  if (overflow)
    return f.special == Special::Ieee ? sign | (f.expMax() << f.man) : nanEncoding(f, negative, 0);
  return sign | (expField << f.man) | mantissa;
}

double decodeSmall(uint64_t bits, const SmallFloat &f) {
  bool negative = bits & f.signBit();
  uint64_t expField = (bits >> f.man) & f.expMax(), mantissa = bits & f.manMax();
  double sign = negative ? -1.0 : 1.0;
  bool nan = (f.special == Special::Ieee && expField == f.expMax() && mantissa) ||
             (f.special == Special::AllOnes && expField == f.expMax() && mantissa == f.manMax()) ||
             (f.special == Special::NegZero && bits == f.signBit());
  // NaNs are quiet in the simulator (as after any hardware conversion); the payload goes to the
  // top of the f64 mantissa, where encodeFloat (and the host's f64 -> f32) takes it back from.
  if (nan)
    return bitsDouble((negative ? uint64_t(1) << 63 : 0) | (uint64_t(0x7ff) << 52) | (uint64_t(1) << 51) |
                      (mantissa << (52 - f.man)));
  if (f.special == Special::Ieee && expField == f.expMax())
    return sign * INFINITY;
  if (expField == 0)
    return sign * std::ldexp(double(mantissa), 1 - f.bias - f.man);
  return sign * std::ldexp(double(mantissa | (uint64_t(1) << f.man)), int(expField) - f.bias - f.man);
}

} // namespace

const char *kindName(ElemKind k) {
  switch (k) {
  case ElemKind::I1: return "i1";
  case ElemKind::I8: return "i8";
  case ElemKind::I16: return "i16";
  case ElemKind::I32: return "i32";
  case ElemKind::I64: return "i64";
  case ElemKind::F16: return "f16";
  case ElemKind::BF16: return "bf16";
  case ElemKind::F32: return "f32";
  case ElemKind::F64: return "f64";
  case ElemKind::F8E4M3FN: return "f8E4M3FN";
  case ElemKind::F8E4M3FNUZ: return "f8E4M3FNUZ";
  case ElemKind::F8E5M2: return "f8E5M2";
  case ElemKind::F8E5M2FNUZ: return "f8E5M2FNUZ";
  }
  return "?";
}

std::optional<ElemKind> parseKind(const std::string &name) {
  if (name == "index")
    return ElemKind::I64;
  for (int k = 0; k <= int(ElemKind::F8E5M2FNUZ); ++k)
    if (name == kindName(ElemKind(k)))
      return ElemKind(k);
  return std::nullopt;
}

uint64_t encodeFloat(double value, ElemKind k) {
  if (k == ElemKind::F64)
    return doubleBits(value);
  if (k == ElemKind::F32) {
    float f = float(value); // the host rounds to nearest even and keeps NaN payloads' top bits
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  return encodeSmall(value, *smallFormat(k));
}

/// Every code of the 8- and 16-bit formats decoded once: loads of f16/bf16/fp8 data are lookups.
const double *decodeTable(ElemKind k) {
  static const std::vector<std::vector<double>> tables = [] {
    std::vector<std::vector<double>> t(size_t(ElemKind::F8E5M2FNUZ) + 1);
    for (int kind = 0; kind < int(t.size()); ++kind)
      if (const SmallFloat *f = smallFormat(ElemKind(kind)))
        for (uint64_t code = 0; code < (uint64_t(1) << (f->man + f->exp + 1)); ++code)
          t[kind].push_back(decodeSmall(code, *f));
    return t;
  }();
  return tables[size_t(k)].data();
}

double decodeFloat(uint64_t bits, ElemKind k) {
  if (k == ElemKind::F64)
    return bitsDouble(bits);
  if (k == ElemKind::F32) {
    uint32_t b = uint32_t(bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  return decodeTable(k)[bits & ((uint64_t(1) << bitWidth(k)) - 1)];
}

double roundToKind(double value, ElemKind k) {
  if (k == ElemKind::F64)
    return value;
  if (k == ElemKind::F32)
    return double(float(value));
  return decodeFloat(encodeFloat(value, k), k);
}

} // namespace tessera::sim

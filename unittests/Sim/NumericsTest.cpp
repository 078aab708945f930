// The simulator's float conversions against LLVM's APFloat: every f16/bf16/fp8 code, and rounding of random and edge
// values.
#include "tessera/Sim/Numerics.h"

#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace {
using namespace tessera::sim;

const llvm::fltSemantics &semantics(ElemKind k) {
  switch (k) {
  case ElemKind::F16: return llvm::APFloat::IEEEhalf();
  case ElemKind::BF16: return llvm::APFloat::BFloat();
  case ElemKind::F32: return llvm::APFloat::IEEEsingle();
  case ElemKind::F8E4M3FN: return llvm::APFloat::Float8E4M3FN();
  case ElemKind::F8E4M3FNUZ: return llvm::APFloat::Float8E4M3FNUZ();
  case ElemKind::F8E5M2: return llvm::APFloat::Float8E5M2();
  default: return llvm::APFloat::Float8E5M2FNUZ();
  }
}

/// APFloat's encoding of `v` rounded to nearest-even in `k`.
uint64_t apEncode(double v, ElemKind k) {
  llvm::APFloat f(v);
  bool lost;
  (void)f.convert(semantics(k), llvm::APFloat::rmNearestTiesToEven, &lost);
  return f.bitcastToAPInt().getZExtValue();
}

class SmallFloats : public ::testing::TestWithParam<ElemKind> {};

TEST_P(SmallFloats, EveryCodeDecodesAsApFloatDoes) {
  ElemKind k = GetParam();
  for (uint64_t code = 0; code < (uint64_t(1) << bitWidth(k)); ++code) {
    llvm::APFloat ap(semantics(k), llvm::APInt(bitWidth(k), code));
    double ours = decodeFloat(code, k);
    if (ap.isNaN()) {
      EXPECT_TRUE(std::isnan(ours)) << kindName(k) << " code " << code;
      continue;
    }
    EXPECT_EQ(ours, ap.convertToDouble()) << kindName(k) << " code " << code;
    EXPECT_EQ(std::signbit(ours), ap.isNegative()) << kindName(k) << " code " << code;
    EXPECT_EQ(encodeFloat(ours, k), code) << kindName(k) << " code " << code << " does not round-trip";
  }
}

TEST_P(SmallFloats, RoundingMatchesApFloat) {
  ElemKind k = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<double> values = {0.0, -0.0, INFINITY, -INFINITY, 1e-300, -1e-300, 1e300, 65504,  65519.99, 65520,
                                448, 464,  480,      240,       248,    57344,   61440, 3.0e38, 3.4e38,   3.5e38};
  // Halfway cases: the midpoint of every pair of neighbouring codes (exact in f64).
  for (uint64_t code = 0; code + 1 < (uint64_t(1) << std::min(bitWidth(k), 16u)); ++code) {
    double a = decodeFloat(code, k), b = decodeFloat(code + 1, k);
    if (std::isfinite(a) && std::isfinite(b))
      values.push_back((a + b) / 2);
  }
  std::uniform_int_distribution<int> exponent(-140, 130);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  for (int i = 0; i < 200000; ++i)
    values.push_back(std::ldexp(mantissa(rng), exponent(rng)));
  for (double v : values)
    ASSERT_EQ(encodeFloat(v, k), apEncode(v, k)) << kindName(k) << " value " << v;
}

INSTANTIATE_TEST_SUITE_P(Formats, SmallFloats,
                         ::testing::Values(ElemKind::F16, ElemKind::BF16, ElemKind::F8E4M3FN, ElemKind::F8E4M3FNUZ,
                                           ElemKind::F8E5M2, ElemKind::F8E5M2FNUZ),
                         [](const ::testing::TestParamInfo<ElemKind> &info) { return kindName(info.param); });

TEST(Numerics, NanPayloadsSurviveARoundTrip) {
  // f16 0x7e01 and f32 0x7fc00123: quiet NaNs whose payloads must come back unchanged.
  EXPECT_EQ(encodeFloat(decodeFloat(0x7e01, ElemKind::F16), ElemKind::F16), 0x7e01u);
  EXPECT_EQ(encodeFloat(decodeFloat(0xfe01, ElemKind::F16), ElemKind::F16), 0xfe01u);
  EXPECT_EQ(encodeFloat(decodeFloat(0x7fc00123, ElemKind::F32), ElemKind::F32), 0x7fc00123u);
  // The fp8 NaN codes of the two e4m3 flavours.
  EXPECT_EQ(encodeFloat(NAN, ElemKind::F8E4M3FNUZ), 0x80u);
  EXPECT_EQ(encodeFloat(NAN, ElemKind::F8E4M3FN), 0x7fu);
}

TEST(Numerics, KindsAndIntegers) {
  EXPECT_EQ(parseKind("index"), ElemKind::I64);
  EXPECT_EQ(parseKind("f8E4M3FNUZ"), ElemKind::F8E4M3FNUZ);
  EXPECT_FALSE(parseKind("f128"));
  EXPECT_EQ(storageBytes(ElemKind::I1), 1u);
  EXPECT_EQ(signExtend(0xff, 8), -1);
  EXPECT_EQ(signExtend(1, 1), -1);
  EXPECT_EQ(zeroExtend(-1, 16), 0xffffu);
  EXPECT_EQ(roundToKind(1.0 + std::ldexp(1.0, -11), ElemKind::F16), 1.0); // tie to even
  EXPECT_EQ(roundToKind(1.0 + 3 * std::ldexp(1.0, -11), ElemKind::F16), 1.0 + std::ldexp(1.0, -9));
}

} // namespace

// Element types of the simulator and their exact conversions (f16, bf16, f32, f64, fp8 OCP and FNUZ).
#ifndef TESSERA_SIM_NUMERICS_H
#define TESSERA_SIM_NUMERICS_H

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::sim {

/// The scalar types kernel IR computes with. `index` is I64. Float values are held as doubles,
/// which represent every value of these types exactly.
enum class ElemKind : uint8_t {
  I1,
  I8,
  I16,
  I32,
  I64,
  F16,
  BF16,
  F32,
  F64,
  F8E4M3FN,   ///< OCP e4m3 (gfx950, NVIDIA): no infinities, S.1111.111 is NaN
  F8E4M3FNUZ, ///< e4m3 FNUZ (gfx942): no infinities, no -0, 0x80 is NaN, bias 8
  F8E5M2,     ///< OCP e5m2: IEEE-like
  F8E5M2FNUZ, ///< e5m2 FNUZ: no infinities, no -0, 0x80 is NaN, bias 16
};

inline bool isFloat(ElemKind k) { return k >= ElemKind::F16; }
/// Bits of the value (1 for I1).
inline unsigned bitWidth(ElemKind k) {
  switch (k) {
  case ElemKind::I1: return 1;
  case ElemKind::I8: return 8;
  case ElemKind::I16:
  case ElemKind::F16:
  case ElemKind::BF16: return 16;
  case ElemKind::I32:
  case ElemKind::F32: return 32;
  case ElemKind::I64:
  case ElemKind::F64: return 64;
  default: return 8; // the fp8 formats
  }
}
/// Bytes one element occupies in memory (I1 is stored as a byte, as memref<i1> is).
inline unsigned storageBytes(ElemKind k) { return k == ElemKind::I1 ? 1 : bitWidth(k) / 8; }
/// The MLIR spelling: "i32", "f16", "bf16", "f8E4M3FNUZ", ...
const char *kindName(ElemKind k);
/// The kind with MLIR spelling `name` ("index" is I64).
std::optional<ElemKind> parseKind(const std::string &name);

/// Rounds `value` to the nearest value of float kind `k` (ties to even) and returns its
/// encoding. Follows IEEE 754 and LLVM's APFloat: overflow gives infinity, or NaN for the
/// formats without infinities; FNUZ formats have no -0 (it becomes +0); a NaN keeps the top
/// mantissa bits of its payload and is made quiet.
uint64_t encodeFloat(double value, ElemKind k);
/// The exact value of encoding `bits` of float kind `k`.
double decodeFloat(uint64_t bits, ElemKind k);
/// decodeFloat(encodeFloat(value, k), k), with fast paths for f32 and f64.
double roundToKind(double value, ElemKind k);

/// Sign-extends the low `bits` of `v` (the canonical form of integers in the simulator).
inline int64_t signExtend(int64_t v, unsigned bits) {
  return bits >= 64 ? v : int64_t(uint64_t(v) << (64 - bits)) >> (64 - bits);
}
/// The low `bits` of `v`, zero-extended (the unsigned reading of an integer value).
inline uint64_t zeroExtend(int64_t v, unsigned bits) {
  return bits >= 64 ? uint64_t(v) : uint64_t(v) & ((uint64_t(1) << bits) - 1);
}

} // namespace tessera::sim

#endif // TESSERA_SIM_NUMERICS_H

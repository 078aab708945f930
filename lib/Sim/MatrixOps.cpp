// Vendor lane layouts of the matrix instructions and their exact execution for one wave.
#include "tessera/Sim/MatrixOps.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tessera::sim {

namespace {

// ---- AMD MFMA (CDNA3 ISA section 7, CDNA4 ISA; AMD matrix instruction calculator) ----------
// v_mfma_f32_32x32x8 / 16x16x16 {f16,bf16} hold 4 consecutive k per lane; gfx950's
// 32x32x16 / 16x16x32 {f16,bf16} and the fp8 forms hold 8. Lane l carries row (l mod M) of A
// and column (l mod N) of B; its k block is l / M:
//   A[l % M][KPL * (l / M) + i],  B[KPL * (l / M) + i][l % M].
template <int M, int KPL> MatrixPos mfmaA(int lane, int i) { return {lane % M, KPL * (lane / M) + i}; }
template <int M, int KPL> MatrixPos mfmaB(int lane, int i) { return {KPL * (lane / M) + i, lane % M}; }
// C/D: lane l holds column l mod N; registers come in groups of 4 consecutive rows, the 64 / M
// lane groups taking turns: 32x32 gives row 8 * (r / 4) + 4 * (l / 32) + r % 4 (16 registers),
// 16x16 gives row 4 * (l / 16) + r (4 registers).
template <int M> MatrixPos mfmaC(int lane, int r) {
  constexpr int laneGroups = 64 / M;
  return {4 * laneGroups * (r / 4) + 4 * (lane / M) + r % 4, lane % M};
}

// ---- AMD WMMA, RDNA3 (gfx11, wave32; RDNA3 ISA section 7.9) -----------------------------
// A: lane l holds row l % 16, all 16 k; B: column l % 16. Lanes 16-31 must repeat lanes 0-15.
MatrixPos wmmaA(int lane, int i) { return {lane % 16, i}; }
MatrixPos wmmaB(int lane, int i) { return {i, lane % 16}; }
// C/D in f32: register r of lane l holds C[2r + l / 16][l % 16].
MatrixPos wmmaC(int lane, int r) { return {2 * r + lane / 16, lane % 16}; }
// f16/bf16 output: the same rows, in the low (subword 0) or high (subword 1) half of each
// 32-bit register, i.e. elements 2r + subword of the 16-element vector.
template <int Subword> MatrixPos wmmaC16(int lane, int e) {
  if (e % 2 != Subword)
    return {};
  return wmmaC(lane, e / 2);
}

// ---- NVIDIA mma.sync.aligned.m16n8k16 / m16n8k32 .row.col (PTX ISA 9.7.14.5.8) ----------------
// groupID = lane >> 2, threadID_in_group = lane % 4; R elements a 32-bit register (2 for f16/bf16
// at k16, 4 for 8-bit inputs at k32), consecutive along K:
//   A (a0..a4R-1): row groupID (+8 in the second and fourth register); col R * tig + i % R (+4R in
//   the last two registers). k16: a2, a3, a6, a7 are 8 rows lower, a4..a7 8 columns right.
//   B (b0..b2R-1): row R * tig + i % R (+4R in the second register); col groupID.
//   C (c0..c3): row groupID (+8 for i >= 2); col 2 * tig + (i & 1).
template <int R> MatrixPos mmaA(int lane, int i) {
  int g = lane >> 2, t = lane & 3;
  return {g + 8 * ((i / R) & 1), R * t + i % R + 4 * R * (i / (2 * R))};
}
template <int R> MatrixPos mmaB(int lane, int i) {
  int g = lane >> 2, t = lane & 3;
  return {R * t + i % R + 4 * R * (i / R), g};
}
MatrixPos mmaC(int lane, int i) {
  int g = lane >> 2, t = lane & 3;
  return {g + 8 * (i >> 1), 2 * t + (i & 1)};
}

const MatrixLayout kLayouts[] = {
    {MatrixFamily::MFMA, 32, 32, 8, 64, 4, 4, 16, mfmaA<32, 4>, mfmaB<32, 4>, mfmaC<32>},
    {MatrixFamily::MFMA, 16, 16, 16, 64, 4, 4, 4, mfmaA<16, 4>, mfmaB<16, 4>, mfmaC<16>},
    {MatrixFamily::MFMA, 32, 32, 16, 64, 8, 8, 16, mfmaA<32, 8>, mfmaB<32, 8>, mfmaC<32>},
    {MatrixFamily::MFMA, 16, 16, 32, 64, 8, 8, 4, mfmaA<16, 8>, mfmaB<16, 8>, mfmaC<16>},
    {MatrixFamily::WMMA, 16, 16, 16, 32, 16, 16, 8, wmmaA, wmmaB, wmmaC},
    {MatrixFamily::WMMA, 16, 16, 16, 32, 16, 16, 16, wmmaA, wmmaB, wmmaC16<0>},
    {MatrixFamily::WMMA, 16, 16, 16, 32, 16, 16, 16, wmmaA, wmmaB, wmmaC16<1>},
    {MatrixFamily::MMASync, 16, 8, 16, 32, 8, 4, 4, mmaA<2>, mmaB<2>, mmaC},
    {MatrixFamily::MMASync, 16, 8, 32, 32, 16, 8, 4, mmaA<4>, mmaB<4>, mmaC},
};

uint64_t bitsOf(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

/// Gathers one operand matrix from the lanes, checking that replicated copies agree.
std::string gather(const char *name, int rows, int cols, int lanes, int perLane, MatrixPos (*map)(int, int),
                   llvm::function_ref<double(int, int)> value, std::vector<double> &out) {
  out.assign(size_t(rows) * cols, 0.0);
  std::vector<int> holder(size_t(rows) * cols, -1);
  for (int lane = 0; lane < lanes; ++lane)
    for (int e = 0; e < perLane; ++e) {
      MatrixPos p = map(lane, e);
      if (p.row < 0)
        continue;
      size_t at = size_t(p.row) * cols + p.col;
      double v = value(lane, e);
      if (holder[at] < 0) {
        holder[at] = lane;
        out[at] = v;
      } else if (bitsOf(out[at]) != bitsOf(v)) {
        return std::string(name) + "[" + std::to_string(p.row) + "][" + std::to_string(p.col) + "] is " +
               std::to_string(out[at]) + " in lane " + std::to_string(holder[at]) + " but " + std::to_string(v) +
               " in lane " + std::to_string(lane) + " (the lanes holding a replicated operand must agree)";
      }
    }
  return {};
}

const char *inputName(ElemKind k) {
  switch (k) {
  case ElemKind::F16: return "f16";
  case ElemKind::BF16: return "bf16";
  case ElemKind::F8E4M3FN:
  case ElemKind::F8E4M3FNUZ: return "fp8";
  case ElemKind::F8E5M2:
  case ElemKind::F8E5M2FNUZ: return "bf8";
  default: return kindName(k);
  }
}

} // namespace

const MatrixLayout *findMatrixLayout(MatrixFamily family, int m, int n, int k, int aPerLane, int cPerLane,
                                     int subword) {
  for (const MatrixLayout &l : kLayouts) {
    if (l.family != family || l.m != m || l.n != n || l.k != k || l.aPerLane != aPerLane || l.cPerLane != cPerLane)
      continue;
    // The two f16-output WMMA layouts differ only in the half they write.
    if (family == MatrixFamily::WMMA && cPerLane == 16 && l.c(0, subword).row < 0)
      continue;
    return &l;
  }
  return nullptr;
}

std::string matrixMnemonic(const MatrixLayout &l, ElemKind in, ElemKind acc) {
  std::string shape = std::to_string(l.m) + "x" + std::to_string(l.n) + "x" + std::to_string(l.k);
  std::string inName = inputName(in);
  switch (l.family) {
  case MatrixFamily::MFMA:
    return "v_mfma_" + std::string(kindName(acc)) + "_" + shape + "_" +
           (isFloat(in) && bitWidth(in) == 8 ? inName + "_" + inName : inName);
  case MatrixFamily::WMMA: return "v_wmma_" + std::string(kindName(acc)) + "_" + shape + "_" + inName;
  case MatrixFamily::MMASync: {
    // PTX names OCP e4m3 `e4m3`.
    const std::string ptxIn = in == ElemKind::F8E4M3FN ? "e4m3" : inName;
    return "mma.sync.aligned.m" + std::to_string(l.m) + "n" + std::to_string(l.n) + "k" + std::to_string(l.k) +
           ".row.col." + kindName(acc) + "." + ptxIn + "." + ptxIn + "." + kindName(acc);
  }
  }
  return {};
}

std::string executeMatrix(const MatrixLayout &l, const MatrixFragments &f) {
  std::vector<double> a, b, c;
  if (std::string e = gather("A", l.m, l.k, l.waveSize, l.aPerLane, l.a, f.a, a); !e.empty())
    return e;
  if (std::string e = gather("B", l.k, l.n, l.waveSize, l.bPerLane, l.b, f.b, b); !e.empty())
    return e;
  if (std::string e = gather("C", l.m, l.n, l.waveSize, l.cPerLane, l.c, f.c, c); !e.empty())
    return e;
  for (int lane = 0; lane < l.waveSize; ++lane)
    for (int e = 0; e < l.cPerLane; ++e) {
      MatrixPos p = l.c(lane, e);
      if (p.row < 0) {
        f.d(lane, e, f.c(lane, e));
        continue;
      }
      float acc = float(c[size_t(p.row) * l.n + p.col]);
      for (int kk = 0; kk < l.k; ++kk)
        acc = std::fma(float(a[size_t(p.row) * l.k + kk]), float(b[size_t(kk) * l.n + p.col]), acc);
      f.d(lane, e, acc);
    }
  return {};
}

} // namespace tessera::sim

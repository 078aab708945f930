// The atom table: every matrix instruction Tessera emits, with its operand layouts as data.
//
// Layouts follow the vendors' published tables (AMD's matrix instruction calculator, the
// CDNA3/CDNA4/RDNA3 ISA references, the PTX ISA "Matrix Fragments for mma.m16n8k16"); the
// unit tests check each one against those tables with random asymmetric matrices.
#include "tessera/Codegen/MMAAtom.h"

#include <cctype>

namespace tessera {

const char *elemTypeName(ElemType t) {
  switch (t) {
  case ElemType::F16: return "f16";
  case ElemType::BF16: return "bf16";
  case ElemType::F32: return "f32";
  case ElemType::FP8E4M3FNUZ: return "f8E4M3FNUZ";
  case ElemType::FP8E4M3FN: return "f8E4M3FN";
  }
  return "?";
}

int elemTypeBits(ElemType t) {
  switch (t) {
  case ElemType::F16:
  case ElemType::BF16: return 16;
  case ElemType::F32: return 32;
  case ElemType::FP8E4M3FNUZ:
  case ElemType::FP8E4M3FN: return 8;
  }
  return 0;
}

int elemTypeTopExponent(ElemType t) {
  switch (t) {
  case ElemType::F16: return 15;
  case ElemType::BF16:
  case ElemType::F32: return 127;
  case ElemType::FP8E4M3FNUZ: return 7;
  case ElemType::FP8E4M3FN: return 8;
  }
  return 0;
}

Coord OperandLayout::at(int lane, int elem) const {
  Coord c;
  for (size_t b = 0; b < regBases.size(); ++b)
    if (elem >> b & 1) c.row ^= regBases[b].row, c.col ^= regBases[b].col;
  for (size_t b = 0; b < laneBases.size(); ++b)
    if (lane >> b & 1) c.row ^= laneBases[b].row, c.col ^= laneBases[b].col;
  return c;
}

std::optional<int> OperandLayout::elementAt(Coord pos) const {
  for (int e = 0; e < elementsPerLane(); ++e)
    if (at(0, e) == pos) return e;
  return std::nullopt;
}

std::vector<LaneField> OperandLayout::laneFields() const {
  std::vector<LaneField> fields;
  for (size_t bit = 0; bit < laneBases.size();) {
    const Coord first = laneBases[bit];
    if (first.row == 0 && first.col == 0) { ++bit; continue; }
    bool alongRows = first.col == 0;
    int step = alongRows ? first.row : first.col;
    size_t end = bit + 1;
    for (; end < laneBases.size(); ++end) {
      int expect = step << (end - bit);
      if (!(laneBases[end] == (alongRows ? Coord{expect, 0} : Coord{0, expect}))) break;
    }
    fields.push_back({int(bit), int(end - bit), alongRows, step});
    bit = end;
  }
  return fields;
}

std::vector<int> OperandLayout::rowReductionLaneMasks() const {
  std::vector<int> masks;
  for (size_t b = 0; b < laneBases.size(); ++b)
    if (laneBases[b].row == 0 && laneBases[b].col != 0) masks.push_back(1 << b);
  return masks;
}

std::vector<int> OperandLayout::colReductionLaneMasks() const {
  std::vector<int> masks;
  for (size_t b = 0; b < laneBases.size(); ++b)
    if (laneBases[b].col == 0 && laneBases[b].row != 0) masks.push_back(1 << b);
  return masks;
}

static int contiguousRun(const std::vector<Coord> &bases, bool alongCols) {
  int run = 1;
  for (const Coord &c : bases) {
    Coord want = alongCols ? Coord{0, run} : Coord{run, 0};
    if (!(c == want)) break;
    run *= 2;
  }
  return run;
}

int OperandLayout::contiguousAlongCols() const { return contiguousRun(regBases, true); }
int OperandLayout::contiguousAlongRows() const { return contiguousRun(regBases, false); }

bool OperandLayout::transposeReadsFit(bool isB) const {
  if (elementsPerLane() % 4 || lanes() % 16) return false;
  auto kOf = [&](Coord c) { return isB ? c.row : c.col; };
  auto outerOf = [&](Coord c) { return isB ? c.col : c.row; };
  for (int lane = 0; lane < lanes(); ++lane)
    for (int e = 0; e < elementsPerLane(); e += 4) {
      Coord first = at(lane & ~3, e);
      for (int i = 0; i < 4; ++i) {
        Coord c = at(lane, e + i);
        if (kOf(c) != kOf(first) + i || outerOf(c) != outerOf(first) + lane % 4) return false;
      }
    }
  return true;
}

namespace {

// Bases of `n` lane-id bits stepping 1, 2, 4, ... along rows or columns.
std::vector<Coord> steps(int n, bool alongCols, int start = 1) {
  std::vector<Coord> v;
  for (int i = 0, s = start; i < n; ++i, s *= 2) v.push_back(alongCols ? Coord{0, s} : Coord{s, 0});
  return v;
}

std::vector<Coord> concat(std::vector<Coord> a, const std::vector<Coord> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// CDNA MFMA with M = N = `mn` (16 or 32) and `kPerLane` consecutive K elements per lane.
// A: lane l holds A[l % mn][kPerLane * (l / mn) + e]; B is its mirror image.
// C: 32x32: C[8 * (e / 4) + 4 * (l / 32) + e % 4][l % 32]; 16x16: C[4 * (l / 16) + e][l % 16].
// The fp8 forms (8 one-byte K per lane) have the lane pattern of the 16-bit double-K ones.
MMAAtom mfma(MMAIntrinsic id, const char *name, int mn, int k, ElemType in) {
  int laneBitsRow = mn == 32 ? 5 : 4;     // lanes spanning M (or N)
  int laneBitsK = 6 - laneBitsRow;        // remaining lane bits step along K
  int kPerLane = k >> laneBitsK;
  int regBitsK = __builtin_ctz(kPerLane);
  MMAAtom atom{id, name, AtomKind::MFMA, mn, mn, k, 64, in, ElemType::F32, {}, {}, {}};
  atom.a = {mn, k, steps(regBitsK, /*alongCols=*/true),
            concat(steps(laneBitsRow, false), steps(laneBitsK, true, kPerLane))};
  atom.b = {k, mn, steps(regBitsK, false),
            concat(steps(laneBitsRow, true), steps(laneBitsK, false, kPerLane))};
  if (mn == 32)
    atom.c = {32, 32, {{1, 0}, {2, 0}, {8, 0}, {16, 0}}, concat(steps(5, true), {{4, 0}})};
  else
    atom.c = {16, 16, {{1, 0}, {2, 0}}, concat(steps(4, true), {{4, 0}, {8, 0}})};
  return atom;
}

// RDNA3 WMMA 16x16x16, wave32: lanes 16-31 replicate A and B of lanes 0-15;
// C (f32): C[2 * e + l / 16][l % 16].
MMAAtom wmma(MMAIntrinsic id, const char *name, ElemType in) {
  MMAAtom atom{id, name, AtomKind::WMMA, 16, 16, 16, 32, in, ElemType::F32, {}, {}, {}};
  atom.a = {16, 16, steps(4, true), concat(steps(4, false), {{0, 0}})};
  atom.b = {16, 16, steps(4, false), concat(steps(4, true), {{0, 0}})};
  atom.c = {16, 16, {{2, 0}, {4, 0}, {8, 0}}, concat(steps(4, true), {{1, 0}})};
  return atom;
}

// NVIDIA mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// groupID = lane >> 2 and threadID_in_group = lane % 4:
// A: a0,a1 = (g, 2t + {0,1}), a2,a3 = (g + 8, ..), a4..a7 the same at column + 8;
// B: b0,b1 = (2t + {0,1}, g), b2,b3 = (2t + 8 + {0,1}, g); C: c0,c1 = (g, 2t + {0,1}), c2,c3 = (g + 8, ..).
// m16n8k32 with 8-bit inputs ("Matrix Fragments for mma.m16n8k32") has the same pattern with
// R = 4 elements a 32-bit register instead of 2, consecutive along K (K = 8R): A: a0..a(R-1) =
// (g, Rt + {0..R-1}), the next register 8 rows lower, the last two 4R columns right; B:
// b0..b(R-1) = (Rt + {0..R-1}, g), the next register 4R rows lower; C is m16n8k16's.
MMAAtom mmaSync(MMAIntrinsic id, const char *name, ElemType in) {
  const int perRegister = 32 / elemTypeBits(in), k = 8 * perRegister;
  MMAAtom atom{id, name, AtomKind::MMASync, 16, 8, k, 32, in, ElemType::F32, {}, {}, {}};
  const int regBits = __builtin_ctz(perRegister);
  atom.a = {16, k, concat(steps(regBits, true), {{8, 0}, {0, k / 2}}),
            concat(steps(2, true, perRegister), steps(3, false))};
  atom.b = {k, 8, concat(steps(regBits, false), {{k / 2, 0}}),
            concat(steps(2, false, perRegister), steps(3, true))};
  atom.c = {16, 8, {{0, 1}, {8, 0}}, concat(steps(2, true, 2), steps(3, false))};
  return atom;
}

MMAAtom makeAtom(MMAIntrinsic id) {
  using I = MMAIntrinsic;
  using E = ElemType;
  switch (id) {
  case I::MFMA_F32_32x32x8_F16: return mfma(id, "v_mfma_f32_32x32x8_f16", 32, 8, E::F16);
  case I::MFMA_F32_32x32x8_BF16: return mfma(id, "v_mfma_f32_32x32x8_bf16", 32, 8, E::BF16);
  case I::MFMA_F32_16x16x16_F16: return mfma(id, "v_mfma_f32_16x16x16_f16", 16, 16, E::F16);
  case I::MFMA_F32_16x16x16_BF16: return mfma(id, "v_mfma_f32_16x16x16_bf16", 16, 16, E::BF16);
  case I::MFMA_F32_32x32x16_F16: return mfma(id, "v_mfma_f32_32x32x16_f16", 32, 16, E::F16);
  case I::MFMA_F32_32x32x16_BF16: return mfma(id, "v_mfma_f32_32x32x16_bf16", 32, 16, E::BF16);
  case I::MFMA_F32_16x16x32_F16: return mfma(id, "v_mfma_f32_16x16x32_f16", 16, 32, E::F16);
  case I::MFMA_F32_16x16x32_BF16: return mfma(id, "v_mfma_f32_16x16x32_bf16", 16, 32, E::BF16);
  case I::MFMA_F32_32x32x16_F8E4M3FNUZ:
    return mfma(id, "v_mfma_f32_32x32x16_fp8_fp8", 32, 16, E::FP8E4M3FNUZ);
  case I::MFMA_F32_16x16x32_F8E4M3FNUZ:
    return mfma(id, "v_mfma_f32_16x16x32_fp8_fp8", 16, 32, E::FP8E4M3FNUZ);
  case I::MFMA_F32_32x32x16_F8E4M3FN:
    return mfma(id, "v_mfma_f32_32x32x16_fp8_fp8", 32, 16, E::FP8E4M3FN);
  case I::MFMA_F32_16x16x32_F8E4M3FN:
    return mfma(id, "v_mfma_f32_16x16x32_fp8_fp8", 16, 32, E::FP8E4M3FN);
  case I::WMMAR3_F32_16x16x16_F16: return wmma(id, "v_wmma_f32_16x16x16_f16", E::F16);
  case I::WMMAR3_F32_16x16x16_BF16: return wmma(id, "v_wmma_f32_16x16x16_bf16", E::BF16);
  case I::NV_MMA_SYNC_F32_16x8x16_F16:
    return mmaSync(id, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", E::F16);
  case I::NV_MMA_SYNC_F32_16x8x16_BF16:
    return mmaSync(id, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", E::BF16);
  case I::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN:
    return mmaSync(id, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", E::FP8E4M3FN);
  }
  return {};
}

const char *kindSpelling(AtomKind kind) {
  switch (kind) {
  case AtomKind::MFMA: return "MFMA";
  case AtomKind::WMMA: return "WMMAR3";
  case AtomKind::MMASync: return "NV_MMA_SYNC";
  }
  return "?";
}

std::string upper(std::string s) {
  for (char &c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

} // namespace

const std::vector<MMAAtom> &allAtoms() {
  static const std::vector<MMAAtom> atoms = [] {
    std::vector<MMAAtom> table;
    for (int i = 0; i < kNumMMAIntrinsics; ++i) table.push_back(makeAtom(MMAIntrinsic(i)));
    return table;
  }();
  return atoms;
}

const MMAAtom &getAtom(MMAIntrinsic intrinsic) { return allAtoms()[size_t(intrinsic)]; }

std::string stringifyMMAIntrinsic(MMAIntrinsic intrinsic) {
  const MMAAtom &a = getAtom(intrinsic);
  return std::string(kindSpelling(a.kind)) + "_" + upper(elemTypeName(a.accType)) + "_" +
         std::to_string(a.m) + "x" + std::to_string(a.n) + "x" + std::to_string(a.k) + "_" +
         upper(elemTypeName(a.inputType));
}

// wgmma m64nN D (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts", wgmma
// .m64nNk16 D): warp w = t / 32 holds rows 16w..16w+15; with g = (t % 32) / 4 and
// q = t % 4, d[i] is at row 16w + g + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2q + i % 2.
std::optional<OperandLayout> wgmmaAccumulatorLayout(int n) {
  if (n < 8 || n > 256 || (n & (n - 1))) return std::nullopt;
  return OperandLayout{64, n,
                       concat({{0, 1}, {8, 0}}, steps(__builtin_ctz(n / 8), /*alongCols=*/true, 8)),
                       concat(concat(steps(2, true, 2), steps(3, false)), steps(2, false, 16))};
}

} // namespace tessera

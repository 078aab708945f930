// The simulator's matrix instructions against AMD's layout tables (CSV) and the PTX ISA, with random asymmetric
// matrices.
#include "tessera/Sim/MatrixOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

namespace {
using namespace tessera::sim;

// One operand of an AMD calculator table: pos[lane][elem] = (row, col).
using VendorMap = std::vector<std::vector<MatrixPos>>;

// The "## A" .. "## D" sections of an AMD matrix instruction calculator CSV: per lane, the
// element in each register (half) column, in column order.
std::map<char, VendorMap> readCsv(const std::string &file) {
  std::map<char, VendorMap> maps;
  std::ifstream in(std::string(TESSERA_LAYOUT_DATA_DIR) + "/" + file);
  EXPECT_TRUE(in) << "cannot open " << file;
  char section = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) {
      section = line[3];
      continue;
    }
    if (!section || line.empty() || line[0] == '#' || line.rfind("lane", 0) == 0)
      continue;
    std::istringstream row(line);
    std::string field;
    std::getline(row, field, ',');
    size_t lane = std::stoul(field);
    VendorMap &m = maps[section];
    m.resize(std::max(m.size(), lane + 1));
    while (std::getline(row, field, ',')) {
      char name;
      MatrixPos p;
      int used = 0;
      EXPECT_EQ(std::sscanf(field.c_str(), "%c[%d][%d]%n", &name, &p.row, &p.col, &used), 3) << file << ": " << field;
      EXPECT_EQ(used, int(field.size())) << file << ": " << field;
      m[lane].push_back(p);
    }
  }
  return maps;
}

struct Case {
  const char *csv;
  MatrixFamily family;
  int m, n, k, aPerLane, cPerLane, subword;
  ElemKind in, acc;
  const char *mnemonic;
};

// gfx950's f16/bf16 32x32x16 and 16x16x32 hold 8 consecutive k per lane in the lane pattern of
// the fp8 tables (AMD's CDNA4 ISA; the calculator has no f16 tables for them).
const Case kCases[] = {
    {"cdna3_v_mfma_f32_32x32x8_f16.csv", MatrixFamily::MFMA, 32, 32, 8, 4, 16, 0, ElemKind::F16, ElemKind::F32,
     "v_mfma_f32_32x32x8_f16"},
    {"cdna3_v_mfma_f32_32x32x8_bf16.csv", MatrixFamily::MFMA, 32, 32, 8, 4, 16, 0, ElemKind::BF16, ElemKind::F32,
     "v_mfma_f32_32x32x8_bf16"},
    {"cdna3_v_mfma_f32_16x16x16_f16.csv", MatrixFamily::MFMA, 16, 16, 16, 4, 4, 0, ElemKind::F16, ElemKind::F32,
     "v_mfma_f32_16x16x16_f16"},
    {"cdna3_v_mfma_f32_16x16x16_bf16.csv", MatrixFamily::MFMA, 16, 16, 16, 4, 4, 0, ElemKind::BF16, ElemKind::F32,
     "v_mfma_f32_16x16x16_bf16"},
    {"cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv", MatrixFamily::MFMA, 32, 32, 16, 8, 16, 0, ElemKind::F8E4M3FNUZ,
     ElemKind::F32, "v_mfma_f32_32x32x16_fp8_fp8"},
    {"cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv", MatrixFamily::MFMA, 16, 16, 32, 8, 4, 0, ElemKind::F8E4M3FNUZ,
     ElemKind::F32, "v_mfma_f32_16x16x32_fp8_fp8"},
    {"cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv", MatrixFamily::MFMA, 32, 32, 16, 8, 16, 0, ElemKind::F16, ElemKind::F32,
     "v_mfma_f32_32x32x16_f16"},
    {"cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv", MatrixFamily::MFMA, 16, 16, 32, 8, 4, 0, ElemKind::BF16, ElemKind::F32,
     "v_mfma_f32_16x16x32_bf16"},
    {"rdna3_v_wmma_f32_16x16x16_f16.csv", MatrixFamily::WMMA, 16, 16, 16, 16, 8, 0, ElemKind::F16, ElemKind::F32,
     "v_wmma_f32_16x16x16_f16"},
    {"rdna3_v_wmma_f32_16x16x16_bf16.csv", MatrixFamily::WMMA, 16, 16, 16, 16, 8, 0, ElemKind::BF16, ElemKind::F32,
     "v_wmma_f32_16x16x16_bf16"},
    // f16 output: the CSV's C/D column r is the low half of register r, vector element 2r.
    {"rdna3_v_wmma_f16_16x16x16_f16.csv", MatrixFamily::WMMA, 16, 16, 16, 16, 16, 0, ElemKind::F16, ElemKind::F16,
     "v_wmma_f16_16x16x16_f16"},
};

class VendorLayout : public ::testing::TestWithParam<Case> {};

const MatrixLayout &layoutOf(const Case &c) {
  const MatrixLayout *l = findMatrixLayout(c.family, c.m, c.n, c.k, c.aPerLane, c.cPerLane, c.subword);
  EXPECT_NE(l, nullptr);
  return *l;
}

/// The element of the CSV's column `col` in the simulator's numbering of that operand.
int simElem(const Case &c, char operand, int col) {
  bool halfC = (operand == 'C' || operand == 'D') && c.cPerLane == 16 && c.family == MatrixFamily::WMMA;
  return halfC ? 2 * col + c.subword : col;
}

TEST_P(VendorLayout, MapsMatchTheVendorTable) {
  const Case &c = GetParam();
  const MatrixLayout &l = layoutOf(c);
  EXPECT_EQ(matrixMnemonic(l, c.in, c.acc), c.mnemonic);
  auto maps = readCsv(c.csv);
  const std::pair<char, MatrixPos (*)(int, int)> operands[] = {{'A', l.a}, {'B', l.b}, {'C', l.c}, {'D', l.c}};
  for (auto [operand, map] : operands) {
    const VendorMap &vendor = maps[operand];
    ASSERT_EQ(int(vendor.size()), l.waveSize) << operand;
    for (int lane = 0; lane < l.waveSize; ++lane)
      for (int col = 0; col < int(vendor[lane].size()); ++col) {
        MatrixPos ours = map(lane, simElem(c, operand, col)), theirs = vendor[lane][col];
        EXPECT_TRUE(ours.row == theirs.row && ours.col == theirs.col)
            << c.mnemonic << " " << operand << " lane " << lane << " column " << col << ": ours (" << ours.row << ", "
            << ours.col << "), AMD's (" << theirs.row << ", " << theirs.col << ")";
      }
  }
}

/// Random values exactly representable in `k` (asymmetric matrices: a transposed map fails).
std::vector<double> randomMatrix(int rows, int cols, ElemKind k, std::mt19937 &rng) {
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  std::vector<double> m(size_t(rows) * cols);
  for (double &v : m)
    v = roundToKind(d(rng), k);
  return m;
}

TEST_P(VendorLayout, ComputesDFromFragmentsPlacedByTheVendorTable) {
  const Case &c = GetParam();
  const MatrixLayout &l = layoutOf(c);
  auto maps = readCsv(c.csv);
  std::mt19937 rng(std::random_device{}());
  std::vector<double> A = randomMatrix(c.m, c.k, c.in, rng), B = randomMatrix(c.k, c.n, c.in, rng),
                      C = randomMatrix(c.m, c.n, c.acc, rng);
  // Fragments as the hardware expects them, from AMD's table (not from the simulator's maps).
  auto fragment = [&](char operand, const std::vector<double> &M, int cols, int perLane) {
    std::vector<std::vector<double>> f(l.waveSize, std::vector<double>(perLane, NAN));
    for (int lane = 0; lane < l.waveSize; ++lane)
      for (int col = 0; col < int(maps[operand][lane].size()); ++col) {
        MatrixPos p = maps[operand][lane][col];
        f[lane][simElem(c, operand, col)] = M[size_t(p.row) * cols + p.col];
      }
    return f;
  };
  auto fa = fragment('A', A, c.k, l.aPerLane), fb = fragment('B', B, c.n, l.bPerLane),
       fc = fragment('C', C, c.n, l.cPerLane);
  std::vector<std::vector<double>> fd(l.waveSize, std::vector<double>(l.cPerLane, NAN));
  auto a = [&](int lane, int e) { return fa[lane][e]; };
  auto b = [&](int lane, int e) { return fb[lane][e]; };
  auto cc = [&](int lane, int e) { return fc[lane][e]; };
  auto d = [&](int lane, int e, double v) { fd[lane][e] = roundToKind(v, c.acc); };
  ASSERT_EQ(executeMatrix(l, {a, b, cc, d}), "");
  for (int lane = 0; lane < l.waveSize; ++lane)
    for (int col = 0; col < int(maps['D'][lane].size()); ++col) {
      MatrixPos p = maps['D'][lane][col];
      // The documented semantics: C in f32, then one fma per k in ascending order.
      float expect = float(C[size_t(p.row) * c.n + p.col]);
      double exact = C[size_t(p.row) * c.n + p.col];
      for (int k = 0; k < c.k; ++k) {
        expect = std::fma(float(A[size_t(p.row) * c.k + k]), float(B[size_t(k) * c.n + p.col]), expect);
        exact += A[size_t(p.row) * c.k + k] * B[size_t(k) * c.n + p.col];
      }
      double got = fd[lane][simElem(c, 'D', col)];
      EXPECT_EQ(got, roundToKind(expect, c.acc)) << c.mnemonic << " D[" << p.row << "][" << p.col << "] lane " << lane;
      EXPECT_NEAR(got, exact, c.acc == ElemKind::F32 ? 1e-4 : 0.1);
    }
}

INSTANTIATE_TEST_SUITE_P(Amd, VendorLayout, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return std::string(info.param.mnemonic).substr(2) + "_" + kindName(info.param.in);
                         });

TEST(MatrixOps, WmmaRejectsHalfWavesThatDoNotReplicate) {
  const MatrixLayout *l = findMatrixLayout(MatrixFamily::WMMA, 16, 16, 16, 16, 8);
  ASSERT_NE(l, nullptr);
  // Lanes 16-31 must hold the same A and B as lanes 0-15; lane 21 differs in element 3.
  auto a = [](int lane, int e) { return lane == 21 && e == 3 ? 5.0 : double((lane % 16) - e); };
  auto b = [](int lane, int e) { return double(e); };
  auto c = [](int, int) { return 0.0; };
  auto d = [](int, int, double) {};
  std::string message = executeMatrix(*l, {a, b, c, d});
  EXPECT_NE(message.find("A[5][3]"), std::string::npos) << message;
  EXPECT_NE(message.find("lane 21"), std::string::npos) << message;
}

TEST(MatrixOps, F16OutputWmmaLeavesTheOtherHalfAsC) {
  const MatrixLayout *l = findMatrixLayout(MatrixFamily::WMMA, 16, 16, 16, 16, 16, /*subword=*/1);
  ASSERT_NE(l, nullptr);
  EXPECT_LT(l->c(0, 0).row, 0);  // element 0: the low half, unused with subword 1
  EXPECT_EQ(l->c(17, 3).row, 3); // element 3 = register 1, high half: row 2 * 1 + 17 / 16
  EXPECT_EQ(l->c(17, 3).col, 1);
  std::vector<double> out(32 * 16);
  auto zero = [](int, int) { return 0.0; };
  auto seven = [](int, int) { return 7.0; };
  auto d = [&](int lane, int e, double v) { out[lane * 16 + e] = v; };
  ASSERT_EQ(executeMatrix(*l, {zero, zero, seven, d}), "");
  EXPECT_EQ(out[0], 7.0); // passed through
  EXPECT_EQ(out[1], 7.0); // C + 0
}

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": entries read off the
// fragment figures (groupID = lane >> 2, threadID_in_group = lane % 4).
TEST(MatrixOps, MmaSyncM16N8K16MatchesThePtxFigures) {
  const MatrixLayout *l = findMatrixLayout(MatrixFamily::MMASync, 16, 8, 16, 8, 4);
  ASSERT_NE(l, nullptr);
  struct Entry {
    char operand;
    int lane, elem, row, col;
  };
  const Entry figure[] = {
      {'A', 0, 0, 0, 0},   {'A', 0, 1, 0, 1},   {'A', 0, 2, 8, 0},   {'A', 0, 3, 8, 1}, {'A', 0, 4, 0, 8},
      {'A', 0, 5, 0, 9},   {'A', 0, 6, 8, 8},   {'A', 0, 7, 8, 9},   {'A', 5, 0, 1, 2}, {'A', 31, 7, 15, 15},
      {'A', 30, 4, 7, 12}, {'B', 0, 0, 0, 0},   {'B', 0, 1, 1, 0},   {'B', 0, 2, 8, 0}, {'B', 0, 3, 9, 0},
      {'B', 6, 1, 5, 1},   {'B', 31, 3, 15, 7}, {'C', 0, 0, 0, 0},   {'C', 0, 1, 0, 1}, {'C', 0, 2, 8, 0},
      {'C', 0, 3, 8, 1},   {'C', 13, 2, 11, 2}, {'C', 31, 3, 15, 7},
  };
  for (const Entry &e : figure) {
    MatrixPos p = (e.operand == 'A' ? l->a : e.operand == 'B' ? l->b : l->c)(e.lane, e.elem);
    EXPECT_TRUE(p.row == e.row && p.col == e.col)
        << e.operand << " lane " << e.lane << " elem " << e.elem << ": (" << p.row << ", " << p.col << ")";
  }
  // Each operand element is held by exactly one (lane, register).
  for (auto [map, rows, cols, perLane] : {std::tuple{l->a, 16, 16, 8}, {l->b, 16, 8, 4}, {l->c, 16, 8, 4}}) {
    std::vector<int> seen(rows * cols, 0);
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < perLane; ++e)
        ++seen[map(lane, e).row * cols + map(lane, e).col];
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
  EXPECT_EQ(matrixMnemonic(*l, ElemKind::BF16, ElemKind::F32), "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
}

TEST(MatrixOps, UnknownShapesAreNotModelled) {
  EXPECT_EQ(findMatrixLayout(MatrixFamily::MFMA, 32, 32, 2, 1, 16), nullptr); // f32 MFMA
  EXPECT_EQ(findMatrixLayout(MatrixFamily::WMMA, 16, 16, 16, 8, 8), nullptr); // gfx12 WMMA
}

} // namespace

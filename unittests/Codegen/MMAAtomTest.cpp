// Unit tests of the atom table: each operand layout against the vendor's own map (AMD's calculator CSVs, the PTX ISA).
#include "tessera/Codegen/MMAAtom.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

namespace {
using namespace tessera;

// One operand's (lane, element) -> (row, col) table, whether ours or the vendor's.
struct LaneMap {
  int rows = 0, cols = 0;
  std::vector<std::vector<Coord>> pos; // pos[lane][elem]
};

// A vendor's maps of one instruction. D has C's layout; AMD prints both, so our C is checked against both.
struct VendorMaps {
  LaneMap a, b, c, d;
};

std::string str(Coord p) { return "(" + std::to_string(p.row) + ", " + std::to_string(p.col) + ")"; }

// Vendor tables give no sizes of their own: the operand is as large as the positions they name.
void fitExtent(LaneMap &m) {
  for (const auto &lane : m.pos)
    for (const Coord &p : lane) {
      m.rows = std::max(m.rows, p.row + 1);
      m.cols = std::max(m.cols, p.col + 1);
    }
}

LaneMap tableOf(const OperandLayout &layout) {
  LaneMap m{layout.rows, layout.cols, std::vector<std::vector<Coord>>(layout.lanes())};
  for (int lane = 0; lane < layout.lanes(); ++lane)
    for (int e = 0; e < layout.elementsPerLane(); ++e) m.pos[lane].push_back(layout.at(lane, e));
  return m;
}

// "A[i][k]" -> operand letter and position; anything else (trailing text included) is rejected.
bool parseEntry(const std::string &s, char &operand, Coord &p) {
  int used = 0;
  return std::sscanf(s.c_str(), "%c[%d][%d]%n", &operand, &p.row, &p.col, &used) == 3 &&
         used == int(s.size());
}

// One of AMD's calculator tables: sections "## A" .. "## D", each a header row and then one row per lane whose
// columns, in order, are that lane's elements (v0.[15:0] = 0, v0.[31:16] = 1, ...; v0 = 0, v1 = 1 for 32-bit C).
VendorMaps readCalculatorCsv(const std::string &file) {
  VendorMaps maps;
  const std::string path = std::string(TESSERA_TEST_DATA_DIR) + "/" + file;
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return maps;
  }
  const std::map<char, LaneMap *> sections = {{'A', &maps.a}, {'B', &maps.b}, {'C', &maps.c}, {'D', &maps.d}};
  LaneMap *section = nullptr;
  char letter = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) {
      letter = line.size() > 3 ? line[3] : 0;
      auto it = sections.find(letter);
      section = it == sections.end() ? nullptr : it->second;
      continue;
    }
    if (!section || line.empty() || line[0] == '#' || line.rfind("lane,", 0) == 0) continue;
    std::istringstream row(line);
    std::string field;
    std::getline(row, field, ',');
    if (std::stoi(field) != int(section->pos.size())) {
      ADD_FAILURE() << path << ": lane rows out of order at '" << line << "'";
      return maps;
    }
    section->pos.emplace_back();
    while (std::getline(row, field, ',')) {
      char operand = 0;
      Coord p;
      if (!parseEntry(field, operand, p) || operand != letter) {
        ADD_FAILURE() << path << ": bad entry '" << field << "' in section " << letter;
        return maps;
      }
      section->pos.back().push_back(p);
    }
  }
  for (LaneMap *m : {&maps.a, &maps.b, &maps.c, &maps.d}) fitExtent(*m);
  return maps;
}

// PTX ISA, "Matrix Fragments for mma.m16n8k16" (f16/bf16 in, f32 accumulate), written from the ISA's formulas
// rather than from the atom table.
VendorMaps ptxM16n8k16() {
  VendorMaps v;
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, tig = lane % 4;
    std::vector<Coord> a, b, c;
    for (int i = 0; i < 8; ++i) a.push_back({group + 8 * ((i / 2) % 2), tig * 2 + i % 2 + 8 * (i / 4)});
    for (int i = 0; i < 4; ++i) b.push_back({tig * 2 + i % 2 + 8 * (i / 2), group});
    for (int i = 0; i < 4; ++i) c.push_back({group + 8 * (i / 2), tig * 2 + i % 2});
    v.a.pos.push_back(a);
    v.b.pos.push_back(b);
    v.c.pos.push_back(c);
  }
  v.d = v.c;
  for (LaneMap *m : {&v.a, &v.b, &v.c, &v.d}) fitExtent(*m);
  return v;
}

// PTX ISA, "Matrix Fragments for mma.m16n8k32" (.e4m3/.e5m2/.s8/.u8 in, four a register): a_i at row groupID
// (+8 for 4 <= i < 8 and 12 <= i < 16), column 4 * tig + (i & 3) (+16 for i >= 8); b_i at row 4 * tig + (i & 3)
// (+16 for i >= 4), column groupID; C and D as m16n8k16's.
VendorMaps ptxM16n8k32() {
  VendorMaps v = ptxM16n8k16();
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, tig = lane % 4;
    std::vector<Coord> a, b;
    for (int i = 0; i < 16; ++i)
      a.push_back({group + ((i >= 4 && i < 8) || i >= 12 ? 8 : 0), tig * 4 + (i & 3) + (i >= 8 ? 16 : 0)});
    for (int i = 0; i < 8; ++i) b.push_back({tig * 4 + (i & 3) + (i >= 4 ? 16 : 0), group});
    v.a.pos[size_t(lane)] = a;
    v.b.pos[size_t(lane)] = b;
  }
  for (LaneMap *m : {&v.a, &v.b}) fitExtent(*m);
  return v;
}

// The independent reference of each atom, keyed by intrinsic, with the vendor's mnemonic taken from the table's file
// name rather than from the atom table itself. gfx950's double-K f16/bf16 MFMAs have no calculator table: the CDNA4
// ISA gives them 8 consecutive K per lane in the lane pattern of CDNA3's fp8 16x16x32 / 32x32x16, whose byte columns
// are elements 0..7. gfx950's OCP fp8 MFMAs keep gfx942's layouts (CDNA4 ISA); only the byte format differs.
struct CalculatorTable {
  std::string csv;
  bool sameMnemonic; ///< the table is this very instruction's (its name is the atom's)
};
const std::map<MMAIntrinsic, CalculatorTable> &calculatorTables() {
  using I = MMAIntrinsic;
  static const std::map<MMAIntrinsic, CalculatorTable> tables = {
      {I::MFMA_F32_32x32x8_F16, {"cdna3_v_mfma_f32_32x32x8_f16.csv", true}},
      {I::MFMA_F32_32x32x8_BF16, {"cdna3_v_mfma_f32_32x32x8_bf16.csv", true}},
      {I::MFMA_F32_16x16x16_F16, {"cdna3_v_mfma_f32_16x16x16_f16.csv", true}},
      {I::MFMA_F32_16x16x16_BF16, {"cdna3_v_mfma_f32_16x16x16_bf16.csv", true}},
      {I::MFMA_F32_16x16x32_F16, {"cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv", false}},
      {I::MFMA_F32_16x16x32_BF16, {"cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv", false}},
      {I::MFMA_F32_32x32x16_F16, {"cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv", false}},
      {I::MFMA_F32_32x32x16_BF16, {"cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv", false}},
      {I::MFMA_F32_16x16x32_F8E4M3FNUZ, {"cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv", true}},
      {I::MFMA_F32_32x32x16_F8E4M3FNUZ, {"cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv", true}},
      {I::MFMA_F32_16x16x32_F8E4M3FN, {"cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv", true}},
      {I::MFMA_F32_32x32x16_F8E4M3FN, {"cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv", true}},
      {I::WMMAR3_F32_16x16x16_F16, {"rdna3_v_wmma_f32_16x16x16_f16.csv", true}},
      {I::WMMAR3_F32_16x16x16_BF16, {"rdna3_v_wmma_f32_16x16x16_bf16.csv", true}},
  };
  return tables;
}

const std::map<MMAIntrinsic, std::string> &ptxAtoms() {
  using I = MMAIntrinsic;
  static const std::map<MMAIntrinsic, std::string> names = {
      {I::NV_MMA_SYNC_F32_16x8x16_F16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
      {I::NV_MMA_SYNC_F32_16x8x16_BF16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
      {I::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"}};
  return names;
}

std::optional<VendorMaps> vendorMaps(MMAIntrinsic intrinsic) {
  if (auto it = calculatorTables().find(intrinsic); it != calculatorTables().end())
    return readCalculatorCsv(it->second.csv);
  if (auto it = ptxAtoms().find(intrinsic); it != ptxAtoms().end())
    return it->second.find(".m16n8k32.") != std::string::npos ? ptxM16n8k32() : ptxM16n8k16();
  return std::nullopt;
}

// The first place `ours` and `vendor` disagree (shape, lane count, elements per lane, position), or "".
std::string firstMismatch(const LaneMap &ours, const LaneMap &vendor) {
  std::ostringstream msg;
  if (ours.rows != vendor.rows || ours.cols != vendor.cols)
    msg << "shape " << ours.rows << "x" << ours.cols << ", vendor " << vendor.rows << "x" << vendor.cols;
  else if (ours.pos.size() != vendor.pos.size())
    msg << ours.pos.size() << " lanes, vendor " << vendor.pos.size();
  for (size_t lane = 0; msg.str().empty() && lane < ours.pos.size(); ++lane) {
    const auto &o = ours.pos[lane], &v = vendor.pos[lane];
    if (o.size() != v.size())
      msg << "lane " << lane << ": " << o.size() << " elements, vendor " << v.size();
    for (size_t e = 0; msg.str().empty() && e < o.size(); ++e)
      if (!(o[e] == v[e])) msg << "lane " << lane << " element " << e << ": " << str(o[e]) << ", vendor " << str(v[e]);
  }
  return msg.str();
}

struct Matrix {
  int rows, cols;
  std::vector<double> v;
  Matrix(int rows, int cols, double fill) : rows(rows), cols(cols), v(size_t(rows) * cols, fill) {}
  bool contains(Coord p) const { return p.row >= 0 && p.row < rows && p.col >= 0 && p.col < cols; }
  double &operator()(Coord p) { return v[size_t(p.row) * cols + p.col]; }
  double operator()(Coord p) const { return v[size_t(p.row) * cols + p.col]; }
};

using Fragments = std::vector<std::vector<double>>; // [lane][elem], one wave's vector operand
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Small integers keep every product and sum exact, so the comparison below can be exact.
Matrix randomMatrix(int rows, int cols, std::mt19937 &rng) {
  std::uniform_int_distribution<int> dist(-8, 8);
  Matrix m(rows, cols, 0);
  for (double &x : m.v) x = dist(rng);
  return m;
}

// Registers as `map` fills them from `m`; a position outside `m` loads NaN.
Fragments distribute(const Matrix &m, const LaneMap &map) {
  Fragments f;
  for (const auto &lane : map.pos) {
    f.emplace_back();
    for (const Coord &p : lane) f.back().push_back(m.contains(p) ? m(p) : kNaN);
  }
  return f;
}

// The matrix `map` reads out of registers `f`. A position no register holds, or whose replicas disagree, is NaN.
Matrix gather(const Fragments &f, const LaneMap &map, int rows, int cols) {
  Matrix m(rows, cols, kNaN);
  std::vector<bool> seen(m.v.size());
  for (size_t lane = 0; lane < map.pos.size() && lane < f.size(); ++lane)
    for (size_t e = 0; e < map.pos[lane].size() && e < f[lane].size(); ++e) {
      const Coord p = map.pos[lane][e];
      if (!m.contains(p)) continue;
      const size_t i = size_t(p.row) * cols + p.col;
      m.v[i] = !seen[i] || m.v[i] == f[lane][e] ? f[lane][e] : kNaN;
      seen[i] = true;
    }
  return m;
}

Matrix matmul(const Matrix &a, const Matrix &b) {
  Matrix d(a.rows, b.cols, 0);
  for (int i = 0; i < a.rows; ++i)
    for (int j = 0; j < b.cols; ++j)
      for (int k = 0; k < a.cols; ++k) d({i, j}) += a({i, k}) * b({k, j});
  return d;
}

// Emulates the instruction: A and B go into registers through our maps, the hardware reads them through the
// vendor's maps, computes D = A * B and writes D where the vendor says; we read D back through our C map.
// Returns how many elements differ from a plain A * B.
int mismatchesThroughMaps(const MMAAtom &atom, const VendorMaps &vendor, std::mt19937 &rng) {
  const Matrix a = randomMatrix(vendor.a.rows, vendor.a.cols, rng);
  const Matrix b = randomMatrix(vendor.b.rows, vendor.b.cols, rng);
  const Matrix hwA = gather(distribute(a, tableOf(atom.a)), vendor.a, a.rows, a.cols);
  const Matrix hwB = gather(distribute(b, tableOf(atom.b)), vendor.b, b.rows, b.cols);
  const Matrix got = gather(distribute(matmul(hwA, hwB), vendor.d), tableOf(atom.c), vendor.d.rows, vendor.d.cols);
  const Matrix want = matmul(a, b);
  int bad = 0;
  for (size_t i = 0; i < want.v.size(); ++i) bad += !(got.v[i] == want.v[i]); // NaN never compares equal
  return bad;
}

// Row and column swapped in every basis: the mistake a test with symmetric matrices cannot see.
OperandLayout transposedBases(OperandLayout layout) {
  for (auto *bases : {&layout.regBases, &layout.laneBases})
    for (Coord &c : *bases) std::swap(c.row, c.col);
  return layout;
}

std::vector<MMAIntrinsic> allIntrinsics() {
  std::vector<MMAIntrinsic> all;
  for (int i = 0; i < kNumMMAIntrinsics; ++i) all.push_back(MMAIntrinsic(i));
  return all;
}

// Every atom of the table, against its vendor reference.
class AtomVsVendor : public ::testing::TestWithParam<MMAIntrinsic> {
protected:
  void SetUp() override {
    atom = &getAtom(GetParam());
    std::optional<VendorMaps> maps = vendorMaps(GetParam());
    ASSERT_TRUE(maps.has_value()) << "no vendor reference for " << stringifyMMAIntrinsic(GetParam());
    vendor = *maps;
  }
  const MMAAtom *atom = nullptr;
  VendorMaps vendor;
};

TEST_P(AtomVsVendor, LayoutsMatchElementByElement) {
  EXPECT_EQ(firstMismatch(tableOf(atom->a), vendor.a), "") << "operand A";
  EXPECT_EQ(firstMismatch(tableOf(atom->b), vendor.b), "") << "operand B";
  EXPECT_EQ(firstMismatch(tableOf(atom->c), vendor.c), "") << "operand C";
  EXPECT_EQ(firstMismatch(tableOf(atom->c), vendor.d), "") << "result D";
}

TEST_P(AtomVsVendor, MultipliesThroughMaps) {
  ASSERT_EQ(vendor.a.cols, vendor.b.rows);
  // Fixed seed, but a different one per atom.
  const std::string name = stringifyMMAIntrinsic(GetParam());
  std::seed_seq seed(name.begin(), name.end());
  std::mt19937 rng(seed);
  EXPECT_EQ(mismatchesThroughMaps(*atom, vendor, rng), 0);

  MMAAtom transposedA = *atom;
  transposedA.a = transposedBases(atom->a);
  EXPECT_GT(mismatchesThroughMaps(transposedA, vendor, rng), 0) << "the check cannot see a transposed A";
}

INSTANTIATE_TEST_SUITE_P(AllAtoms, AtomVsVendor, ::testing::ValuesIn(allIntrinsics()),
                         [](const ::testing::TestParamInfo<MMAIntrinsic> &info) {
                           return stringifyMMAIntrinsic(info.param);
                         });

// An intrinsic without a reference would otherwise drop out of the tests above silently.
TEST(AtomTable, EveryIntrinsicHasAVendorReference) {
  for (MMAIntrinsic i : allIntrinsics())
    EXPECT_TRUE(calculatorTables().count(i) || ptxAtoms().count(i)) << stringifyMMAIntrinsic(i);
}

TEST(AtomTable, IsIndexedByIntrinsic) {
  ASSERT_EQ(int(allAtoms().size()), kNumMMAIntrinsics);
  for (MMAIntrinsic i : allIntrinsics()) {
    EXPECT_EQ(getAtom(i).intrinsic, i) << stringifyMMAIntrinsic(i);
    EXPECT_EQ(&getAtom(i), &allAtoms()[size_t(i)]);
  }
}

// The printed names are the vendors' mnemonics: the calculator's file name, or the PTX instruction.
TEST(AtomTable, NamesAreTheVendorMnemonics) {
  for (const auto &[i, table] : calculatorTables()) {
    if (!table.sameMnemonic) continue;
    const std::string csv = table.csv.substr(table.csv.find('_') + 1);
    EXPECT_EQ(getAtom(i).name + ".csv", csv) << stringifyMMAIntrinsic(i);
  }
  for (const auto &[i, name] : ptxAtoms()) EXPECT_EQ(getAtom(i).name, name);
  // wmma f32 output on gfx11: "v_wmma_f32_16x16x16_f16"; the double-K f16 MFMAs of gfx950:
  EXPECT_EQ(getAtom(MMAIntrinsic::MFMA_F32_32x32x16_F16).name, "v_mfma_f32_32x32x16_f16");
  EXPECT_EQ(getAtom(MMAIntrinsic::MFMA_F32_16x16x32_BF16).name, "v_mfma_f32_16x16x32_bf16");
}

// The enum spelling follows `<kind>_<C elem>_<M>x<N>x<K>_<A elem>` from the atom's data, and tells the two fp8 formats
// that share a mnemonic apart.
TEST(AtomTable, SpellingsAreUniqueAndFollowTheNamingRule) {
  EXPECT_EQ(stringifyMMAIntrinsic(MMAIntrinsic::MFMA_F32_16x16x32_F8E4M3FNUZ), "MFMA_F32_16x16x32_F8E4M3FNUZ");
  EXPECT_EQ(stringifyMMAIntrinsic(MMAIntrinsic::MFMA_F32_32x32x16_F8E4M3FN), "MFMA_F32_32x32x16_F8E4M3FN");
  EXPECT_EQ(stringifyMMAIntrinsic(MMAIntrinsic::WMMAR3_F32_16x16x16_BF16), "WMMAR3_F32_16x16x16_BF16");
  EXPECT_EQ(stringifyMMAIntrinsic(MMAIntrinsic::NV_MMA_SYNC_F32_16x8x16_F16), "NV_MMA_SYNC_F32_16x8x16_F16");
  std::set<std::string> seen;
  for (MMAIntrinsic i : allIntrinsics()) EXPECT_TRUE(seen.insert(stringifyMMAIntrinsic(i)).second);
}

TEST(AtomTable, Fp8AtomsReadOneByteElementsInTheirFormat) {
  using I = MMAIntrinsic;
  for (auto [i, format] : {std::pair{I::MFMA_F32_16x16x32_F8E4M3FNUZ, ElemType::FP8E4M3FNUZ},
                           {I::MFMA_F32_32x32x16_F8E4M3FNUZ, ElemType::FP8E4M3FNUZ},
                           {I::MFMA_F32_16x16x32_F8E4M3FN, ElemType::FP8E4M3FN},
                           {I::MFMA_F32_32x32x16_F8E4M3FN, ElemType::FP8E4M3FN}}) {
    const MMAAtom &a = getAtom(i);
    EXPECT_EQ(a.inputType, format) << a.name;
    EXPECT_EQ(a.accType, ElemType::F32) << a.name;
    // Eight one-byte elements (two VGPRs) of A and of B per lane, the vector<8xf8> amdgpu.mfma takes.
    EXPECT_EQ(a.a.elementsPerLane(), 8) << a.name;
    EXPECT_EQ(a.b.elementsPerLane(), 8) << a.name;
    EXPECT_EQ(a.m * a.k, 64 * 8) << a.name;
  }
}

TEST(AtomTable, FlopsCountAMultiplyAddAsTwo) {
  EXPECT_EQ(getAtom(MMAIntrinsic::MFMA_F32_32x32x8_F16).flops(), 2 * 32 * 32 * 8);
  EXPECT_EQ(getAtom(MMAIntrinsic::NV_MMA_SYNC_F32_16x8x16_BF16).flops(), 2 * 16 * 8 * 16);
}

// Where `layout` does not hold each position of a rows x cols operand exactly `copies` times, or "".
std::string coverageProblem(const OperandLayout &layout, int rows, int cols, int copies) {
  if (layout.rows != rows || layout.cols != cols)
    return "shape " + std::to_string(layout.rows) + "x" + std::to_string(layout.cols);
  Matrix count(rows, cols, 0);
  for (int lane = 0; lane < layout.lanes(); ++lane)
    for (int e = 0; e < layout.elementsPerLane(); ++e) {
      const Coord p = layout.at(lane, e);
      if (!count.contains(p)) return "lane " + std::to_string(lane) + " element " + std::to_string(e) + " at " + str(p);
      count(p) += 1;
    }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (count({r, c}) != copies) return str({r, c}) + " held " + std::to_string(int(count({r, c}))) + " times";
  return "";
}

TEST(OperandLayout, CoversEveryPositionOfItsOperand) {
  for (const MMAAtom &atom : allAtoms()) {
    SCOPED_TRACE(atom.name);
    // RDNA3 WMMA wants A and B replicated in both half-waves.
    const int inputCopies = atom.kind == AtomKind::WMMA ? 2 : 1;
    EXPECT_EQ(coverageProblem(atom.a, atom.m, atom.k, inputCopies), "") << "operand A";
    EXPECT_EQ(coverageProblem(atom.b, atom.k, atom.n, inputCopies), "") << "operand B";
    EXPECT_EQ(coverageProblem(atom.c, atom.m, atom.n, 1), "") << "operand C";
    for (const OperandLayout *layout : {&atom.a, &atom.b, &atom.c}) EXPECT_EQ(layout->lanes(), atom.waveSize);
  }
}

constexpr MMAIntrinsic kMfma32F16 = MMAIntrinsic::MFMA_F32_32x32x8_F16;
constexpr MMAIntrinsic kMfma16F16 = MMAIntrinsic::MFMA_F32_16x16x16_F16;
constexpr MMAIntrinsic kWmmaF16 = MMAIntrinsic::WMMAR3_F32_16x16x16_F16;
constexpr MMAIntrinsic kMmaSyncF16 = MMAIntrinsic::NV_MMA_SYNC_F32_16x8x16_F16;

TEST(OperandLayout, RowReductionLaneMasks) {
  using Masks = std::vector<int>;
  EXPECT_EQ(getAtom(kMfma32F16).c.rowReductionLaneMasks(), (Masks{1, 2, 4, 8, 16}));
  EXPECT_EQ(getAtom(kMfma16F16).c.rowReductionLaneMasks(), (Masks{1, 2, 4, 8}));
  EXPECT_EQ(getAtom(kWmmaF16).c.rowReductionLaneMasks(), (Masks{1, 2, 4, 8}));
  EXPECT_EQ(getAtom(kMmaSyncF16).c.rowReductionLaneMasks(), (Masks{1, 2}));
  EXPECT_EQ(getAtom(kMmaSyncF16).c.colReductionLaneMasks(), (Masks{4, 8, 16}));
  // WMMA's replicated half-wave (lane basis (0, 0)) holds the same data: reducing with it would double count.
  EXPECT_EQ(getAtom(kWmmaF16).a.rowReductionLaneMasks(), Masks{});
  EXPECT_EQ(getAtom(kWmmaF16).a.colReductionLaneMasks(), (Masks{1, 2, 4, 8}));
}

TEST(OperandLayout, ContiguousRuns) {
  EXPECT_EQ(getAtom(kMmaSyncF16).c.contiguousAlongCols(), 2);
  EXPECT_EQ(getAtom(kMfma32F16).a.contiguousAlongCols(), 4);
  EXPECT_EQ(getAtom(kWmmaF16).a.contiguousAlongCols(), 16);
  EXPECT_EQ(getAtom(kMfma32F16).c.contiguousAlongRows(), 4);
  EXPECT_EQ(getAtom(kMfma32F16).c.contiguousAlongCols(), 1);
  // The run ends at the first element that is not the next column, even if a later one would continue it.
  const OperandLayout broken{4, 4, {{0, 1}, {1, 0}, {0, 2}}, {}};
  EXPECT_EQ(broken.contiguousAlongCols(), 2);
}

TEST(OperandLayout, LaneFieldsAreRunsOfLaneBits) {
  auto fields = [](const OperandLayout &l) {
    std::vector<std::string> out;
    for (const LaneField &f : l.laneFields())
      out.push_back(std::to_string(f.lowBit) + "+" + std::to_string(f.bits) + (f.alongRows ? " rows *" : " cols *") +
                    std::to_string(f.step));
    return out;
  };
  using Fields = std::vector<std::string>;
  EXPECT_EQ(fields(getAtom(kMfma32F16).a), (Fields{"0+5 rows *1", "5+1 cols *4"}));
  // The replicated half-wave contributes nothing.
  EXPECT_EQ(fields(getAtom(kWmmaF16).a), (Fields{"0+4 rows *1"}));
  EXPECT_EQ(fields(getAtom(kMmaSyncF16).c), (Fields{"0+2 cols *2", "2+3 rows *1"}));
  // A run stops where the next basis does not double the step: lane bits 2-4 and 5-6 of the wgmma accumulator.
  EXPECT_EQ(fields(*wgmmaAccumulatorLayout(64)), (Fields{"0+2 cols *2", "2+3 rows *1", "5+2 rows *16"}));
}

// The fields are the lane part of `at`: summed, they give each lane's element 0.
TEST(OperandLayout, LaneFieldsSumToTheLanePosition) {
  std::vector<OperandLayout> layouts;
  for (const MMAAtom &atom : allAtoms()) layouts.insert(layouts.end(), {atom.a, atom.b, atom.c});
  layouts.push_back(*wgmmaAccumulatorLayout(256));
  for (const OperandLayout &layout : layouts)
    for (int lane = 0; lane < layout.lanes(); ++lane) {
      Coord sum;
      for (const LaneField &f : layout.laneFields())
        (f.alongRows ? sum.row : sum.col) += (lane >> f.lowBit & ((1 << f.bits) - 1)) * f.step;
      ASSERT_EQ(str(sum), str(layout.at(lane, 0))) << "lane " << lane;
    }
}

TEST(OperandLayout, ElementAtInvertsLaneZero) {
  for (const MMAAtom &atom : allAtoms())
    for (const OperandLayout *layout : {&atom.a, &atom.b, &atom.c})
      for (int e = 0; e < layout->elementsPerLane(); ++e) EXPECT_EQ(layout->elementAt(layout->at(0, e)), e) << atom.name;
  // Lane 0 of mma.sync C holds rows 0 and 8 only.
  EXPECT_EQ(getAtom(kMmaSyncF16).c.elementAt({1, 0}), std::nullopt);
}

// PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16", accumulator D (f32): warp w of the warpgroup holds rows
// 16w to 16w + 15; with groupID = laneid >> 2 and threadID_in_group = laneid % 4, d_i is at row groupID (+ 8 for
// i % 4 >= 2) and column threadID_in_group * 2 + (i & 1) + 8 * (i >> 2). Written from the ISA, not from the table.
LaneMap ptxWgmmaAccumulator(int n) {
  LaneMap m{64, n, std::vector<std::vector<Coord>>(128)};
  for (int t = 0; t < 128; ++t) {
    const int warp = t / 32, group = (t % 32) >> 2, tig = t % 4;
    for (int i = 0; i < n / 2; ++i)
      m.pos[t].push_back({16 * warp + group + 8 * (i % 4 >= 2), tig * 2 + (i & 1) + 8 * (i >> 2)});
  }
  return m;
}

const std::vector<int> kWgmmaN = {8, 16, 32, 64, 128, 256};

TEST(WgmmaAccumulator, MatchesThePtxFragmentLayout) {
  for (int n : kWgmmaN) {
    std::optional<OperandLayout> layout = wgmmaAccumulatorLayout(n);
    ASSERT_TRUE(layout) << n;
    EXPECT_EQ(layout->lanes(), 128);
    EXPECT_EQ(layout->elementsPerLane(), n / 2);
    EXPECT_EQ(firstMismatch(tableOf(*layout), ptxWgmmaAccumulator(n)), "") << "N = " << n;
    EXPECT_EQ(coverageProblem(*layout, 64, n, 1), "") << "N = " << n;
  }
}

// A random asymmetric 64 x N result, written to registers as the hardware does (PTX) and read back through our layout.
TEST(WgmmaAccumulator, ReadsBackARandomResult) {
  std::mt19937 rng(64);
  for (int n : kWgmmaN) {
    const Matrix d = randomMatrix(64, n, rng);
    const Fragments regs = distribute(d, ptxWgmmaAccumulator(n));
    const Matrix got = gather(regs, tableOf(*wgmmaAccumulatorLayout(n)), 64, n);
    int bad = 0;
    for (size_t i = 0; i < d.v.size(); ++i) bad += !(got.v[i] == d.v[i]);
    EXPECT_EQ(bad, 0) << "N = " << n;
  }
  const OperandLayout transposed = transposedBases(*wgmmaAccumulatorLayout(64));
  const Matrix d = randomMatrix(64, 64, rng);
  const Matrix got = gather(distribute(d, ptxWgmmaAccumulator(64)), tableOf(transposed), 64, 64);
  int bad = 0;
  for (size_t i = 0; i < d.v.size(); ++i) bad += !(got.v[i] == d.v[i]);
  EXPECT_GT(bad, 0) << "the check cannot see a transposed layout";
}

// The same layout read as the mma.sync m16n8 C fragment of each warp, at rows 16w and columns 8j: the formula
// hopper::AccumulatorLayout wrote by hand before it read the table.
TEST(WgmmaAccumulator, IsTheMmaSyncAccumulatorPerWarpAndColumnBlock) {
  const OperandLayout &mma = getAtom(kMmaSyncF16).c;
  const OperandLayout wg = *wgmmaAccumulatorLayout(128);
  for (int warp = 0; warp < 4; ++warp)
    for (int block = 0; block < 128 / 8; ++block)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < mma.elementsPerLane(); ++e) {
          const Coord c = mma.at(lane, e);
          ASSERT_EQ(str(wg.at(32 * warp + lane, 4 * block + e)), str({16 * warp + c.row, 8 * block + c.col}))
              << "warp " << warp << " block " << block << " lane " << lane << " element " << e;
        }
}

TEST(WgmmaAccumulator, NarrowerNIsAPrefixOfTheWidest) {
  const OperandLayout widest = *wgmmaAccumulatorLayout(256);
  for (int n : kWgmmaN)
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < n / 2; ++i) ASSERT_EQ(str(wgmmaAccumulatorLayout(n)->at(t, i)), str(widest.at(t, i)));
}

TEST(WgmmaAccumulator, RowsAreSharedByQuadsOfLanes) {
  EXPECT_EQ(wgmmaAccumulatorLayout(128)->rowReductionLaneMasks(), (std::vector<int>{1, 2}));
  EXPECT_EQ(wgmmaAccumulatorLayout(128)->contiguousAlongCols(), 2);
}

TEST(WgmmaAccumulator, OnlyPowerOfTwoNFrom8To256) {
  for (int n : {0, 4, 24, 192, 512, -8}) EXPECT_FALSE(wgmmaAccumulatorLayout(n).has_value()) << n;
}

} // namespace

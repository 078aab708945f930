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
#include <sstream>
#include <stdexcept>

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

// The independent reference of each atom, keyed by mnemonic so that nothing is taken from the atom table itself.
// gfx950's double-K f16/bf16 MFMAs have no calculator table: the CDNA4 ISA gives them 8 consecutive K per lane
// in the lane pattern of CDNA3's fp8 16x16x32 / 32x32x16, whose byte columns are elements 0..7.
const std::map<std::string, std::string> &calculatorTables() {
  static const std::map<std::string, std::string> tables = {
      {"v_mfma_f32_32x32x8_f16", "cdna3_v_mfma_f32_32x32x8_f16.csv"},
      {"v_mfma_f32_32x32x8_bf16", "cdna3_v_mfma_f32_32x32x8_bf16.csv"},
      {"v_mfma_f32_16x16x16_f16", "cdna3_v_mfma_f32_16x16x16_f16.csv"},
      {"v_mfma_f32_16x16x16_bf16", "cdna3_v_mfma_f32_16x16x16_bf16.csv"},
      {"v_mfma_f32_16x16x32_f16", "cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv"},
      {"v_mfma_f32_16x16x32_bf16", "cdna3_v_mfma_f32_16x16x32_fp8_fp8.csv"},
      {"v_mfma_f32_32x32x16_f16", "cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv"},
      {"v_mfma_f32_32x32x16_bf16", "cdna3_v_mfma_f32_32x32x16_fp8_fp8.csv"},
      {"v_wmma_f32_16x16x16_f16", "rdna3_v_wmma_f32_16x16x16_f16.csv"},
      {"v_wmma_f32_16x16x16_bf16", "rdna3_v_wmma_f32_16x16x16_bf16.csv"},
  };
  return tables;
}

const std::vector<std::string> &ptxM16n8k16Atoms() {
  static const std::vector<std::string> names = {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                                                 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"};
  return names;
}

std::optional<VendorMaps> vendorMaps(const std::string &atomName) {
  if (auto it = calculatorTables().find(atomName); it != calculatorTables().end())
    return readCalculatorCsv(it->second);
  if (std::count(ptxM16n8k16Atoms().begin(), ptxM16n8k16Atoms().end(), atomName)) return ptxM16n8k16();
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

std::vector<std::string> allAtomNames() {
  std::vector<std::string> names;
  for (const MMAAtom &a : allAtoms()) names.push_back(a.name);
  return names;
}

const MMAAtom &atomNamed(const std::string &name) {
  if (const MMAAtom *atom = findAtom(name)) return *atom;
  throw std::invalid_argument("no atom named " + name);
}

// Every atom of the table, against its vendor reference.
class AtomVsVendor : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    atom = findAtom(GetParam());
    ASSERT_NE(atom, nullptr);
    std::optional<VendorMaps> maps = vendorMaps(GetParam());
    ASSERT_TRUE(maps.has_value()) << "no vendor reference for " << GetParam();
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
  std::seed_seq seed(atom->name.begin(), atom->name.end());
  std::mt19937 rng(seed);
  EXPECT_EQ(mismatchesThroughMaps(*atom, vendor, rng), 0);

  MMAAtom transposedA = *atom;
  transposedA.a = transposedBases(atom->a);
  EXPECT_GT(mismatchesThroughMaps(transposedA, vendor, rng), 0) << "the check cannot see a transposed A";
}

INSTANTIATE_TEST_SUITE_P(AllAtoms, AtomVsVendor, ::testing::ValuesIn(allAtomNames()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           std::string name = info.param;
                           std::replace_if(name.begin(), name.end(), [](unsigned char c) { return !std::isalnum(c); }, '_');
                           return name;
                         });

// An atom dropped from the table would otherwise silently drop out of the tests above.
TEST(AtomTable, HasEveryAtomWithAVendorReference) {
  for (const auto &[name, csv] : calculatorTables()) EXPECT_NE(findAtom(name), nullptr) << name;
  for (const std::string &name : ptxM16n8k16Atoms()) EXPECT_NE(findAtom(name), nullptr) << name;
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

TEST(OperandLayout, RowReductionLaneMasks) {
  using Masks = std::vector<int>;
  EXPECT_EQ(atomNamed("v_mfma_f32_32x32x8_f16").c.rowReductionLaneMasks(), (Masks{1, 2, 4, 8, 16}));
  EXPECT_EQ(atomNamed("v_mfma_f32_16x16x16_f16").c.rowReductionLaneMasks(), (Masks{1, 2, 4, 8}));
  EXPECT_EQ(atomNamed("v_wmma_f32_16x16x16_f16").c.rowReductionLaneMasks(), (Masks{1, 2, 4, 8}));
  EXPECT_EQ(atomNamed(ptxM16n8k16Atoms()[0]).c.rowReductionLaneMasks(), (Masks{1, 2}));
  EXPECT_EQ(atomNamed(ptxM16n8k16Atoms()[0]).c.colReductionLaneMasks(), (Masks{4, 8, 16}));
  // WMMA's replicated half-wave (lane basis (0, 0)) holds the same data: reducing with it would double count.
  EXPECT_EQ(atomNamed("v_wmma_f32_16x16x16_f16").a.rowReductionLaneMasks(), Masks{});
  EXPECT_EQ(atomNamed("v_wmma_f32_16x16x16_f16").a.colReductionLaneMasks(), (Masks{1, 2, 4, 8}));
}

TEST(OperandLayout, ContiguousRuns) {
  EXPECT_EQ(atomNamed(ptxM16n8k16Atoms()[0]).c.contiguousAlongCols(), 2);
  EXPECT_EQ(atomNamed("v_mfma_f32_32x32x8_f16").a.contiguousAlongCols(), 4);
  EXPECT_EQ(atomNamed("v_wmma_f32_16x16x16_f16").a.contiguousAlongCols(), 16);
  EXPECT_EQ(atomNamed("v_mfma_f32_32x32x8_f16").c.contiguousAlongRows(), 4);
  EXPECT_EQ(atomNamed("v_mfma_f32_32x32x8_f16").c.contiguousAlongCols(), 1);
  // The run ends at the first element that is not the next column, even if a later one would continue it.
  const OperandLayout broken{4, 4, {{0, 1}, {1, 0}, {0, 2}}, {}};
  EXPECT_EQ(broken.contiguousAlongCols(), 2);
}

} // namespace

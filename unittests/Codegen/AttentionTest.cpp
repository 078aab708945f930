// The attention building blocks (lib/Codegen/Attention) on constants: each piece builds its IR
// into a function whose results fold to constants, checked against brute force (visibility and
// tile ranges, split ranges, accumulator lane offsets) and against the math (softmax, LSE, soft
// cap), and the LDS tile layout they stage through.
#include "tessera/Codegen/Attention/AccView.h"
#include "tessera/Codegen/Attention/Softmax.h"
#include "tessera/Codegen/Attention/Visibility.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

using namespace mlir;
using namespace tessera;
using namespace tessera::attn;

namespace {

/// Builds values with a KernelBuilder into one function, folds it and reads the results back.
class Folder {
public:
  Folder() {
    ctx.loadDialect<arith::ArithDialect, func::FuncDialect, gpu::GPUDialect, math::MathDialect,
                    memref::MemRefDialect, scf::SCFDialect, vector::VectorDialect>();
    module = ModuleOp::create(UnknownLoc::get(&ctx));
    OpBuilder b(&ctx);
    b.setInsertionPointToEnd(module->getBody());
    func = func::FuncOp::create(b, b.getUnknownLoc(), "f", b.getFunctionType({}, {}));
    builder.setInsertionPointToEnd(func.addEntryBlock());
  }
  KernelBuilder kb() { return KernelBuilder(builder, builder.getUnknownLoc(), *lookupTarget("gfx942")); }
  /// Results of the values built so far, after canonicalization; nullopt where one did not fold.
  std::vector<std::optional<double>> fold(ArrayRef<Value> values) {
    OpBuilder b = builder;
    SmallVector<Type> types;
    for (Value v : values) types.push_back(v.getType());
    func::ReturnOp::create(b, b.getUnknownLoc(), values);
    func.setType(b.getFunctionType({}, types));
    // math.fma has no folder: evaluate it (and exp2 / log2, whose folders stop at it) on
    // constants between canonicalizations.
    for (int round = 0; round < 8; ++round) {
      PassManager pm(&ctx);
      pm.addPass(createCanonicalizerPass());
      EXPECT_TRUE(succeeded(pm.run(*module)));
      if (!evaluateMath()) break;
    }
    std::vector<std::optional<double>> out;
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    if (getenv("TESSERA_TEST_DUMP")) module->dump();
    for (Value v : ret.getOperands()) {
      Attribute a;
      if (auto c = v.getDefiningOp<arith::ConstantOp>()) a = c.getValue();
      if (auto i = dyn_cast_or_null<IntegerAttr>(a)) out.push_back(double(i.getInt()));
      else if (auto f = dyn_cast_or_null<FloatAttr>(a)) out.push_back(f.getValueAsDouble());
      else if (auto d = dyn_cast_or_null<DenseElementsAttr>(a); d && d.isSplat())
        out.push_back(d.getSplatValue<FloatAttr>().getValueAsDouble());
      else out.push_back(std::nullopt);
    }
    return out;
  }
  /// Folds `values`, each expected to be an integer constant.
  std::vector<int64_t> ints(ArrayRef<Value> values) {
    std::vector<int64_t> out;
    for (const auto &v : fold(values)) {
      EXPECT_TRUE(v.has_value()) << "a value did not fold to a constant";
      out.push_back(v ? int64_t(*v) : INT64_MIN);
    }
    return out;
  }

private:
  static std::optional<float> constantF32(Value v) {
    if (auto c = v.getDefiningOp<arith::ConstantOp>())
      if (auto f = dyn_cast<FloatAttr>(c.getValue())) return float(f.getValueAsDouble());
    return std::nullopt;
  }
  /// Replaces each scalar math.fma / exp2 / log2 of constants by its value; true if any was.
  bool evaluateMath() {
    bool changed = false;
    func.walk([&](Operation *op) {
      std::optional<float> value;
      auto in = [&](int i) { return constantF32(op->getOperand(i)); };
      if (isa<math::FmaOp>(op) && in(0) && in(1) && in(2)) value = std::fma(*in(0), *in(1), *in(2));
      if (isa<math::Exp2Op>(op) && in(0)) value = std::exp2(*in(0));
      if (isa<math::Log2Op>(op) && in(0)) value = std::log2(*in(0));
      if (!value || !op->getResult(0).getType().isF32()) return;
      OpBuilder b(op);
      Value c = arith::ConstantOp::create(b, op->getLoc(), b.getF32FloatAttr(*value));
      op->getResult(0).replaceAllUsesWith(c);
      changed = true;
    });
    return changed;
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  OpBuilder builder{&ctx};
};

/// One visibility configuration and its brute-force rule.
struct Config {
  MaskKind mask;
  bool window;
  int64_t sq, sk, left, right;

  int64_t offset() const { return mask == MaskKind::CausalTopLeft ? 0 : sk - sq; }
  bool visible(int64_t i, int64_t j) const {
    if (j < 0 || j >= sk) return false;
    int64_t diag = i + offset();
    if (mask != MaskKind::None && j > diag) return false;
    if (window && left >= 0 && j < diag - left) return false;
    if (window && right >= 0 && j > diag + right) return false;
    return true;
  }
  std::string str() const {
    return "mask " + std::to_string(int(mask)) + " window " + std::to_string(window) + " Sq " +
           std::to_string(sq) + " Sk " + std::to_string(sk) + " left " + std::to_string(left) +
           " right " + std::to_string(right);
  }
};

std::vector<Config> configs() {
  std::vector<Config> out;
  std::mt19937 rng(7);
  for (MaskKind mask : {MaskKind::None, MaskKind::CausalTopLeft, MaskKind::CausalBottomRight})
    for (bool window : {false, true})
      for (int n = 0; n < 14; ++n) {
        Config c{mask, window, int64_t(rng() % 70), int64_t(rng() % 70), -1, -1};
        if (window) c.left = int64_t(rng() % 24) - 1, c.right = int64_t(rng() % 24) - 1;
        if (n == 0) c.sq = 0;
        if (n == 1) c.sk = 0;
        out.push_back(c);
      }
  return out;
}

constexpr int kBlock = 16;

/// Builds a Visibility of `c` from constants.
Visibility visibilityOf(KernelBuilder &kb, const Config &c) {
  MaskSpec spec{c.mask, c.window};
  if (c.window)
    return Visibility(spec, kb, kb.idx(c.sq), kb.idx(c.sk), kb.idx(c.left), kb.idx(c.right));
  return Visibility(spec, kb, kb.idx(c.sq), kb.idx(c.sk));
}

TEST(Visibility, KeyAndQueryIntervalsMatchTheRule) {
  for (const Config &c : configs()) {
    Folder f;
    KernelBuilder kb = f.kb();
    Visibility vis = visibilityOf(kb, c);
    SmallVector<Value> values;
    const int64_t queries = c.sq + 8, keys = c.sk + 8;
    for (int64_t i = 0; i < queries; ++i) {
      auto [first, last] = vis.keyInterval(kb.idx(i));
      values.append({first, last});
    }
    for (int64_t j = 0; j < keys; ++j) {
      auto [first, last] = vis.queryInterval(kb.idx(j));
      values.append({first, last});
    }
    std::vector<int64_t> got = f.ints(values);
    size_t at = 0;
    for (int64_t i = 0; i < queries; ++i, at += 2)
      for (int64_t j = -2; j < c.sk + 2; ++j)
        EXPECT_EQ(got[at] <= j && j <= got[at + 1], c.visible(i, j))
            << c.str() << " query " << i << " key " << j;
    for (int64_t j = 0; j < keys; ++j, at += 2)
      for (int64_t i = -2; i < c.sq + 2; ++i)
        EXPECT_EQ(got[at] <= i && i <= got[at + 1], i >= 0 && i < c.sq && c.visible(i, j))
            << c.str() << " key " << j << " query " << i;
  }
}

TEST(Visibility, TileRangesAreExactHulls) {
  for (const Config &c : configs()) {
    Folder f;
    KernelBuilder kb = f.kb();
    Visibility vis = visibilityOf(kb, c);
    SmallVector<Value> values;
    const int64_t queryBlocks = (c.sq + kBlock - 1) / kBlock + 1;
    const int64_t keyBlocks = (c.sk + kBlock - 1) / kBlock + 1;
    for (int64_t m = 0; m < queryBlocks; ++m) {
      Value q0 = kb.idx(m * kBlock), last = kb.idx(m * kBlock + kBlock - 1);
      TileRange any = vis.keyTiles(q0, last, kBlock), whole = vis.unmaskedKeyTiles(q0, last, kBlock);
      values.append({any.lo, any.hi, whole.lo, whole.hi});
    }
    for (int64_t n = 0; n < keyBlocks; ++n) {
      Value k0 = kb.idx(n * kBlock), last = kb.idx(n * kBlock + kBlock - 1);
      TileRange any = vis.queryTiles(k0, last, kBlock);
      TileRange whole = vis.unmaskedQueryTiles(k0, last, kBlock);
      values.append({any.lo, any.hi, whole.lo, whole.hi});
    }
    std::vector<int64_t> got = f.ints(values);
    size_t at = 0;
    // Key tiles of a query block (the forward: queries past Sq follow the rule too).
    for (int64_t m = 0; m < queryBlocks; ++m, at += 4) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (int64_t t = 0; t < keyBlocks; ++t) {
        bool any = false, whole = true;
        for (int64_t i = m * kBlock; i < (m + 1) * kBlock; ++i)
          for (int64_t j = t * kBlock; j < (t + 1) * kBlock; ++j) {
            any |= c.visible(i, j);
            whole &= c.visible(i, j);
          }
        if (any) lo = std::min(lo, t), hi = std::max(hi, t + 1);
        bool unmasked = got[at + 2] <= t && t < got[at + 3];
        if (unmasked) EXPECT_TRUE(whole) << c.str() << " query block " << m << " key tile " << t;
        else if (whole) ADD_FAILURE() << c.str() << " query block " << m << " key tile " << t
                                      << " is whole but masked";
      }
      // The exact hull whenever some key is visible. A block that sees nothing may still walk one
      // key tile, fully masked, when a window starts past the last key (tile granularity).
      if (lo != INT64_MAX)
        EXPECT_EQ(std::pair(got[at], got[at + 1]), std::pair(lo, hi)) << c.str() << " block " << m;
      else
        EXPECT_LE(got[at + 1] - got[at], 1) << c.str() << " query block " << m;
    }
    // Query tiles of a key block (the backward: only queries in [0, Sq) count).
    for (int64_t n = 0; n < keyBlocks; ++n, at += 4) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (int64_t t = 0; t < queryBlocks; ++t) {
        bool any = false, whole = true;
        for (int64_t i = t * kBlock; i < (t + 1) * kBlock; ++i)
          for (int64_t j = n * kBlock; j < (n + 1) * kBlock; ++j) {
            bool seen = i < c.sq && c.visible(i, j);
            any |= seen;
            whole &= seen;
          }
        if (any) lo = std::min(lo, t), hi = std::max(hi, t + 1);
        bool unmasked = got[at + 2] <= t && t < got[at + 3];
        if (unmasked) EXPECT_TRUE(whole) << c.str() << " key block " << n << " query tile " << t;
        else if (whole) ADD_FAILURE() << c.str() << " key block " << n << " query tile " << t
                                      << " is whole but masked";
      }
      if (lo == INT64_MAX) {
        EXPECT_LE(got[at + 1], got[at]) << c.str() << " key block " << n;
      } else {
        // A superset whose ends hold visible queries.
        EXPECT_LE(got[at], lo) << c.str() << " key block " << n;
        EXPECT_GE(got[at + 1], hi) << c.str() << " key block " << n;
        EXPECT_EQ(std::pair(got[at], got[at + 1]), std::pair(lo, hi)) << c.str() << " key block " << n;
      }
    }
  }
}

TEST(Visibility, SplitRangesPartitionTheRange) {
  for (int64_t lo : {0, 3})
    for (int64_t count : {0, 1, 5, 17})
      for (int64_t parts : {1, 3, 4, 20}) {
        Folder f;
        KernelBuilder kb = f.kb();
        TileRange range{kb.idx(lo), kb.idx(lo + count)};
        SmallVector<Value> values;
        for (int64_t part = 0; part < parts; ++part) {
          TileRange r = splitTiles(kb, range, kb.idx(part), kb.idx(parts));
          values.append({r.lo, r.hi});
        }
        std::vector<int64_t> got = f.ints(values);
        int64_t next = lo, covered = 0;
        for (int64_t part = 0; part < parts; ++part) {
          int64_t a = got[2 * part], b = got[2 * part + 1];
          EXPECT_LE(a, b);
          EXPECT_GE(a, lo);
          EXPECT_LE(b, lo + count);
          if (b > a) {
            EXPECT_EQ(a, next) << "parts are consecutive";
            next = b;
          }
          covered += b - a;
          EXPECT_LE(b - a, (count + parts - 1) / parts);
        }
        EXPECT_EQ(covered, count) << lo << " + " << count << " in " << parts;
      }
}

TEST(Visibility, EdgeTileTest) {
  Folder f;
  KernelBuilder kb = f.kb();
  TileRange whole{kb.idx(2), kb.idx(5)};
  SmallVector<Value> values;
  for (int64_t t = 0; t < 7; ++t) values.push_back(isEdgeTile(kb, kb.idx(t), whole));
  std::vector<int64_t> got = f.ints(values);
  for (int64_t t = 0; t < 7; ++t) EXPECT_EQ(got[t] != 0, t < 2 || t >= 5) << t;
}

TEST(AccView, LaneOffsetsAndElementsCoverEveryAtomAccumulator) {
  for (const MMAAtom &atom : allAtoms())
    for (QueryAxis axis : {QueryAxis::Rows, QueryAxis::Cols}) {
      AccView view(atom.c, axis);
      Folder f;
      KernelBuilder kb = f.kb();
      SmallVector<Value> values;
      for (int lane = 0; lane < atom.c.lanes(); ++lane) {
        auto [query, inner] = view.laneOffsets(kb, kb.idx(lane));
        values.append({query, inner});
      }
      std::vector<int64_t> got = f.ints(values);
      std::set<std::pair<int, int>> seen;
      for (int lane = 0; lane < atom.c.lanes(); ++lane)
        for (const AccElement &el : view.elements()) {
          Coord c = atom.c.at(lane, el.reg);
          int query = got[2 * lane] + el.query, inner = got[2 * lane + 1] + el.inner;
          EXPECT_EQ(query, axis == QueryAxis::Rows ? c.row : c.col) << atom.name;
          EXPECT_EQ(inner, axis == QueryAxis::Rows ? c.col : c.row) << atom.name;
          seen.insert({query, inner});
        }
      EXPECT_EQ(int(seen.size()), atom.m * atom.n) << atom.name << ": every position once";
      // The query lane masks move along the inner axis only, and the writer lanes (non-query bits
      // clear) hold each query once.
      for (int mask : view.queryLaneMasks())
        for (int lane = 0; lane < atom.c.lanes(); ++lane)
          EXPECT_EQ(view.query(atom.c.at(lane ^ mask, 0)), view.query(atom.c.at(lane, 0)));
      std::map<int, int> writers;
      for (int lane = 0; lane < atom.c.lanes(); ++lane)
        if ((lane & view.nonQueryLaneBits()) == 0) ++writers[view.query(atom.c.at(lane, 0))];
      for (auto [query, n] : writers) EXPECT_EQ(n, 1) << atom.name << " query " << query;
    }
}

TEST(LdsLayout, SwizzledRowsOfAChunkColumnHitEveryBankGroup) {
  // 16-bit tiles of 4 to 32 chunks a row (head_dim 32 to 256): every chunk of a row once, and
  // eight consecutive rows of one chunk column (an ldmatrix, a 16-byte read per lane) in eight
  // different 16-byte bank groups of 128 bytes: one wavefront.
  for (int cols : {32, 64, 96, 128, 256}) {
    Folder f;
    KernelBuilder kb = f.kb();
    LdsTile tile;
    tile.rows = 16, tile.cols = cols, tile.rowStride = cols, tile.chunk = 8;
    tile.swizzle = LdsSwizzle::Xor;
    const int chunks = cols / 8;
    SmallVector<Value> values;
    for (int r = 0; r < tile.rows; ++r)
      for (int c = 0; c < chunks; ++c) values.push_back(kb.ldsOffset(tile, kb.idx(r), kb.idx(8 * c)));
    std::vector<int64_t> got = f.ints(values);
    for (int r = 0; r < tile.rows; ++r) {
      std::set<int64_t> row;
      for (int c = 0; c < chunks; ++c) {
        int64_t at = got[r * chunks + c];
        EXPECT_EQ(at % 8, 0);
        EXPECT_EQ(at / cols, r) << "a chunk left its row";
        row.insert(at);
      }
      EXPECT_EQ(int(row.size()), chunks) << "cols " << cols << " row " << r;
    }
    for (int r0 = 0; r0 < tile.rows; r0 += 8)
      for (int c = 0; c < chunks; ++c) {
        std::set<int64_t> groups;
        for (int r = r0; r < r0 + 8; ++r) groups.insert(got[r * chunks + c] / 8 % 8);
        EXPECT_EQ(groups.size(), 8u) << "cols " << cols << " rows " << r0 << "+ chunk " << c;
      }
  }
}

constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;

TEST(OnlineSoftmax, EmptyRowsGiveZerosAndMinusInfinityNeverNaN) {
  for (bool raw : {false, true}) {
    Folder f;
    KernelBuilder kb = f.kb();
    OnlineSoftmax sm(kb, raw ? kb.f32(0.125 * kLog2e) : Value());
    Value negInf = kb.f32(-INFINITY);
    Value shift = sm.shiftFor(negInf);
    std::vector<std::optional<double>> got =
        f.fold({shift, sm.exp2Shifted(negInf, shift), sm.inverseSum(kb.f32(0)),
                sm.logSumExp(negInf, kb.f32(0)),
                sm.probabilityFromLse(kb.f32(3.0), sm.lseToShift(negInf))});
    for (const auto &v : got) ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*got[0], 0.0);        // a -inf max shifts by 0
    EXPECT_EQ(*got[1], 0.0);        // exp2(-inf - 0): the rescale of an empty row
    EXPECT_EQ(*got[2], 0.0);        // 1 / l of an empty row is 0, not inf
    EXPECT_EQ(*got[3], -INFINITY);  // its LSE
    EXPECT_EQ(*got[4], 0.0);        // the backward's P of a row that saw nothing
  }
}

TEST(OnlineSoftmax, StepsAndFinalizeMatchTheDirectSoftmax) {
  // Two steps of online softmax over scores {1.5, -2} then {4, 0.25} (natural logits x scale),
  // against the direct softmax in double.
  const double scale = 0.3;
  const double s[4] = {1.5, -2.0, 4.0, 0.25};
  for (bool raw : {false, true}) {
    Folder f;
    KernelBuilder kb = f.kb();
    OnlineSoftmax sm(kb, raw ? kb.f32(scale * kLog2e) : Value());
    auto score = [&](double x) { return kb.f32(raw ? x : x * scale * kLog2e); };
    Value m1 = kb.fmax(score(s[0]), score(s[1]));
    Value sh1 = sm.shiftFor(m1);
    Value l1 = kb.fadd(sm.exp2Shifted(score(s[0]), sh1), sm.exp2Shifted(score(s[1]), sh1));
    Value m2 = kb.fmax(m1, kb.fmax(score(s[2]), score(s[3])));
    Value sh2 = sm.shiftFor(m2);
    Value alpha = sm.exp2Shifted(m1, sh2);
    Value p2 = sm.exp2Shifted(score(s[2]), sh2);
    Value l2 = sm.nextSum(l1, alpha, kb.fadd(p2, sm.exp2Shifted(score(s[3]), sh2)));
    Value lse = sm.logSumExp(m2, l2);
    Value recomputed = sm.probabilityFromLse(score(s[2]), sm.lseToShift(lse));
    std::vector<std::optional<double>> got = f.fold({kb.fmul(p2, sm.inverseSum(l2)), lse, recomputed});
    double denom = 0;
    for (double x : s) denom += std::exp(x * scale);
    for (const auto &v : got) ASSERT_TRUE(v.has_value());
    EXPECT_NEAR(*got[0], std::exp(s[2] * scale) / denom, 1e-6) << "raw " << raw;
    EXPECT_NEAR(*got[1], std::log(denom), 1e-6) << "raw " << raw;
    EXPECT_NEAR(*got[2], std::exp(s[2] * scale) / denom, 1e-6) << "raw " << raw;
    (void)kLn2;
  }
}

TEST(Softcap, ScoresAndDerivative) {
  const double scale = 0.5, cap = 3.0;
  for (double x : {-30.0, -1.0, 0.0, 2.0, 50.0}) {
    Folder f;
    KernelBuilder kb = f.kb();
    auto vt = VectorType::get({2}, Float32Type::get(kb.builder().getContext()));
    auto splat = [&](double v) {
      return vector::BroadcastOp::create(kb.builder(), kb.location(), vt, kb.f32(v)).getResult();
    };
    Value capped = scaledScores(kb, splat(x), kb.f32(scale * kLog2e), kb.f32(cap));
    Value uncapped = scaledScores(kb, splat(x), kb.f32(scale * kLog2e), kb.f32(0));
    double c = cap * std::tanh(x * scale / cap);
    CappedScores direct = capScores(kb, kb.f32(x * scale * kLog2e), kb.f32(cap));
    std::vector<std::optional<double>> got =
        f.fold({capped, uncapped, direct.slope, direct.scores});
    for (const auto &v : got) ASSERT_TRUE(v.has_value()) << x;
    EXPECT_NEAR(*got[0], c * kLog2e, 1e-5 * std::max(1.0, std::abs(c))) << x;
    EXPECT_NEAR(*got[1], x * scale * kLog2e, 1e-5 * std::max(1.0, std::abs(x))) << x;
    double t = std::tanh(x * scale / cap);
    EXPECT_NEAR(*got[2], 1 - t * t, 1e-6) << x;
    EXPECT_NEAR(*got[3], c * kLog2e, 1e-5 * std::max(1.0, std::abs(c))) << x;
  }
}

} // namespace

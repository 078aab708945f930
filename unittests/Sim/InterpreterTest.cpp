// The interpreter on hand-written kernel IR: divergent control flow, cross-lane semantics, vector ops, and every check.
#include "tessera/Sim/Simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

namespace {
using namespace tessera::sim;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

/// A kernel module on `target` around one gpu.func body.
std::string module(const std::string &target, const std::string &func) {
  std::string attr = target.rfind("sm_", 0) == 0 ? "#nvvm.target<chip = \"" + target + "\">"
                                                 : "#rocdl.target<chip = \"" + target + "\">";
  return "module attributes {gpu.container_module} {\n  gpu.module @m [" + attr + "] {\n" + func + "\n  }\n}\n";
}

std::unique_ptr<Kernel> load(const std::string &ir) {
  auto k = Kernel::fromSource(ir, "test.mlir", {});
  EXPECT_TRUE(bool(k)) << (k ? "" : llvm::toString(k.takeError()));
  return k ? std::move(*k) : nullptr;
}

template <typename T> ArgValue buffer(std::vector<T> &v) {
  return ArgValue::ofBuffer({v.data(), v.size() * sizeof(T), 0});
}

/// The failure message of a launch that must fail.
std::string launchError(const Kernel &k, LaunchConfig config, std::vector<ArgValue> args) {
  auto stats = k.launch(config, args);
  if (stats)
    return "(the launch succeeded)";
  return llvm::toString(stats.takeError());
}

TEST(Interpreter, DivergentLoopsBranchesAndWhile) {
  auto k = load(module("gfx942", R"(
    gpu.func @k(%out: memref<?xi32>, %out2: memref<?xi32>, %out3: memref<?xi32>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %t = gpu.thread_id x
      // Per-thread trip count: thread t sums 0 .. t-1.
      %sum = scf.for %i = %c0 to %t step %c1 iter_args(%acc = %c0) -> (index) {
        %n = arith.addi %acc, %i : index
        scf.yield %n : index
      }
      %s = arith.index_cast %sum : index to i32
      memref.store %s, %out[%t] : memref<?xi32>
      %r = arith.remui %t, %c3 : index
      %z = arith.cmpi eq, %r, %c0 : index
      %v = scf.if %z -> (index) {
        %d = arith.muli %t, %c3 : index
        scf.yield %d : index
      } else {
        %n = arith.subi %c0, %t : index
        scf.yield %n : index
      }
      %v32 = arith.index_cast %v : index to i32
      memref.store %v32, %out2[%t] : memref<?xi32>
      // floor(log2(t)) by halving.
      %w:2 = scf.while (%x = %t, %n = %c0) : (index, index) -> (index, index) {
        %more = arith.cmpi ugt, %x, %c1 : index
        scf.condition(%more) %x, %n : index, index
      } do {
      ^bb0(%x2: index, %n2: index):
        %h = arith.divui %x2, %c2 : index
        %n3 = arith.addi %n2, %c1 : index
        scf.yield %h, %n3 : index, index
      }
      %l = arith.index_cast %w#1 : index to i32
      memref.store %l, %out3[%t] : memref<?xi32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::vector<int32_t> out(64), out2(64), out3(64);
  ASSERT_TRUE(bool(k->launch({}, {buffer(out), buffer(out2), buffer(out3)})));
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(out[t], t * (t - 1) / 2) << t;
    EXPECT_EQ(out2[t], t % 3 == 0 ? 3 * t : -t) << t;
    EXPECT_EQ(out3[t], t > 1 ? int(std::floor(std::log2(t))) : 0) << t;
  }
}

TEST(Interpreter, ShufflesWithinWidthSegments) {
  auto k = load(module("gfx942", R"(
    gpu.func @k(%out: memref<?xf32>, %ok: memref<?xi32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %t = gpu.thread_id x
      %tf = arith.index_cast %t : index to i32
      %v = arith.sitofp %tf : i32 to f32
      %c2 = arith.constant 2 : i32
      %c3 = arith.constant 3 : i32
      %c5 = arith.constant 5 : i32
      %c7 = arith.constant 7 : i32
      %w16 = arith.constant 16 : i32
      %w32 = arith.constant 32 : i32
      %w64 = arith.constant 64 : i32
      %x, %xv = gpu.shuffle xor %v, %c5, %w64 : f32
      %d, %dv = gpu.shuffle down %v, %c3, %w16 : f32
      %u, %uv = gpu.shuffle up %v, %c2, %w32 : f32
      %i, %iv = gpu.shuffle idx %v, %c7, %w64 : f32
      %c128 = arith.constant 128 : index
      %o1 = arith.addi %t, %c128 : index
      %o2 = arith.addi %o1, %c128 : index
      %o3 = arith.addi %o2, %c128 : index
      memref.store %x, %out[%t] : memref<?xf32>
      memref.store %d, %out[%o1] : memref<?xf32>
      memref.store %u, %out[%o2] : memref<?xf32>
      memref.store %i, %out[%o3] : memref<?xf32>
      %b1 = arith.extui %dv : i1 to i32
      %b2 = arith.extui %uv : i1 to i32
      memref.store %b1, %ok[%t] : memref<?xi32>
      memref.store %b2, %ok[%o1] : memref<?xi32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::vector<float> out(512);
  std::vector<int32_t> ok(256);
  ASSERT_TRUE(bool(k->launch({}, {buffer(out), buffer(ok)})));
  for (int t = 0; t < 128; ++t) {
    int lane = t % 64, wave = t - lane;
    EXPECT_EQ(out[t], wave + (lane ^ 5)) << t;
    bool down = lane % 16 + 3 < 16, up = lane % 32 >= 2;
    EXPECT_EQ(out[128 + t], down ? t + 3 : t) << t;
    EXPECT_EQ(ok[t], down) << t;
    EXPECT_EQ(out[256 + t], up ? t - 2 : t) << t;
    EXPECT_EQ(ok[128 + t], up) << t;
    EXPECT_EQ(out[384 + t], wave + 7) << t;
  }
}

/// One DPP control applied to src = lane id, old = -1.
struct DppCase {
  const char *control;
  std::function<float(int lane)> expect;
};

TEST(Interpreter, DppControls) {
  const DppCase cases[] = {
      {"quad_perm([3 : i32, 2 : i32, 1 : i32, 0 : i32])", [](int l) { return float((l & ~3) + 3 - (l & 3)); }},
      {"row_shl(1 : i32)", [](int l) { return l % 16 < 15 ? float(l + 1) : -1.0f; }},
      {"row_shr(2 : i32) {bound_ctrl = true}", [](int l) { return l % 16 >= 2 ? float(l - 2) : 0.0f; }},
      {"row_ror(3 : i32)", [](int l) { return float(l / 16 * 16 + (l % 16 + 13) % 16); }},
      {"row_mirror", [](int l) { return float(l / 16 * 16 + 15 - l % 16); }},
      {"row_half_mirror", [](int l) { return float(l / 8 * 8 + 7 - l % 8); }},
      {"row_bcast_15 {row_mask = 10 : i32}",
       [](int l) { return l / 16 == 1 || l / 16 == 3 ? float(l / 16 * 16 - 1) : -1.0f; }},
      {"row_bcast_31 {row_mask = 12 : i32}", [](int l) { return l >= 32 ? 31.0f : -1.0f; }},
      {"wave_shr {bound_ctrl = true}", [](int l) { return l > 0 ? float(l - 1) : 0.0f; }},
      {"wave_rol", [](int l) { return float((l + 1) % 64); }},
      {"quad_perm([1 : i32, 0 : i32, 3 : i32, 2 : i32]) {bank_mask = 5 : i32}",
       [](int l) { return (l % 16 / 4) % 2 == 0 ? float(l ^ 1) : -1.0f; }},
  };
  for (const DppCase &c : cases) {
    auto k = load(module("gfx942", std::string(R"(
    gpu.func @k(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %ti = arith.index_cast %t : index to i32
      %v = arith.sitofp %ti : i32 to f32
      %old = arith.constant -1.0 : f32
      %d = amdgpu.dpp %old %v )") + c.control +
                                       R"( : f32
      memref.store %d, %out[%t] : memref<?xf32>
      gpu.return
    })"));
    ASSERT_TRUE(k) << c.control;
    std::vector<float> out(64);
    ASSERT_TRUE(bool(k->launch({}, {buffer(out)})));
    for (int l = 0; l < 64; ++l)
      EXPECT_EQ(out[l], c.expect(l)) << c.control << " lane " << l;
  }
}

// AMD's wave64 inclusive scan (GPUOpen, "AMD GCN Assembly: Cross-Lane Operations"): row_shr 1,
// 2, 3 with bound_ctrl, row_shr 4 / 8 on banks 0xe / 0xc, then row_bcast 15 and 31.
TEST(Interpreter, DppWaveScan) {
  auto k = load(module("gfx942", R"(
    gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %zero = arith.constant 0.0 : f32
      %v0 = memref.load %in[%t] : memref<?xf32>
      %p1 = amdgpu.dpp %zero %v0 row_shr(1 : i32) {bound_ctrl = true} : f32
      %s1 = arith.addf %v0, %p1 : f32
      %p2 = amdgpu.dpp %zero %v0 row_shr(2 : i32) {bound_ctrl = true} : f32
      %s2 = arith.addf %s1, %p2 : f32
      %p3 = amdgpu.dpp %zero %v0 row_shr(3 : i32) {bound_ctrl = true} : f32
      %s3 = arith.addf %s2, %p3 : f32
      %p4 = amdgpu.dpp %zero %s3 row_shr(4 : i32) {bank_mask = 14 : i32} : f32
      %s4 = arith.addf %s3, %p4 : f32
      %p5 = amdgpu.dpp %zero %s4 row_shr(8 : i32) {bank_mask = 12 : i32} : f32
      %s5 = arith.addf %s4, %p5 : f32
      %p6 = amdgpu.dpp %zero %s5 row_bcast_15 {row_mask = 10 : i32} : f32
      %s6 = arith.addf %s5, %p6 : f32
      %p7 = amdgpu.dpp %zero %s6 row_bcast_31 {row_mask = 12 : i32} : f32
      %s7 = arith.addf %s6, %p7 : f32
      memref.store %s7, %out[%t] : memref<?xf32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::mt19937 rng(std::random_device{}());
  std::vector<float> in(64), out(64);
  for (float &v : in)
    v = float(int(rng() % 17) - 8); // small integers: every partial sum is exact
  ASSERT_TRUE(bool(k->launch({}, {buffer(in), buffer(out)})));
  float prefix = 0;
  for (int l = 0; l < 64; ++l)
    EXPECT_EQ(out[l], prefix += in[l]) << "lane " << l;
}

TEST(Interpreter, VectorOpsAndConversions) {
  auto k = load(module("gfx942", R"(
    gpu.func @k(%out: memref<?xf32>, %bits: memref<?xi32>) kernel attributes {known_block_size = array<i32: 1, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c2 = arith.constant 2 : index
      %a = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
      %b = arith.constant dense<[10.0, 20.0, 30.0, 40.0]> : vector<4xf32>
      %s = vector.shuffle %a, %b [7, 0, 5, 2] : vector<4xf32>, vector<4xf32>
      %e = vector.extract %s[%c2] : f32 from vector<4xf32>
      %x = arith.constant 100.0 : f32
      %i = vector.insert %x, %s [1] : f32 into vector<4xf32>
      %r = vector.reduction <add>, %i : vector<4xf32> into f32
      %m = vector.reduction <maxnumf>, %s : vector<4xf32> into f32
      %bc = vector.broadcast %e : f32 to vector<2xf32>
      %f = vector.fma %bc, %bc, %bc : vector<2xf32>
      %f0 = vector.extract %f[1] : f32 from vector<2xf32>
      %h = arith.truncf %a : vector<4xf32> to vector<4xf16>
      %hs = vector.extract_strided_slice %h {offsets = [2], sizes = [2], strides = [1]} : vector<4xf16> to vector<2xf16>
      %word = vector.bitcast %hs : vector<2xf16> to vector<1xi32>
      %w = vector.extract %word[0] : i32 from vector<1xi32>
      %q = arith.constant 300.0 : f32
      %q8 = arith.truncf %q : f32 to f8E4M3FNUZ
      %q8b = arith.bitcast %q8 : f8E4M3FNUZ to i8
      %q32 = arith.extui %q8b : i8 to i32
      %p = arith.constant 0.3 : f32
      %p8 = arith.truncf %p : f32 to f8E4M3FN
      %pf = arith.extf %p8 : f8E4M3FN to f32
      %el = vector.from_elements %e, %r, %m, %f0, %pf : vector<5xf32>
      vector.store %el, %out[%c0] : memref<?xf32>, vector<5xf32>
      %c1 = arith.constant 1 : index
      memref.store %w, %bits[%c0] : memref<?xi32>
      memref.store %q32, %bits[%c1] : memref<?xi32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::vector<float> out(5);
  std::vector<int32_t> bits(2);
  ASSERT_TRUE(bool(k->launch({}, {buffer(out), buffer(bits)})));
  EXPECT_EQ(out[0], 20.0f);                // s = [40, 1, 20, 3]
  EXPECT_EQ(out[1], 40.0f + 100 + 20 + 3); // insert at 1, then sum
  EXPECT_EQ(out[2], 40.0f);
  EXPECT_EQ(out[3], 20.0f * 20 + 20);
  EXPECT_EQ(out[4], 0.3125f);                // 0.3 to e4m3: 1.25 * 2^-2
  EXPECT_EQ(uint32_t(bits[0]), 0x44004200u); // f16 4.0 (high) and 3.0 (low)
  EXPECT_EQ(bits[1], 0x80);                  // 300 overflows e4m3 FNUZ: its NaN
}

TEST(Interpreter, MultiDimensionalVectorMoves) {
  auto k = load(module("gfx942", R"(
    gpu.func @k(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 1, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c6 = arith.constant 6 : index
      %c12 = arith.constant 12 : index
      %m = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : vector<2x3xf32>
      %tr = vector.transpose %m, [1, 0] : vector<2x3xf32> to vector<3x2xf32>
      %t6 = vector.shape_cast %tr : vector<3x2xf32> to vector<6xf32>
      %col = arith.constant dense<[[10.0], [20.0]]> : vector<2x1xf32>
      %bc = vector.broadcast %col : vector<2x1xf32> to vector<2x3xf32>
      %b6 = vector.shape_cast %bc : vector<2x3xf32> to vector<6xf32>
      %lo = vector.extract %m[1] : vector<3xf32> from vector<2x3xf32>
      %hi = vector.extract %m[0] : vector<3xf32> from vector<2x3xf32>
      %il = vector.interleave %lo, %hi : vector<3xf32> -> vector<6xf32>
      vector.store %t6, %out[%c0] : memref<?xf32>, vector<6xf32>
      vector.store %b6, %out[%c6] : memref<?xf32>, vector<6xf32>
      vector.store %il, %out[%c12] : memref<?xf32>, vector<6xf32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::vector<float> out(18);
  ASSERT_TRUE(bool(k->launch({}, {buffer(out)})));
  EXPECT_EQ(out, (std::vector<float>{1, 4, 2, 5, 3, 6, 10, 10, 10, 20, 20, 20, 4, 1, 5, 2, 6, 3}));
}

TEST(Interpreter, WorkgroupGlobalsAndDynamicSharedMemory) {
  // Each thread writes its id into a workgroup global and into a typed view of dynamic shared
  // memory, then reads its neighbour's from both.
  std::string ir = R"(module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx942">] {
    memref.global "private" @tile : memref<64xi32, #gpu.address_space<workgroup>>
    gpu.func @k(%out: memref<?xi32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %c256 = arith.constant 256 : index
      %g = memref.get_global @tile : memref<64xi32, #gpu.address_space<workgroup>>
      %dyn = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %view = memref.view %dyn[%c256][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64xi32, #gpu.address_space<workgroup>>
      %ti = arith.index_cast %t : index to i32
      memref.store %ti, %g[%t] : memref<64xi32, #gpu.address_space<workgroup>>
      %neg = arith.subi %ti, %ti : i32
      %m = arith.subi %neg, %ti : i32
      memref.store %m, %view[%t] : memref<64xi32, #gpu.address_space<workgroup>>
      gpu.barrier
      %n0 = arith.addi %t, %c1 : index
      %n = arith.remui %n0, %c64 : index
      %a = memref.load %g[%n] : memref<64xi32, #gpu.address_space<workgroup>>
      %b = memref.load %view[%n] : memref<64xi32, #gpu.address_space<workgroup>>
      %o = arith.addi %t, %c64 : index
      memref.store %a, %out[%t] : memref<?xi32>
      memref.store %b, %out[%o] : memref<?xi32>
      gpu.return
    }
  }
})";
  auto k = load(ir);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->info().staticLdsBytes, 256u);
  std::vector<int32_t> out(128);
  LaunchConfig config;
  EXPECT_THAT(launchError(*k, config, {buffer(out)}),
              HasSubstr("uses dynamic shared memory but the launch gives 0 bytes"));
  config.dynamicLdsBytes = 512;
  ASSERT_TRUE(bool(k->launch(config, {buffer(out)})));
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(out[t], (t + 1) % 64);
    EXPECT_EQ(out[64 + t], -((t + 1) % 64));
  }
  // The view starts 256 bytes in: 320 bytes of dynamic memory leave it 64 bytes short.
  config.dynamicLdsBytes = 320;
  EXPECT_THAT(launchError(*k, config, {buffer(out)}), HasSubstr("out-of-bounds store to dynamic shared memory"));
}

TEST(Interpreter, WorkgroupsSpreadOverHostThreads) {
  auto k = load(module("gfx1100", R"(
    gpu.func @k(%out: memref<?xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %b = gpu.block_id x
      %by = gpu.block_id y
      %gx = gpu.grid_dim x
      %t = gpu.thread_id x
      %c32 = arith.constant 32 : index
      %row = arith.muli %by, %gx : index
      %blk = arith.addi %row, %b : index
      %base = arith.muli %blk, %c32 : index
      %i = arith.addi %base, %t : index
      %v = arith.index_cast %i : index to i32
      memref.store %v, %out[%i] : memref<?xi32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::vector<int32_t> out(32 * 7 * 5, -1);
  LaunchConfig config;
  config.grid = {7, 5, 1};
  config.threads = 3;
  auto stats = k->launch(config, {buffer(out)});
  ASSERT_TRUE(bool(stats)) << llvm::toString(stats.takeError());
  EXPECT_EQ(stats->workgroups, 35u);
  for (int i = 0; i < int(out.size()); ++i)
    ASSERT_EQ(out[i], i);
  // A failure in one workgroup stops the others and reports the lowest failing workgroup.
  std::vector<int32_t> small(32 * 20);
  EXPECT_THAT(launchError(*k, config, {buffer(small)}), HasSubstr("in thread (0,0,0) of block (6,2,0)"));
}

// ---- Checks --------------------------------------------------------------------------------------

const char *kStoreByThread = R"(
    gpu.func @k(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %v = arith.constant 1.0 : f32
      memref.store %v, %out[%t] : memref<?xf32>
      gpu.return
    })";

TEST(Checks, OutOfBoundsGlobalStoreNamesLocationThreadIndexAndSize) {
  auto k = load(module("gfx942", kStoreByThread));
  ASSERT_TRUE(k);
  std::vector<float> out(16);
  LaunchConfig config;
  config.grid = {2, 1, 1};
  EXPECT_THAT(launchError(*k, config, {buffer(out)}),
              MatchesRegex("test.mlir:7:7: error: memref.store: out-of-bounds store to arg0 at index \\[16\\]: bytes "
                           "\\[64, 68\\) of a global buffer of 64 bytes, in thread \\(16,0,0\\) of block \\(0,0,0\\)"));
}

TEST(Checks, PointerInsideAnAllocationMayReachBackToItsStart) {
  auto k = load(module("gfx942", kStoreByThread));
  ASSERT_TRUE(k);
  std::vector<float> whole(80);
  // The kernel's pointer is 16 floats into an 80-float allocation: all 64 stores fit.
  EXPECT_TRUE(bool(k->launch({}, {ArgValue::ofBuffer({whole.data() + 16, 64 * 4, 16 * 4})})));
  EXPECT_THAT(launchError(*k, {}, {ArgValue::ofBuffer({whole.data() + 32, 48 * 4, 32 * 4})}),
              HasSubstr("global buffer of 192 bytes (128 more before the pointer)"));
}

TEST(Checks, OutOfBoundsLdsAccess) {
  auto k = load(module("gfx942", R"(
    gpu.func @k() workgroup(%lds : memref<32xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %v = arith.constant 1.0 : f32
      memref.store %v, %lds[%t] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  EXPECT_THAT(launchError(*k, {}, {}),
              HasSubstr("out-of-bounds store to workgroup buffer #0 (memref<32xf32, #gpu.address_space<workgroup>>) "
                        "at index [32]: bytes [128, 132) of a workgroup buffer of 128 bytes, in thread (32,0,0)"));
}

TEST(Checks, ReadOfLdsNeverWritten) {
  auto k = load(module("gfx942", R"(
    gpu.func @k(%out: memref<?xf32>) workgroup(%lds : memref<64xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c32 = arith.constant 32 : index
      %low = arith.cmpi ult, %t, %c32 : index
      scf.if %low {
        %v = arith.constant 1.0 : f32
        memref.store %v, %lds[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      %n = arith.addi %t, %c1 : index
      %r = scf.if %low -> (f32) {
        %x = memref.load %lds[%n] : memref<64xf32, #gpu.address_space<workgroup>>
        scf.yield %x : f32
      } else {
        %z = arith.constant 0.0 : f32
        scf.yield %z : f32
      }
      memref.store %r, %out[%t] : memref<?xf32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  std::vector<float> out(64);
  EXPECT_THAT(
      launchError(*k, {}, {buffer(out)}),
      MatchesRegex("test.mlir:17:14: error: memref.load: read of LDS never written: workgroup buffer #0 .* "
                   "byte 128 \\(access of bytes \\[128, 132\\)\\), in thread \\(31,0,0\\) of block \\(0,0,0\\)"));
}

TEST(Checks, LdsIsFreshForEveryWorkgroup) {
  // Workgroup 0 writes LDS and reads it back; workgroup 1 only reads: it must be reported.
  auto k = load(module("gfx942", R"(
    gpu.func @k() workgroup(%lds : memref<64xf32, #gpu.address_space<workgroup>>) kernel
        attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %c0 = arith.constant 0 : index
      %first = arith.cmpi eq, %b, %c0 : index
      scf.if %first {
        %v = arith.constant 1.0 : f32
        memref.store %v, %lds[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      }
      %x = memref.load %lds[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  LaunchConfig config;
  config.grid = {2, 1, 1};
  EXPECT_THAT(launchError(*k, config, {}), HasSubstr("read of LDS never written: workgroup buffer #0"));
  EXPECT_THAT(launchError(*k, config, {}), HasSubstr("in thread (0,0,0) of block (1,0,0)"));
}

TEST(Checks, BarrierReachedByPartOfTheWorkgroup) {
  auto k = load(module("gfx942", R"(
    gpu.func @k() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %t = gpu.thread_id x
      %c96 = arith.constant 96 : index
      %low = arith.cmpi ult, %t, %c96 : index
      scf.if %low {
        gpu.barrier
      }
      gpu.return
    })"));
  ASSERT_TRUE(k);
  EXPECT_THAT(
      launchError(*k, {}, {}),
      MatchesRegex("test.mlir:9:9: error: gpu.barrier: barrier reached by 96 of 128 threads \\(divergent "
                   "barrier; thread \\(96,0,0\\) of block \\(0,0,0\\) does not reach it\\), in block \\(0,0,0\\)"));
}

TEST(Checks, BarrierInALoopWithPerThreadTripCounts) {
  auto k = load(module("gfx1100", R"(
    gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %t step %c1 {
        gpu.barrier
      }
      gpu.return
    })"));
  ASSERT_TRUE(k);
  EXPECT_THAT(launchError(*k, {}, {}), HasSubstr("barrier reached by 31 of 32 threads"));
}

TEST(Checks, UnsupportedOperationsAreRejectedByNameBeforeRunning) {
  auto k = Kernel::fromSource(module("gfx942", R"(
    gpu.func @k(%out: memref<?xf32>) kernel {
      %t = gpu.thread_id x
      %v = arith.constant 1.0 : f32
      %r = gpu.subgroup_reduce add %v : (f32) -> f32
      %c = math.cbrt %r : f32
      memref.store %c, %out[%t] : memref<?xf32>
      gpu.return
    })"),
                              "test.mlir", {});
  ASSERT_FALSE(bool(k));
  std::string message = llvm::toString(k.takeError());
  EXPECT_THAT(message, HasSubstr("test.mlir:7:12: error: unsupported operation 'gpu.subgroup_reduce'"));
  EXPECT_THAT(message, HasSubstr("test.mlir:8:12: error: unsupported operation 'math.cbrt'"));
}

TEST(Checks, MatrixInstructionsMustExistOnTheTarget) {
  auto k = Kernel::fromSource(module("gfx942", R"(
    gpu.func @k(%a: vector<8xf16>, %c: vector<16xf32>) kernel {
      %d = amdgpu.mfma 32x32x16 %a * %a + %c blgp = none : vector<8xf16>, vector<8xf16>, vector<16xf32>
      gpu.return
    })"),
                              "test.mlir", {});
  ASSERT_FALSE(bool(k));
  EXPECT_THAT(llvm::toString(k.takeError()), HasSubstr("v_mfma_f32_32x32x16_f16 is not an instruction of gfx942"));
}

TEST(Checks, Fp8MatrixInstructionsFollowTheTargetsFormat) {
  const char *mfma = R"(
    gpu.func @k(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %a = arith.constant dense<0.5> : vector<8xTYPE>
      %c = arith.constant dense<1.0> : vector<4xf32>
      %d = amdgpu.mfma 16x16x32 %a * %a + %c blgp = none : vector<8xTYPE>, vector<8xTYPE>, vector<4xf32>
      %e = vector.extract %d[0] : f32 from vector<4xf32>
      memref.store %e, %out[%t] : memref<?xf32>
      gpu.return
    })";
  auto withType = [&](const std::string &type) {
    std::string ir = mfma;
    for (size_t at; (at = ir.find("TYPE")) != std::string::npos;)
      ir.replace(at, 4, type);
    return ir;
  };
  // gfx950 has OCP e4m3: 1 + 32 * 0.25 per element.
  auto k = load(module("gfx950", withType("f8E4M3FN")));
  ASSERT_TRUE(k);
  std::vector<float> out(64);
  ASSERT_TRUE(bool(k->launch({}, {buffer(out)})));
  EXPECT_EQ(out[0], 9.0f);
  auto wrong = Kernel::fromSource(module("gfx942", withType("f8E4M3FN")), "test.mlir", {});
  ASSERT_FALSE(bool(wrong));
  EXPECT_THAT(llvm::toString(wrong.takeError()),
              HasSubstr("v_mfma_f32_16x16x32_fp8_fp8 is not an instruction of gfx942"));
  EXPECT_TRUE(load(module("gfx942", withType("f8E4M3FNUZ"))));
}

TEST(Checks, Wave64DppControlsAreRejectedOnWave32) {
  auto k = Kernel::fromSource(module("gfx1100", R"(
    gpu.func @k(%v: f32) kernel {
      %d = amdgpu.dpp %v %v row_bcast_15 {row_mask = 10 : i32} : f32
      gpu.return
    })"),
                              "test.mlir", {});
  ASSERT_FALSE(bool(k));
  EXPECT_THAT(llvm::toString(k.takeError()),
              HasSubstr("this DPP control exists only on wave64 (gfx9) targets, not gfx1100"));
}

TEST(Checks, MatrixInstructionUnderDivergence) {
  auto k = load(module("gfx942", R"(
    gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c32 = arith.constant 32 : index
      %a = arith.constant dense<1.0> : vector<4xf16>
      %c = arith.constant dense<0.0> : vector<16xf32>
      %low = arith.cmpi ult, %t, %c32 : index
      scf.if %low {
        %d = amdgpu.mfma 32x32x8 %a * %a + %c blgp = none : vector<4xf16>, vector<4xf16>, vector<16xf32>
      }
      gpu.return
    })"));
  ASSERT_TRUE(k);
  EXPECT_THAT(launchError(*k, {}, {}),
              HasSubstr("v_mfma_f32_32x32x8_f16 executed by 32 of the 64 lanes of wave 0 (matrix instructions need "
                        "the whole wave)"));
}

TEST(Checks, WmmaInputsMustBeReplicatedAcrossHalfWaves) {
  auto k = load(module("gfx1100", R"(
    gpu.func @k() kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %t = gpu.thread_id x
      %ti = arith.index_cast %t : index to i32
      %f = arith.sitofp %ti : i32 to f16
      %a = vector.broadcast %f : f16 to vector<16xf16>
      %c = arith.constant dense<0.0> : vector<8xf32>
      %d = amdgpu.wmma 16x16x16 %a * %a + %c : vector<16xf16>, vector<16xf16>, vector<8xf32>
      gpu.return
    })"));
  ASSERT_TRUE(k);
  EXPECT_THAT(launchError(*k, {}, {}),
              HasSubstr("v_wmma_f32_16x16x16_f16 in wave 0: A[0][0] is 0.000000 in lane 0 but 16.000000 in lane 16"));
}

TEST(Checks, ShuffleFromAnInactiveLane) {
  auto k = load(module("gfx942", R"(
    gpu.func @k() kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %t = gpu.thread_id x
      %c16 = arith.constant 16 : index
      %v = arith.constant 1.0 : f32
      %one = arith.constant 1 : i32
      %w = arith.constant 64 : i32
      %low = arith.cmpi ult, %t, %c16 : index
      scf.if %low {
        %s, %ok = gpu.shuffle down %v, %one, %w : f32
      }
      gpu.return
    })"));
  ASSERT_TRUE(k);
  EXPECT_THAT(launchError(*k, {}, {}),
              HasSubstr("reads lane 16, which is inactive (undefined on the GPU), in thread (15,0,0)"));
}

TEST(Checks, LaunchArgumentsAreValidated) {
  auto k = load(module("gfx942", kStoreByThread));
  ASSERT_TRUE(k);
  EXPECT_THAT(launchError(*k, {}, {}), HasSubstr("kernel k takes 1 arguments, 0 given"));
  LaunchConfig config;
  config.block = {32, 1, 1};
  std::vector<float> out(64);
  EXPECT_THAT(launchError(*k, config, {buffer(out)}),
              HasSubstr("block (32,1,1) differs from kernel k's known_block_size (64,1,1)"));
  EXPECT_THAT(launchError(*k, {}, {ArgValue::ofInteger(3)}), HasSubstr("argument 'arg0' of kernel k must be a buffer"));
}

TEST(Grid, ExpressionsOverArguments) {
  auto args = [](llvm::StringRef name) -> std::optional<int64_t> {
    if (name == "N")
      return 300;
    return std::nullopt;
  };
  auto grid = evaluateGrid(R"([["ceil_div", "N", 128], ["mul", 2, ["max", 3, 1]], 1])", args);
  ASSERT_TRUE(bool(grid)) << llvm::toString(grid.takeError());
  EXPECT_EQ(*grid, (std::array<uint32_t, 3>{3, 6, 1}));
  auto bad = evaluateGrid(R"(["M", 1, 1])", args);
  ASSERT_FALSE(bool(bad));
  EXPECT_THAT(llvm::toString(bad.takeError()), HasSubstr("argument 'M'"));
}

} // namespace

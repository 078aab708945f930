// The lowering's integer-code fp8 conversions (Fp8Conversions.cpp, what gfx11 runs) executed by the
// simulator after the pass: every e4m3 code widened, and f32 values narrowed (every code, the
// halfway points between neighbours and just beside them, overflow, infinities, NaN, f32
// subnormals, -0), against LLVM's APFloat, for OCP e4m3 and FNUZ. Also the generator's integer-code
// f32 -> bf16 rounding (KernelBuilder::convertFinite) against APFloat.
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/Transforms/Fp8Conversions.h"
#include "tessera/Sim/Simulator.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace {
using namespace tessera::sim;

struct Format {
  const char *type;
  const llvm::fltSemantics &semantics;
};
const Format kFormats[] = {{"f8E4M3FN", llvm::APFloat::Float8E4M3FN()},
                           {"f8E4M3FNUZ", llvm::APFloat::Float8E4M3FNUZ()}};

/// gfx1100 kernel IR: thread t converts element t (vectors of 2, as the decode kernels' are).
std::string kernel(const std::string &body) {
  return "module attributes {gpu.container_module} {\n gpu.module @m [#rocdl.target<chip = "
         "\"gfx1100\">] {\n" +
         body + "\n }\n}\n";
}

/// The module after the fp8 conversion pass (integer code only), printed.
std::string lowered(const std::string &ir) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::arith::ArithDialect, mlir::gpu::GPUDialect, mlir::memref::MemRefDialect,
                  mlir::vector::VectorDialect, mlir::NVVM::NVVMDialect,
                  mlir::ROCDL::ROCDLDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx);
  EXPECT_TRUE(module);
  mlir::PassManager pm(&ctx);
  pm.addPass(tessera::createFp8ConversionsPass(/*nvvm=*/false));
  EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  std::string out;
  llvm::raw_string_ostream os(out);
  module->print(os);
  EXPECT_EQ(out.find("arith.extf"), std::string::npos) << out;
  EXPECT_EQ(out.find("arith.truncf %"), std::string::npos);
  return out;
}

void run(const std::string &ir, std::vector<ArgValue> args, uint32_t pairs) {
  auto k = Kernel::fromSource(lowered(ir), "fp8.mlir", {});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  LaunchConfig config;
  config.grid = {pairs, 1, 1};
  config.block = {1, 1, 1};
  auto stats = (*k)->launch(config, args);
  ASSERT_TRUE(bool(stats)) << llvm::toString(stats.takeError());
}

std::string convertKernel(const std::string &from, const std::string &to) {
  return R"(  gpu.func @k(%x: memref<?x)" + from + R"(>, %y: memref<?x)" + to + R"(>) kernel {
      %c2 = arith.constant 2 : index
      %b = gpu.block_id x
      %i = arith.muli %b, %c2 : index
      %v = vector.load %x[%i] : memref<?x)" +
         from + R"(>, vector<2x)" + from + R"(>
      %w = arith.)" +
         (from == "f32" ? "truncf" : "extf") + R"( %v : vector<2x)" + from + R"(> to vector<2x)" +
         to + R"(>
      vector.store %w, %y[%i] : memref<?x)" +
         to + R"(>, vector<2x)" + to + R"(>
      gpu.return
    })";
}

float toFloat(const llvm::APFloat &v) {
  bool loses;
  llvm::APFloat f = v;
  f.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven, &loses);
  return f.convertToFloat();
}

TEST(Fp8Conversions, EveryCodeWidensExactly) {
  for (const Format &fmt : kFormats) {
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c)
      codes[c] = uint8_t(c);
    std::vector<float> out(256, -1.0f);
    run(kernel(convertKernel(fmt.type, "f32")),
        {ArgValue::ofBuffer({codes.data(), codes.size(), 0}),
         ArgValue::ofBuffer({out.data(), 4 * out.size(), 0})},
        128);
    for (int c = 0; c < 256; ++c) {
      float want = toFloat(llvm::APFloat(fmt.semantics, llvm::APInt(8, c)));
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(out[c])) << fmt.type << " code " << c;
      else
        EXPECT_EQ(std::memcmp(&want, &out[c], 4), 0)
            << fmt.type << " code " << c << ": " << out[c] << " != " << want;
    }
  }
}

TEST(Fp8Conversions, NarrowingRoundsToNearestEvenAndOverflowsToNaN) {
  for (const Format &fmt : kFormats) {
    std::vector<float> in;
    std::vector<float> finite;
    for (int c = 0; c < 256; ++c) {
      float v = toFloat(llvm::APFloat(fmt.semantics, llvm::APInt(8, c)));
      if (!std::isnan(v))
        finite.push_back(v);
    }
    std::sort(finite.begin(), finite.end());
    for (size_t i = 0; i < finite.size(); ++i) {
      in.push_back(finite[i]);
      if (i + 1 < finite.size()) {
        float mid = (finite[i] + finite[i + 1]) / 2;
        in.insert(in.end(), {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
      }
    }
    const float largest = finite.back();
    for (float v : {largest * 1.03125f, largest * 1.0625f, largest * 1.07f, 1e30f, INFINITY, NAN,
                    1e-40f, -1e-40f, -0.0f, 0.0f, std::ldexp(1.0f, -12), std::ldexp(1.0f, -11),
                    std::ldexp(3.0f, -12)}) {
      in.push_back(v);
      in.push_back(-v);
    }
    if (in.size() % 2)
      in.push_back(1.0f);
    std::vector<uint8_t> out(in.size(), 0x55);
    run(kernel(convertKernel("f32", fmt.type)),
        {ArgValue::ofBuffer({in.data(), 4 * in.size(), 0}),
         ArgValue::ofBuffer({out.data(), out.size(), 0})},
        uint32_t(in.size() / 2));
    for (size_t i = 0; i < in.size(); ++i) {
      llvm::APFloat want(in[i]);
      bool loses;
      want.convert(fmt.semantics, llvm::APFloat::rmNearestTiesToEven, &loses);
      llvm::APFloat got(fmt.semantics, llvm::APInt(8, out[i]));
      if (want.isNaN())
        EXPECT_TRUE(got.isNaN()) << fmt.type << " " << in[i] << " -> code " << int(out[i]);
      else
        EXPECT_EQ(want.bitcastToAPInt().getZExtValue(), out[i])
            << fmt.type << " " << in[i] << " (bits " << std::hex
            << llvm::APFloat(in[i]).bitcastToAPInt().getZExtValue() << ")";
    }
  }
}

TEST(Bf16Rounding, ConvertFiniteRoundsToNearestEvenLikeTruncF) {
  // gfx942 (no bf16 rounding instruction): the kernel's arith.truncf replaced by convertFinite.
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::arith::ArithDialect, mlir::gpu::GPUDialect, mlir::memref::MemRefDialect,
                  mlir::vector::VectorDialect, mlir::ROCDL::ROCDLDialect>();
  const std::string ir = R"(module attributes {gpu.container_module} {
  gpu.module @m [#rocdl.target<chip = "gfx942">] {
    gpu.func @k(%x: memref<?xf32>, %y: memref<?xbf16>) kernel {
      %b = gpu.block_id x
      %v = memref.load %x[%b] : memref<?xf32>
      %w = arith.truncf %v : f32 to bf16
      memref.store %w, %y[%b] : memref<?xbf16>
      gpu.return
    }
  }
})";
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx);
  ASSERT_TRUE(module);
  mlir::arith::TruncFOp trunc;
  module->walk([&](mlir::arith::TruncFOp op) { trunc = op; });
  mlir::OpBuilder b(trunc);
  tessera::KernelBuilder kb(b, trunc.getLoc(), *tessera::lookupTarget("gfx942"));
  trunc.replaceAllUsesWith(kb.convertFinite(trunc.getIn(), b.getBF16Type()));
  trunc.erase();
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  ASSERT_EQ(text.find("arith.truncf"), std::string::npos);

  // bf16 neighbours' halfway points and just beside them, ties both ways, the largest finite
  // values, f32 subnormals, zeros, every sign.
  std::vector<float> in;
  auto fromBits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (uint32_t high : {0x0000u, 0x0001u, 0x007fu, 0x0080u, 0x3f80u, 0x3f81u, 0x4049u, 0x7f7eu,
                        0x7f7fu})
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      for (uint32_t sign : {0u, 0x80000000u})
        in.push_back(fromBits(sign | high << 16 | low));
  for (float v : {1.0f / 3, 0.1f, 1e-40f, 65504.0f, 3.0e38f})
    in.insert(in.end(), {v, -v});
  std::vector<uint16_t> out(in.size(), 0x5555);
  auto k = Kernel::fromSource(text, "bf16.mlir", {});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  LaunchConfig config;
  config.grid = {uint32_t(in.size()), 1, 1};
  config.block = {1, 1, 1};
  auto stats = (*k)->launch(config, {ArgValue::ofBuffer({in.data(), 4 * in.size(), 0}),
                                     ArgValue::ofBuffer({out.data(), 2 * out.size(), 0})});
  ASSERT_TRUE(bool(stats)) << llvm::toString(stats.takeError());
  for (size_t i = 0; i < in.size(); ++i) {
    llvm::APFloat want(in[i]);
    bool loses;
    want.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven, &loses);
    EXPECT_EQ(want.bitcastToAPInt().getZExtValue(), out[i])
        << in[i] << " (bits " << std::hex << llvm::APFloat(in[i]).bitcastToAPInt().getZExtValue()
        << ")";
  }
}

} // namespace

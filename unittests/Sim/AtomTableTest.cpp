// The compiler's atom table against the simulator's independent matrix layouts, map by map and through KernelBuilder::mma.
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Compile/Compile.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"
#include "tessera/Sim/MatrixOps.h"
#include "tessera/Sim/Simulator.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <random>

namespace {
using namespace tessera;
using sim::ElemKind;
using sim::MatrixFamily;

ElemKind kindOf(ElemType t) {
  switch (t) {
  case ElemType::F16: return ElemKind::F16;
  case ElemType::BF16: return ElemKind::BF16;
  case ElemType::F32: return ElemKind::F32;
  case ElemType::FP8E4M3FNUZ: return ElemKind::F8E4M3FNUZ;
  case ElemType::FP8E4M3FN: return ElemKind::F8E4M3FN;
  }
  return ElemKind::F32;
}

MatrixFamily familyOf(AtomKind k) {
  switch (k) {
  case AtomKind::MFMA: return MatrixFamily::MFMA;
  case AtomKind::WMMA: return MatrixFamily::WMMA;
  case AtomKind::MMASync: return MatrixFamily::MMASync;
  }
  return MatrixFamily::MFMA;
}

const sim::MatrixLayout *simLayout(const MMAAtom &atom) {
  return sim::findMatrixLayout(familyOf(atom.kind), atom.m, atom.n, atom.k, atom.a.elementsPerLane(),
                               atom.c.elementsPerLane());
}

// The first (lane, element) where `ours` and the simulator's map disagree, or "".
std::string firstMismatch(const OperandLayout &ours, sim::MatrixPos (*theirs)(int, int), int perLane) {
  if (perLane != ours.elementsPerLane())
    return std::to_string(ours.elementsPerLane()) + " elements per lane, simulator " + std::to_string(perLane);
  for (int lane = 0; lane < ours.lanes(); ++lane)
    for (int e = 0; e < perLane; ++e) {
      const Coord c = ours.at(lane, e);
      const sim::MatrixPos p = theirs(lane, e);
      if (c.row != p.row || c.col != p.col)
        return "lane " + std::to_string(lane) + " element " + std::to_string(e) + ": (" + std::to_string(c.row) +
               ", " + std::to_string(c.col) + "), simulator (" + std::to_string(p.row) + ", " +
               std::to_string(p.col) + ")";
    }
  return "";
}

class AtomVsSimulator : public ::testing::TestWithParam<MMAIntrinsic> {};

TEST_P(AtomVsSimulator, SameMapsAndMnemonic) {
  const MMAAtom &atom = getAtom(GetParam());
  const sim::MatrixLayout *l = simLayout(atom);
  ASSERT_NE(l, nullptr) << "the simulator models no " << atom.name;
  EXPECT_EQ(l->waveSize, atom.waveSize);
  EXPECT_EQ(firstMismatch(atom.a, l->a, l->aPerLane), "") << "operand A";
  EXPECT_EQ(firstMismatch(atom.b, l->b, l->bPerLane), "") << "operand B";
  EXPECT_EQ(firstMismatch(atom.c, l->c, l->cPerLane), "") << "operand C";
  EXPECT_EQ(sim::matrixMnemonic(*l, kindOf(atom.inputType), kindOf(atom.accType)), atom.name);
}

std::vector<MMAIntrinsic> allIntrinsics() {
  std::vector<MMAIntrinsic> all;
  for (int i = 0; i < kNumMMAIntrinsics; ++i) all.push_back(MMAIntrinsic(i));
  return all;
}

std::string paramName(const ::testing::TestParamInfo<MMAIntrinsic> &info) { return stringifyMMAIntrinsic(info.param); }

INSTANTIATE_TEST_SUITE_P(AllAtoms, AtomVsSimulator, ::testing::ValuesIn(allIntrinsics()), paramName);

// A kernel that places A (m x k) and B (k x n), row-major in global memory, into registers where the atom table says,
// runs one KernelBuilder::mma and stores D where the table's C layout says.
std::string oneMmaKernel(mlir::MLIRContext &ctx, const TargetInfo &target, const MMAAtom &atom) {
  mlir::OpBuilder b(&ctx);
  mlir::Location loc = b.getUnknownLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  (*module)->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(module->getBody());
  mlir::Type in = toMlirType(&ctx, atom.inputType);
  auto ptr = [&](mlir::Type t) { return mlir::MemRefType::get({mlir::ShapedType::kDynamic}, t); };
  KernelSignature sig;
  sig.name = "one_mma";
  sig.directive = "test";
  sig.directiveAttrs = b.getDictionaryAttr({});
  sig.args = {{"a", ptr(in), ArgRole::Input}, {"b", ptr(in), ArgRole::Input}, {"d", ptr(b.getF32Type()), ArgRole::Output}};
  sig.grid[0] = sig.grid[1] = sig.grid[2] = GridExpr::constant(1);
  sig.blockThreads = atom.waveSize;
  mlir::gpu::GPUFuncOp func = createKernel(b, loc, target, sig);
  b.setInsertionPoint(func.getBody().front().getTerminator());
  KernelBuilder kb(b, loc, target);
  mlir::Value lane = kb.laneId();
  auto fragment = [&](const OperandLayout &layout, mlir::Value memref, int ld) {
    auto [row, col] = kb.laneCoord(layout, lane);
    llvm::SmallVector<mlir::Value> elems;
    for (int e = 0; e < layout.elementsPerLane(); ++e) {
      const Coord c = layout.at(0, e);
      mlir::Value at = kb.add(kb.mul(kb.add(row, c.row), ld), kb.add(col, c.col));
      elems.push_back(mlir::memref::LoadOp::create(b, loc, memref, mlir::ValueRange{at}));
    }
    return mlir::vector::FromElementsOp::create(b, loc, mlir::VectorType::get({int64_t(elems.size())}, in), elems);
  };
  mlir::Value a = fragment(atom.a, func.getArgument(0), atom.k);
  mlir::Value bFrag = fragment(atom.b, func.getArgument(1), atom.n);
  mlir::Value d = kb.mma(atom, a, bFrag, kb.zero(kb.accType(atom)));
  KernelBuilder::GlobalTile dst{func.getArgument(2), kb.idx(0), kb.idx(atom.n), kb.idx(atom.m), kb.idx(atom.n), {}};
  kb.storeAccumulator(atom, d, dst, lane, kb.idx(0), kb.idx(0));
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

// Random small integers: exact in every input format, so D must equal A * B exactly; not symmetric.
std::vector<double> randomMatrix(int rows, int cols, std::mt19937 &rng) {
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<double> m(size_t(rows) * cols);
  for (double &x : m) x = dist(rng);
  return m;
}

std::vector<uint8_t> encoded(const std::vector<double> &m, ElemKind kind) {
  const int bytes = sim::bitWidth(kind) / 8;
  std::vector<uint8_t> out(m.size() * bytes);
  for (size_t i = 0; i < m.size(); ++i) {
    uint64_t bits = sim::encodeFloat(m[i], kind);
    for (int j = 0; j < bytes; ++j) out[i * bytes + j] = uint8_t(bits >> (8 * j));
  }
  return out;
}

// D = A * B for random asymmetric A and B through a kernel built from `atom` (its layouts may be wrong) running
// `atom.intrinsic` in the simulator: the number of D elements that differ from A * B (unwritten ones included).
int wrongProducts(const MMAAtom &atom, const TargetInfo &target) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::gpu::GPUDialect, mlir::amdgpu::AMDGPUDialect, mlir::arith::ArithDialect,
                  mlir::memref::MemRefDialect, mlir::vector::VectorDialect, mlir::scf::SCFDialect,
                  mlir::NVVM::NVVMDialect, mlir::ROCDL::ROCDLDialect, mlir::LLVM::LLVMDialect,
                  tessera::TesseraDialect>(); // createKernel records the roles as a tessera attribute
  const std::string ir = oneMmaKernel(ctx, target, atom);
  auto kernel = sim::Kernel::fromSource(ir, "one_mma.mlir", {});
  if (!kernel) {
    ADD_FAILURE() << llvm::toString(kernel.takeError()) << "\n" << ir;
    return -1;
  }
  const std::string name = stringifyMMAIntrinsic(atom.intrinsic);
  std::seed_seq seed(name.begin(), name.end());
  std::mt19937 rng(seed);
  const std::vector<double> a = randomMatrix(atom.m, atom.k, rng), b = randomMatrix(atom.k, atom.n, rng);
  std::vector<uint8_t> aBytes = encoded(a, kindOf(atom.inputType)), bBytes = encoded(b, kindOf(atom.inputType));
  std::vector<float> d(size_t(atom.m) * atom.n, std::nanf(""));
  auto buffer = [](void *p, size_t bytes) { return sim::ArgValue::ofBuffer({p, bytes, 0}); };
  auto stats = (*kernel)->launch({}, {buffer(aBytes.data(), aBytes.size()), buffer(bBytes.data(), bBytes.size()),
                                      buffer(d.data(), d.size() * sizeof(float))});
  if (!stats) {
    ADD_FAILURE() << llvm::toString(stats.takeError());
    return -1;
  }
  int bad = 0;
  for (int i = 0; i < atom.m; ++i)
    for (int j = 0; j < atom.n; ++j) {
      double want = 0;
      for (int k = 0; k < atom.k; ++k) want += a[size_t(i) * atom.k + k] * b[size_t(k) * atom.n + j];
      bad += !(d[size_t(i) * atom.n + j] == want); // NaN (never written) counts
    }
  return bad;
}

struct AtomOnTarget {
  MMAIntrinsic intrinsic;
  const char *chip;
};

class MmaThroughSimulator : public ::testing::TestWithParam<AtomOnTarget> {};

// The interpreter executes amdgpu.mfma / wmma / nvvm.mma.sync with the vendors' layouts: the product comes out
// right only if the table placed A, B and C the way the hardware reads and writes them.
TEST_P(MmaThroughSimulator, KernelBuilderMmaComputesTheProduct) {
  const MMAAtom &atom = getAtom(GetParam().intrinsic);
  const TargetInfo *target = lookupTarget(GetParam().chip);
  ASSERT_NE(target, nullptr);
  ASSERT_TRUE(llvm::is_contained(target->atoms, atom.intrinsic))
      << target->chip << " does not list " << atom.name;
  EXPECT_EQ(wrongProducts(atom, *target), 0) << atom.name << " on " << target->chip;
  // Two elements of A swapped within each lane: the check must see it.
  MMAAtom swapped = atom;
  std::swap(swapped.a.regBases[0], swapped.a.regBases[1]);
  EXPECT_GT(wrongProducts(swapped, *target), 0) << "the check cannot see a wrong A layout";
}

// mma.sync on e4m3 reaches PTX through LLVM's intrinsic (MLIR's nvvm.mma.sync has no dense fp8 form) and needs PTX
// ISA 8.4, which the serializer asks for only then.
TEST(MmaSyncE4M3, LowersToThePtxInstructionUnderPtxIsa84) {
  const TargetInfo &sm90 = *lookupTarget("sm_90");
  mlir::DialectRegistry registry;
  registerTesseraDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  auto ptxOf = [&](MMAIntrinsic intrinsic) -> std::string {
    const std::string ir = oneMmaKernel(ctx, sm90, getAtom(intrinsic));
    mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx);
    if (!module) return "(does not parse)";
    mlir::gpu::GPUModuleOp gpuModule = *module->getOps<mlir::gpu::GPUModuleOp>().begin();
    mlir::FailureOr<CompiledKernel> kernel = compileNVPTXModule(gpuModule, sm90);
    return mlir::succeeded(kernel) ? kernel->isa : "(does not compile)";
  };
  const std::string fp8 = ptxOf(MMAIntrinsic::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN);
  EXPECT_NE(fp8.find("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"), std::string::npos) << fp8;
  EXPECT_NE(fp8.find(".version 8.4"), std::string::npos) << fp8;
  const std::string bf16 = ptxOf(MMAIntrinsic::NV_MMA_SYNC_F32_16x8x16_BF16);
  EXPECT_NE(bf16.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos) << bf16;
  EXPECT_NE(bf16.find(".version 8.1"), std::string::npos) << bf16;
}

using I = MMAIntrinsic;
INSTANTIATE_TEST_SUITE_P(
    Fp8AndOthers, MmaThroughSimulator,
    ::testing::Values(AtomOnTarget{I::MFMA_F32_16x16x32_F8E4M3FNUZ, "gfx942"},
                      AtomOnTarget{I::MFMA_F32_32x32x16_F8E4M3FNUZ, "gfx942"},
                      AtomOnTarget{I::MFMA_F32_16x16x32_F8E4M3FN, "gfx950"},
                      AtomOnTarget{I::MFMA_F32_32x32x16_F8E4M3FN, "gfx950"},
                      AtomOnTarget{I::MFMA_F32_32x32x8_BF16, "gfx942"}, AtomOnTarget{I::MFMA_F32_16x16x32_F16, "gfx950"},
                      AtomOnTarget{I::WMMAR3_F32_16x16x16_F16, "gfx1100"},
                      AtomOnTarget{I::NV_MMA_SYNC_F32_16x8x16_BF16, "sm_90"},
                      AtomOnTarget{I::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN, "sm_90"}),
    [](const ::testing::TestParamInfo<AtomOnTarget> &info) {
      return stringifyMMAIntrinsic(info.param.intrinsic) + "_" + info.param.chip;
    });

} // namespace

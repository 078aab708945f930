// Kernel sets on the compiler side: createKernel records workspaces, recordKernelSet the set, and the IR verifies.
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

namespace {

using namespace mlir;
using namespace tessera;

class KernelSetTest : public ::testing::Test {
protected:
  KernelSetTest() {
    context.loadDialect<TesseraDialect, gpu::GPUDialect, ROCDL::ROCDLDialect, NVVM::NVVMDialect>();
    module = ModuleOp::create(UnknownLoc::get(&context));
    (*module)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), UnitAttr::get(&context));
  }
  /// A kernel (x, acc?, N) with acc a zeroed workspace of N * 4 bytes when `workspace`.
  gpu::GPUFuncOp kernel(const std::string &name, bool workspace) {
    OpBuilder b(&context);
    b.setInsertionPointToEnd(module->getBody());
    Type ptr = MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
    KernelSignature sig;
    sig.name = name;
    sig.directive = "colsum";
    sig.directiveAttrs = b.getDictionaryAttr({});
    sig.args = {{"x", ptr, ArgRole::Input}};
    if (workspace) {
      sig.args.push_back({"acc", ptr, ArgRole::Workspace});
      sig.workspaces.push_back({"acc", GridExpr::mul(GridExpr::arg("N"), GridExpr::constant(4)), true});
    }
    sig.args.push_back({"N", b.getIndexType(), ArgRole::Size});
    sig.grid[0] = GridExpr::ceilDiv(GridExpr::arg("N"), GridExpr::constant(64));
    sig.grid[1] = sig.grid[2] = GridExpr::constant(1);
    sig.blockThreads = 64;
    return createKernel(b, b.getUnknownLoc(), *lookupTarget("gfx942"), sig);
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

TEST_F(KernelSetTest, SetsRecordTheirOrderOnEveryKernel) {
  gpu::GPUFuncOp first = kernel("partial", true), second = kernel("finish", true);
  recordKernelSet({"colsum", {first, second}});
  for (auto [position, func] : llvm::enumerate(std::vector<gpu::GPUFuncOp>{first, second})) {
    auto member = func->getAttrOfType<KernelSetAttr>(TesseraDialect::getKernelSetAttrName());
    ASSERT_TRUE(member) << func.getName().str();
    EXPECT_EQ(member.getName(), "colsum");
    EXPECT_EQ(member.getPosition(), int64_t(position));
  }
  auto roles = first->getAttrOfType<ArgRolesAttr>(TesseraDialect::getArgRolesAttrName());
  ASSERT_TRUE(roles);
  EXPECT_EQ(roles.getRoles(), (llvm::ArrayRef<ArgRole>{ArgRole::Input, ArgRole::Workspace, ArgRole::Size}));
  auto workspaces = first->getAttrOfType<StringAttr>(TesseraDialect::getWorkspacesAttrName());
  ASSERT_TRUE(workspaces);
  EXPECT_EQ(workspaces.getValue(), R"([{"arg": "acc", "bytes": ["mul", "N", 4], "zero": true}])");
  EXPECT_EQ(first->getAttrOfType<StringAttr>("tessera.grid").getValue(), R"([["ceil_div", "N", 64], 1, 1])");
  EXPECT_TRUE(succeeded(verify(*module)));
}

TEST_F(KernelSetTest, ASingleKernelWithoutWorkspacesIsAPlainKernel) {
  gpu::GPUFuncOp alone = kernel("alone", false);
  recordKernelSet({"alone", {alone}});
  EXPECT_FALSE(alone->hasAttr(TesseraDialect::getKernelSetAttrName()));
  EXPECT_FALSE(alone->hasAttr(TesseraDialect::getWorkspacesAttrName()));
}

TEST_F(KernelSetTest, ASingleKernelWithAWorkspaceIsASetOfOne) {
  gpu::GPUFuncOp alone = kernel("alone", true);
  recordKernelSet({"alone", {alone}});
  auto member = alone->getAttrOfType<KernelSetAttr>(TesseraDialect::getKernelSetAttrName());
  ASSERT_TRUE(member);
  EXPECT_EQ(member.getPosition(), 0);
}

TEST(GridExprBuilders, SpellOperatorsFromTheSharedTable) {
  GridExpr n = GridExpr::arg("N");
  EXPECT_EQ(GridExpr::floorDiv(n, GridExpr::constant(2)).json, std::string("[\"") + grid::opName(grid::Op::Div) + "\", \"N\", 2]");
  EXPECT_EQ(GridExpr::min(n, GridExpr::smCount()).json, "[\"min\", \"N\", \"$sm_count\"]");
  EXPECT_EQ(GridExpr::max(n, n).json, "[\"max\", \"N\", \"N\"]");
}

} // namespace

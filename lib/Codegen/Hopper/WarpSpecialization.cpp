// Hopper warp-specialisation builders (Hopper/WarpSpecialization.h): NVVM shfl, setmaxnreg,
// elect.sync and named barriers.
#include "tessera/Codegen/Hopper/WarpSpecialization.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace tessera::hopper {

Value WarpRoleBuilder::i32(int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32); }

Value WarpRoleBuilder::uniformWarpgroupId() {
  Value tid = arith::IndexCastOp::create(b, loc, b.getI32Type(), kb.threadId());
  Value wg = arith::DivUIOp::create(b, loc, tid, i32(128));
  Value shfl = NVVM::ShflOp::create(b, loc, b.getI32Type(), i32(-1), wg, i32(0), i32(31),
                                    NVVM::ShflKind::idx, UnitAttr());
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), shfl);
}

void WarpRoleBuilder::setMaxRegisters(int count, bool increase) {
  NVVM::SetMaxRegisterOp::create(b, loc, count,
                                 increase ? NVVM::SetMaxRegisterAction::increase
                                          : NVVM::SetMaxRegisterAction::decrease);
}

Value WarpRoleBuilder::electOne() {
  return NVVM::ElectSyncOp::create(b, loc, b.getI1Type(), Value());
}

void WarpRoleBuilder::namedBarrierSync(Value id, int threads) {
  NVVM::BarrierOp::create(b, loc, Type(), id, i32(threads), NVVM::BarrierReductionAttr(), Value());
}

void WarpRoleBuilder::namedBarrierArrive(Value id, int threads) {
  NVVM::BarrierArriveOp::create(b, loc, id, i32(threads));
}

} // namespace tessera::hopper

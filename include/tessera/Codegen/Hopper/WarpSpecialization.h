// Hopper warp specialisation: what splits a workgroup into producer and consumer warpgroups and
// keeps them in step (a warp-uniform warpgroup id, setmaxnreg, elect, named barriers).
#ifndef TESSERA_CODEGEN_HOPPER_WARPSPECIALIZATION_H
#define TESSERA_CODEGEN_HOPPER_WARPSPECIALIZATION_H

#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::hopper {

/// Emits warpgroup role selection and synchronisation through one KernelBuilder.
class WarpRoleBuilder {
public:
  explicit WarpRoleBuilder(KernelBuilder &kb) : kb(kb), b(kb.builder()), loc(kb.location()) {}

  /// threadId / 128 taken through shfl.idx from lane 0, so ptxas sees a warp-uniform value
  /// (role branches on plain tid / 128 make it serialise wgmma).
  mlir::Value uniformWarpgroupId();
  void setMaxRegisters(int count, bool increase);
  /// i1: true on one elected lane of the warp.
  mlir::Value electOne();
  void namedBarrierSync(mlir::Value id, int threads);
  void namedBarrierArrive(mlir::Value id, int threads);
  /// An i32 constant: named-barrier ids and thread counts are i32.
  mlir::Value i32(int64_t v);

private:
  KernelBuilder &kb;
  mlir::OpBuilder &b;
  mlir::Location loc;
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_WARPSPECIALIZATION_H

// Hopper (sm_90a) IR builders, one concern per header under Hopper/: wgmma descriptors
// (Descriptors.h), SS/RS wgmma and their fences (Wgmma.h), TMA, mbarriers and shared memory
// (Tma.h), the buffer ring of the TMA pipeline (Pipeline.h), warp specialisation
// (WarpSpecialization.h) and the accumulator epilogue (Epilogue.h). HopperBuilder gathers the
// instruction builders for a kernel emitter.
#ifndef TESSERA_CODEGEN_HOPPER_H
#define TESSERA_CODEGEN_HOPPER_H

#include "tessera/Codegen/Hopper/Descriptors.h"
#include "tessera/Codegen/Hopper/Epilogue.h"
#include "tessera/Codegen/Hopper/Pipeline.h"
#include "tessera/Codegen/Hopper/Tma.h"
#include "tessera/Codegen/Hopper/WarpSpecialization.h"
#include "tessera/Codegen/Hopper/Wgmma.h"

namespace tessera::hopper {

/// Every Hopper builder over one KernelBuilder, under one name (`hb.wgmmaSS`, `hb.tmaLoad`, ...).
class HopperBuilder : public WgmmaBuilder, public TmaBuilder, public WarpRoleBuilder {
public:
  explicit HopperBuilder(KernelBuilder &kb)
      : WgmmaBuilder(kb), TmaBuilder(kb), WarpRoleBuilder(kb) {}
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_H

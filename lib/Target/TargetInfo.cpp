// The target table. Every chip-specific fact lives here; no other code compares chip names.
#include "tessera/Target/TargetInfo.h"

#include <algorithm>

namespace tessera {

const std::vector<TargetInfo> &allTargets() {
  // Register and occupancy figures: AMD CDNA3/CDNA4 ISA guides (512 unified VGPR+AGPR per
  // lane, granule 8, 8 waves per SIMD, 4 SIMDs per CU) and RDNA3 (wave32: 1536 VGPRs per SIMD
  // lane, granule 24 when allocating for wave32, 16 waves per SIMD, 2 SIMDs per half-WGP x 2).
  static const std::vector<TargetInfo> targets = {
      {"gfx942", Vendor::AMD, "CDNA3", 64, 64 * 1024, 32, LdsSwizzle::Pad, CrossLane::Dpp,
       ElemType::FP8E4M3FNUZ, false,
       {"v_mfma_f32_32x32x8_f16", "v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_f16",
        "v_mfma_f32_16x16x16_bf16"},
       512, 512, 8, 8, 4},
      {"gfx950", Vendor::AMD, "CDNA4", 64, 160 * 1024, 64, LdsSwizzle::Xor, CrossLane::Dpp,
       ElemType::FP8E4M3FN, true,
       {"v_mfma_f32_32x32x16_f16", "v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_f16",
        "v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x8_f16", "v_mfma_f32_32x32x8_bf16",
        "v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16_bf16"},
       512, 512, 8, 8, 4},
      {"gfx1100", Vendor::AMD, "RDNA3", 32, 64 * 1024, 32, LdsSwizzle::Pad, CrossLane::Shuffle,
       std::nullopt, false, {"v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16"},
       256, 1536, 24, 16, 4},
      {"gfx1151", Vendor::AMD, "RDNA3.5", 32, 64 * 1024, 32, LdsSwizzle::Pad,
       CrossLane::Shuffle, std::nullopt, false,
       {"v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16"}, 256, 1536, 24, 16, 4},
      // NVIDIA: 48 KiB is the static shared memory limit; the kernels use no dynamic shared
      // memory yet. Ampere runs the portable mma.sync path and has no fp8 matrix instructions.
      {"sm_80", Vendor::NVIDIA, "Ampere", 32, 48 * 1024, 32, LdsSwizzle::Xor,
       CrossLane::Shuffle, std::nullopt, false,
       {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
       255, 512, 8, 16, 4, /*gemmStages=*/2},
      {"sm_90", Vendor::NVIDIA, "Hopper", 32, 48 * 1024, 32, LdsSwizzle::Xor,
       CrossLane::Shuffle, ElemType::FP8E4M3FN, false,
       {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
       255, 512, 8, 16, 4, /*gemmStages=*/2},
      // sm_90a: Hopper with its architecture-specific instructions (wgmma, setmaxnreg), which
      // only run on sm_90 itself. flash_attn gets the warp-specialised wgmma/TMA kernel there
      // (dynamic shared memory, hopperSharedBytes); everything else the portable kernels.
      {"sm_90a", Vendor::NVIDIA, "Hopper", 32, 48 * 1024, 32, LdsSwizzle::Xor,
       CrossLane::Shuffle, ElemType::FP8E4M3FN, false,
       {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
       255, 512, 8, 16, 4, /*gemmStages=*/2, /*hasWgmma=*/true},
  };
  return targets;
}

const TargetInfo *lookupTarget(const std::string &chip) {
  for (const TargetInfo &t : allTargets())
    if (t.chip == chip) return &t;
  return nullptr;
}

std::string knownTargetNames() {
  std::string names;
  for (const TargetInfo &t : allTargets()) names += (names.empty() ? "" : ", ") + t.chip;
  return names;
}

const MMAAtom *TargetInfo::preferredAtom(ElemType input) const {
  for (const std::string &name : atoms)
    if (const MMAAtom *a = findAtom(name); a && a->inputType == input) return a;
  return nullptr;
}

int TargetInfo::occupancy(int vgprsPerLane, int ldsBytesPerWorkgroup,
                          int wavesPerWorkgroup) const {
  int regs = std::max(vgprsPerLane, 1);
  int alloc = (regs + vgprGranule - 1) / vgprGranule * vgprGranule;
  int byRegs = std::min(maxWavesPerSimd, vgprsPerSimd / alloc);
  if (ldsBytesPerWorkgroup <= 0) return byRegs;
  // Workgroups per CU limited by LDS, spread over the CU's SIMDs.
  int groups = ldsBytes / ldsBytesPerWorkgroup;
  if (groups == 0) return 0;
  // At least one wave per SIMD that runs one: a workgroup of fewer waves than SIMDs still runs.
  int byLds = std::max(1, groups * wavesPerWorkgroup / simdsPerCu);
  return std::min(byRegs, byLds);
}

} // namespace tessera

// The target table. Every chip-specific fact lives here; no other code compares chip names.
#include "tessera/Target/TargetInfo.h"

#include <algorithm>

namespace tessera {

const std::vector<TargetInfo> &allTargets() {
  // Register and occupancy figures: AMD CDNA3/CDNA4 ISA guides (512 unified VGPR+AGPR per
  // lane, granule 8, 8 waves per SIMD, 4 SIMDs per CU) and RDNA3 (wave32: 1536 VGPRs per SIMD
  // lane, granule 24 when allocating for wave32, 16 waves per SIMD, 2 SIMDs per half-WGP x 2).
  // fp8 atoms read the chip's own e4m3 flavour (`fp8`). Hopper's mma.sync e4m3 form reads both
  // operands K-contiguous and ldmatrix cannot transpose bytes: kernels that use it stage V^T
  // themselves (AttnPlan::transposesStagedV).
  using I = MMAIntrinsic;
  static const std::vector<TargetInfo> targets = {
      {"gfx942", Vendor::AMD, "CDNA3", 64, 64 * 1024, 32, LdsSwizzle::Pad, CrossLane::Dpp,
       ElemType::FP8E4M3FNUZ, false,
       {I::MFMA_F32_32x32x8_F16, I::MFMA_F32_32x32x8_BF16, I::MFMA_F32_16x16x16_F16,
        I::MFMA_F32_16x16x16_BF16, I::MFMA_F32_32x32x16_F8E4M3FNUZ,
        I::MFMA_F32_16x16x32_F8E4M3FNUZ},
       512, 512, 8, 8, 4, /*gemmStages=*/1, /*hasWgmma=*/false, /*hasAsyncCopy=*/false,
       /*hasHalfWaveSwap=*/false, /*hasBf16Convert=*/false, /*attnStages=*/1,
       /*attnLazyRescale=*/true, /*attnScaleInExp=*/true, /*attnInteriorLoopMaxHeadDim=*/256},
      {"gfx950", Vendor::AMD, "CDNA4", 64, 160 * 1024, 64, LdsSwizzle::Xor, CrossLane::Dpp,
       ElemType::FP8E4M3FN, true,
       {I::MFMA_F32_32x32x16_F16, I::MFMA_F32_32x32x16_BF16, I::MFMA_F32_16x16x32_F16,
        I::MFMA_F32_16x16x32_BF16, I::MFMA_F32_32x32x8_F16, I::MFMA_F32_32x32x8_BF16,
        I::MFMA_F32_16x16x16_F16, I::MFMA_F32_16x16x16_BF16, I::MFMA_F32_32x32x16_F8E4M3FN,
        I::MFMA_F32_16x16x32_F8E4M3FN},
       512, 512, 8, 8, 4, /*gemmStages=*/1, /*hasWgmma=*/false, /*hasAsyncCopy=*/false,
       /*hasHalfWaveSwap=*/true, /*hasBf16Convert=*/true, /*attnStages=*/1,
       /*attnLazyRescale=*/true, /*attnScaleInExp=*/true, /*attnInteriorLoopMaxHeadDim=*/128},
      {"gfx1100", Vendor::AMD, "RDNA3", 32, 64 * 1024, 32, LdsSwizzle::Pad, CrossLane::Shuffle,
       std::nullopt, false, {I::WMMAR3_F32_16x16x16_F16, I::WMMAR3_F32_16x16x16_BF16},
       256, 1536, 24, 16, 4, /*gemmStages=*/1, /*hasWgmma=*/false, /*hasAsyncCopy=*/false,
       /*hasHalfWaveSwap=*/false, /*hasBf16Convert=*/false, /*attnStages=*/2,
       /*attnLazyRescale=*/true, /*attnScaleInExp=*/false, /*attnInteriorLoopMaxHeadDim=*/256},
      {"gfx1151", Vendor::AMD, "RDNA3.5", 32, 64 * 1024, 32, LdsSwizzle::Pad,
       CrossLane::Shuffle, std::nullopt, false,
       {I::WMMAR3_F32_16x16x16_F16, I::WMMAR3_F32_16x16x16_BF16}, 256, 1536, 24, 16, 4,
       /*gemmStages=*/1, /*hasWgmma=*/false, /*hasAsyncCopy=*/false, /*hasHalfWaveSwap=*/false,
       /*hasBf16Convert=*/false, /*attnStages=*/2,
       /*attnLazyRescale=*/true, /*attnScaleInExp=*/false, /*attnInteriorLoopMaxHeadDim=*/256},
      // NVIDIA: 48 KiB is the static shared memory limit (kernels that need more opt into
      // dynamic shared memory). Ampere runs the portable mma.sync path and has no fp8 matrix
      // instructions.
      {"sm_80", Vendor::NVIDIA, "Ampere", 32, 48 * 1024, 32, LdsSwizzle::Xor,
       CrossLane::Shuffle, std::nullopt, false,
       {I::NV_MMA_SYNC_F32_16x8x16_F16, I::NV_MMA_SYNC_F32_16x8x16_BF16},
       255, 512, 8, 16, 4, /*gemmStages=*/2, /*hasWgmma=*/false, /*hasAsyncCopy=*/true},
      {"sm_90", Vendor::NVIDIA, "Hopper", 32, 48 * 1024, 32, LdsSwizzle::Xor,
       CrossLane::Shuffle, ElemType::FP8E4M3FN, false,
       {I::NV_MMA_SYNC_F32_16x8x16_F16, I::NV_MMA_SYNC_F32_16x8x16_BF16,
        I::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN},
       255, 512, 8, 16, 4, /*gemmStages=*/2, /*hasWgmma=*/false, /*hasAsyncCopy=*/true},
      // sm_90a: Hopper with its architecture-specific instructions (wgmma, setmaxnreg), which
      // only run on sm_90 itself. flash_attn gets the warp-specialised wgmma/TMA kernel there
      // (dynamic shared memory, hopperSharedBytes); everything else the portable kernels.
      {"sm_90a", Vendor::NVIDIA, "Hopper", 32, 48 * 1024, 32, LdsSwizzle::Xor,
       CrossLane::Shuffle, ElemType::FP8E4M3FN, false,
       {I::NV_MMA_SYNC_F32_16x8x16_F16, I::NV_MMA_SYNC_F32_16x8x16_BF16,
        I::NV_MMA_SYNC_F32_16x8x32_F8E4M3FN},
       255, 512, 8, 16, 4, /*gemmStages=*/2, /*hasWgmma=*/true, /*hasAsyncCopy=*/true},
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

bool TargetInfo::transposingLoads(const MMAAtom &atom) const {
  if (elemTypeBits(atom.inputType) != 16) return false;
  if (atom.kind == AtomKind::MMASync) return true;
  return atom.kind == AtomKind::MFMA && hasTransposeLoad && atom.a.transposeReadsFit(false) &&
         atom.b.transposeReadsFit(true);
}

const MMAAtom *TargetInfo::preferredAtom(ElemType input) const {
  AtomChoice choice = chooseAtoms(*this, input);
  return choice ? choice.atoms.front() : nullptr;
}

static bool hasShape(const MMAAtom &a, const AtomShape &s) {
  return (!s.m || a.m == s.m) && (!s.n || a.n == s.n) && (!s.k || a.k == s.k);
}

static std::string shapeName(const AtomShape &s) {
  auto dim = [](int d) { return d ? std::to_string(d) : std::string("?"); };
  return dim(s.m) + "x" + dim(s.n) + "x" + dim(s.k);
}

AtomChoice chooseAtoms(const TargetInfo &target, ElemType input, std::optional<AtomShape> shape) {
  AtomChoice choice;
  std::string sameInput; // the atoms with this input type, for the message when the shape fails
  for (MMAIntrinsic i : target.atoms) {
    const MMAAtom &a = getAtom(i);
    if (a.inputType != input) continue;
    sameInput += (sameInput.empty() ? "" : ", ") + a.name + " (" + std::to_string(a.m) + "x" +
                 std::to_string(a.n) + "x" + std::to_string(a.k) + ")";
    if (!shape || hasShape(a, *shape)) choice.atoms.push_back(&a);
  }
  if (!choice.atoms.empty()) return choice;
  std::string what = target.chip + " has no matrix instruction for " + elemTypeName(input) + " inputs";
  bool fp8 = elemTypeBits(input) == 8;
  if (fp8 && !target.fp8)
    choice.failure = what + ": " + target.arch + " has no fp8 matrix instructions";
  else if (fp8 && *target.fp8 != input)
    choice.failure = what + ": its fp8 e4m3 format is " + elemTypeName(*target.fp8);
  else if (sameInput.empty())
    choice.failure = what;
  else
    choice.failure = target.chip + " has no " + elemTypeName(input) + " matrix instruction of shape " +
                     shapeName(*shape) + "; it has " + sameInput;
  return choice;
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

// Chips as data: wave size, LDS, matrix atoms, fp8 format and register budgets of each target.
#ifndef TESSERA_TARGET_TARGETINFO_H
#define TESSERA_TARGET_TARGETINFO_H

#include "tessera/Codegen/MMAAtom.h"

#include <optional>
#include <string>
#include <vector>

namespace tessera {

enum class Vendor { AMD, NVIDIA };

/// How tiles staged in LDS avoid bank conflicts on this target.
enum class LdsSwizzle { Pad, Xor };

/// The cross-lane primitive row reductions prefer.
enum class CrossLane { Dpp, Shuffle };

struct TargetInfo {
  std::string chip;            ///< "gfx942", "sm_90", ...
  Vendor vendor;
  std::string arch;            ///< family name for messages: "CDNA3", "Hopper", ...
  int waveSize;
  int ldsBytes;                ///< LDS / shared memory one workgroup may allocate
  int ldsBanks;                ///< 4-byte banks
  LdsSwizzle ldsSwizzle;
  CrossLane crossLane;
  std::optional<ElemType> fp8; ///< the e4m3 flavour of the matrix cores, if any
  bool hasTransposeLoad;       ///< ds_read_b64_tr_b16 (gfx950): transposingLoads
  std::vector<MMAIntrinsic> atoms; ///< the matrix instructions this target has, preferred first
  // Register file, per lane, for occupancy (AMD: VGPRs + AGPRs unified on CDNA3/4).
  int maxVgprsPerWave;         ///< addressable VGPRs (arch + acc on CDNA) per wave
  int vgprsPerSimd;            ///< per-lane register file depth of one SIMD
  int vgprGranule;             ///< allocation granularity
  int maxWavesPerSimd;
  int simdsPerCu;              ///< SIMDs (sub-partitions) sharing one CU's LDS
  /// Default software-pipeline depth of wmma_gemm (2: next K step prefetched into registers),
  /// from measurements (bench/NOTES.md); 1 where none was made.
  int gemmStages = 1;
  /// Hopper's warpgroup MMA (wgmma), TMA and setmaxnreg (the "a" targets: sm_90a).
  bool hasWgmma = false;
  /// Asynchronous global -> LDS copies that bypass the registers (cp.async, sm_80 and later).
  bool hasAsyncCopy = false;
  /// One instruction that exchanges the upper half-wave of one register with the lower half-wave
  /// of another (v_permlane32_swap, gfx950): tessera.swap_wave_halves.
  bool hasHalfWaveSwap = false;
  /// An instruction that rounds f32 to bf16 (v_cvt_pk_bf16_f32, cvt.rn.bf16x2.f32); without one
  /// the compiler's rounding also guards NaNs, which KernelBuilder::convertFinite skips.
  bool hasBf16Convert = true;
  /// Like gemmStages, for the flash_attn forward's K/V tiles (AttnRequest::stages): 2 where
  /// llvm-mca measured the register prefetch faster (bench/NOTES.md).
  int attnStages = 1;
  /// The flash_attn forward skips O's rescale in steps where no row's max moved
  /// (AttnRequest::rescaleOnNewMaxOnly): fewer cycles a step on AMD (llvm-mca), 2-4% slower
  /// on the H100 with mma.sync (bench/NOTES.md).
  bool attnLazyRescale = false;
  /// The attention forward and decode apply the score scale inside each exp2's fma
  /// (AttnRequest::scaleInExp): fewer cycles a step on CDNA (llvm-mca); on RDNA3 its head_dim
  /// 256 kernels got 9-15% slower (bench/NOTES.md).
  bool attnScaleInExp = false;
  /// Up to this head_dim the flash_attn forward walks its interior key tiles (no mask, every key
  /// valid, softcap off, aligned K/V rows) in a loop of their own, free of the edge code
  /// (attn::Mainloop); 0: never. From llvm-mca (bench/NOTES.md): fewer cycles a step on AMD,
  /// except gfx950 at head_dim 256 (past 256 VGPRs); not measured on NVIDIA.
  int attnInteriorLoopMaxHeadDim = 0;
  /// Dynamic shared memory a workgroup may opt into on targets with wgmma (227 KiB on sm_90).
  static constexpr int hopperSharedBytes = 227 * 1024;

  bool isAMD() const { return vendor == Vendor::AMD; }
  /// True when `atom`'s operands can be loaded with matrix loads that transpose (16-bit
  /// elements: ldmatrix .trans on NVIDIA, ds_read_b64_tr_b16 on gfx950), so a tile whose rows
  /// run along K needs no transposed staging.
  bool transposingLoads(const MMAAtom &atom) const;
  /// The preferred atom with this input type, or nullptr (chooseAtoms says why).
  const MMAAtom *preferredAtom(ElemType input) const;
  /// Waves per SIMD given one workgroup's registers per lane and LDS bytes.
  int occupancy(int vgprsPerLane, int ldsBytesPerWorkgroup, int wavesPerWorkgroup) const;
};

/// An atom shape a caller needs; 0 leaves a dimension free.
struct AtomShape {
  int m = 0, n = 0, k = 0;
};

/// The outcome of chooseAtoms: the matching atoms, preferred first, or why there are none.
struct AtomChoice {
  std::vector<const MMAAtom *> atoms;
  std::string failure; ///< set when `atoms` is empty; names the target, input type and shape
  explicit operator bool() const { return !atoms.empty(); }
};

/// The atoms of `target` that multiply `input` elements (and have `shape`, where given), in
/// the target's order of preference; selection by data in the manner of Triton's MfmaGroup
/// and upstream's mfmaOpToIntrinsic. An fp8 format the target's matrix cores do not read
/// (FNUZ on gfx950, any fp8 on gfx11) fails with a message that says so.
AtomChoice chooseAtoms(const TargetInfo &target, ElemType input,
                       std::optional<AtomShape> shape = std::nullopt);

/// The target named `chip`, or nullptr.
const TargetInfo *lookupTarget(const std::string &chip);
/// Every known target (for messages and tests).
const std::vector<TargetInfo> &allTargets();
/// "gfx942, gfx950, ..." for diagnostics.
std::string knownTargetNames();

} // namespace tessera

#endif // TESSERA_TARGET_TARGETINFO_H

// The portable flash_attn_bwd planner (FlashAttnBwdPlan.h).
#include "tessera/Codegen/FlashAttnBwdPlan.h"
#include "tessera/Codegen/LdsLayout.h"

#include <algorithm>
#include <sstream>

namespace tessera {

namespace {

/// Registers per lane the unrolled products may hold at once, the rest for addresses, the
/// softmax and the scheduler's slack: five eighths of what a thread can address on CDNA, three
/// quarters with WMMA (whose smallest tiles need it at head_dim 256), seven eighths with
/// mma.sync (ptxas trades its load scheduling for registers first).
int registerBudget(const TargetInfo &t, const MMAAtom &atom) {
  int eighths = atom.kind == AtomKind::MFMA ? 5 : atom.kind == AtomKind::WMMA ? 6 : 7;
  return std::min(t.maxVgprsPerWave, 256) * eighths / 8;
}

/// f32 accumulator registers per lane of a wave's share of `w`.
int accRegs(const WaveTiles &w, int waveSize) {
  return w.perWave() * w.tileRows * w.tileCols / waveSize;
}

/// The operands of a product: stored with K along their columns, or along their rows (read
/// element by element, one register each, where the atom has no transposing matrix loads).
enum class Stored { Natural, BTransposed, BothTransposed };

/// The k-steps of fragments in flight for `products` products over `depth`: AMD's scheduler
/// hoists the reads of all of them up to about four steps ahead; ptxas, short of registers,
/// loads one product's fragments just in time.
int stepsInFlight(const MMAAtom &atom, int depth, int products) {
  if (atom.kind == AtomKind::MMASync) return 1;
  return std::min(depth / atom.k, 4) * products;
}

/// Registers of the operand fragments of a wave's block of `products` products of `w` reducing
/// over `depth`: per k-step, blockRows() A and blockCols() B fragments (unpacked, one register
/// per element, where a transposed operand is read element by element).
int fragmentRegs(const AttnBwdPlan &p, const WaveTiles &w, int depth, int products,
                 Stored stored) {
  const MMAAtom &a = *p.atom;
  auto regs = [&](const OperandLayout &l, bool transposed) {
    bool unpacked = transposed && a.kind != AtomKind::MMASync;
    return unpacked ? l.elementsPerLane() : l.elementsPerLane() * elemTypeBits(p.elem) / 32;
  };
  int rows = w.blockRows(), cols = w.blockCols();
  // WMMA counted as if every tile loaded its own fragments: counted shared, the plans chosen
  // spill on gfx11 (measured), its replicated fragments hold more than the count says.
  if (a.kind == AtomKind::WMMA) rows = cols = w.perWave();
  int perStep = rows * regs(a.a, stored == Stored::BothTransposed) +
                cols * regs(a.b, stored != Stored::Natural);
  return stepsInFlight(a, depth, products) * perStep;
}

/// Why an `rows` x `cols` product reducing over `depth` does not tile with the atom, or "".
std::string shapeProblem(const AttnBwdPlan &p, const char *what, int rows, int cols, int depth) {
  const MMAAtom &a = *p.atom;
  if (rows % a.m || cols % a.n || depth % a.k) {
    std::ostringstream s;
    s << what << " (" << rows << " x " << cols << ", reducing " << depth << ") does not tile with "
      << a.name << " (" << a.m << "x" << a.n << "x" << a.k << ")";
    return s.str();
  }
  return "";
}

std::string fitProblem(const char *kernel, int lds, int regs, const TargetInfo &t,
                       const MMAAtom &atom) {
  std::ostringstream s;
  if (lds > attnBwdLdsLimit(t))
    s << kernel << " needs " << lds << " bytes of LDS, " << t.chip << " has "
      << attnBwdLdsLimit(t);
  else if (regs > registerBudget(t, atom))
    s << kernel << " needs about " << regs << " registers per lane, over the budget of "
      << registerBudget(t, atom) << " on " << t.chip;
  return s.str();
}

std::string mainProblem(const AttnBwdPlan &p, const TargetInfo &t) {
  for (std::string why : {shapeProblem(p, "S^T", p.blockN, p.blockM, p.headDim),
                          shapeProblem(p, "dK/dV", p.blockN, p.headDim, p.blockM),
                          shapeProblem(p, "dQ", p.blockM, p.headDim, p.blockN)})
    if (!why.empty()) return why;
  const int ws = p.atom->waveSize;
  // dK and dV live throughout; each phase adds its own accumulators and fragments.
  int phase1 = 2 * accRegs(p.scores(), ws) +
               fragmentRegs(p, p.scores(), p.headDim, 2, Stored::Natural);
  const bool copies = p.transposedCopies;
  int phase2 = fragmentRegs(p, p.keyGrads(), p.blockM, 2,
                            copies ? Stored::Natural : Stored::BTransposed);
  int phase3 = accRegs(p.queryGrads(), ws) +
               fragmentRegs(p, p.queryGrads(), p.blockN, 1,
                            copies ? Stored::Natural : Stored::BothTransposed);
  int regs = 2 * accRegs(p.keyGrads(), ws) + std::max({phase1, phase2, phase3});
  return fitProblem("the main kernel", attnBwdMainLdsBytes(p, t), regs, t, *p.atom);
}

std::string dqProblem(const AttnBwdPlan &p, const TargetInfo &t) {
  for (std::string why : {shapeProblem(p, "S", p.dqBlockM, p.dqBlockN, p.headDim),
                          shapeProblem(p, "dQ", p.dqBlockM, p.headDim, p.dqBlockN)})
    if (!why.empty()) return why;
  const int ws = p.atom->waveSize;
  int phase1 = 2 * accRegs(p.dqScores(), ws) +
               fragmentRegs(p, p.dqScores(), p.headDim, 2, Stored::Natural);
  int phase2 = fragmentRegs(p, p.dqGrads(), p.dqBlockN, 1,
                            p.transposedCopies ? Stored::Natural : Stored::BTransposed);
  int regs = accRegs(p.dqGrads(), ws) + std::max(phase1, phase2);
  return fitProblem("the dQ kernel", attnBwdDqLdsBytes(p, t), regs, t, *p.atom);
}

} // namespace

WaveTiles dealTiles(int rows, int cols, int tileRows, int tileCols, int waves, int colGroup) {
  WaveTiles best{rows, cols, tileRows, tileCols, waves};
  auto worse = [&](const WaveTiles &a, const WaveTiles &b) { // a worse than b
    if (a.activeWaves() != b.activeWaves()) return a.activeWaves() < b.activeWaves();
    bool groupedA = a.blockCols() % colGroup == 0, groupedB = b.blockCols() % colGroup == 0;
    if (groupedA != groupedB) return groupedB;
    int spanA = a.blockRows() * a.tileRows + a.blockCols() * a.tileCols;
    int spanB = b.blockRows() * b.tileRows + b.blockCols() * b.tileCols;
    if (spanA != spanB) return spanA > spanB;
    return a.blockRows() + a.blockCols() > b.blockRows() + b.blockCols();
  };
  for (int r = 1; r <= waves; ++r)
    for (int c = 1; r * c <= waves; ++c) {
      WaveTiles w = best;
      w.waveRows = r, w.waveCols = c;
      if (w.tilesDown() % r || w.tilesAcross() % c) continue;
      if (worse(best, w)) best = w;
    }
  return best;
}

int attnBwdLdsLimit(const TargetInfo &t) {
  return t.vendor == Vendor::NVIDIA && t.arch == "Hopper" ? TargetInfo::hopperSharedBytes
                                                          : t.ldsBytes;
}

int attnBwdMainLdsBytes(const AttnBwdPlan &p, const TargetInfo &t) {
  auto tile = [&](int rows, int cols) { return ldsTileBytes(t, p.elem, rows, cols); };
  int copies = p.transposedCopies ? tile(p.headDim, p.blockN) + 2 * tile(p.headDim, p.blockM) +
                                        tile(p.blockM, p.blockN)
                                  : 0;
  return 2 * tile(p.blockN, p.headDim) +
         p.queryBuffers * (2 * tile(p.blockM, p.headDim) + 2 * 4 * p.blockM) +
         2 * tile(p.blockN, p.blockM) + copies;
}

int attnBwdDqLdsBytes(const AttnBwdPlan &p, const TargetInfo &t) {
  auto tile = [&](int rows, int cols) { return ldsTileBytes(t, p.elem, rows, cols); };
  return 2 * tile(p.dqBlockM, p.headDim) + p.keyBuffers * 2 * tile(p.dqBlockN, p.headDim) +
         tile(p.dqBlockM, p.dqBlockN) + 2 * 4 * p.dqBlockM +
         (p.transposedCopies ? tile(p.headDim, p.dqBlockN) : 0);
}

namespace {

/// The plan with `atom` (and transposed copies, when `copies`), or why none fits.
AttnBwdPlanResult planWithAtom(const MMAAtom &atom, int headDim, ElemType elem,
                               const TargetInfo &target, std::optional<AttnBwdTile> tile,
                               bool copies) {
  AttnBwdPlan p;
  p.atom = &atom;
  p.elem = elem;
  p.headDim = headDim;
  p.transposedCopies = copies;
  p.waves = tile ? tile->waves : 256 / atom.waveSize; // 4 waves of 64 lanes, 8 of 32
  if (p.waves < 1 || p.threads() > 1024)
    return {std::nullopt, "a flash_attn_bwd workgroup of " + std::to_string(p.waves) +
                              " waves of " + std::to_string(atom.waveSize) +
                              " lanes is outside 1 to 1024 threads"};
  // Larger key blocks first (fewer dQ partials per query), then larger query steps.
  std::vector<std::pair<int, int>> mainTiles = {{128, 64}, {64, 64}, {64, 32}, {64, 16},
                                                {32, 32}, {32, 16}, {16, 32}, {16, 16}};
  std::vector<std::pair<int, int>> dqTiles = {{128, 64}, {64, 64}, {64, 32}, {32, 64}, {32, 32},
                                              {32, 16}, {16, 32}, {16, 16}};
  // mma.sync up to head_dim 64: both kernels on FlashAttention-2's 128 x 128, measured faster
  // than 128 x 64 on Hopper (bench/NOTES.md).
  if (atom.kind == AtomKind::MMASync && headDim <= 64) {
    mainTiles.insert(mainTiles.begin(), {128, 128});
    dqTiles.insert(dqTiles.begin(), {128, 128});
  }
  // mma.sync above head_dim 128: the dQ kernel on FlashAttention-2's 64 x 64. At 128 x 64 the
  // model fits but ptxas spills, and 64 x 64 measured faster and compiles in half the time
  // (bench/NOTES.md).
  if (atom.kind == AtomKind::MMASync && headDim > 128)
    dqTiles.erase(std::remove(dqTiles.begin(), dqTiles.end(), std::pair{128, 64}), dqTiles.end());
  if (tile) mainTiles = {{tile->n, tile->m}};
  // Double-buffered streams where the target copies asynchronously, else (or where LDS does
  // not allow it) one buffer: the tile size matters more than the overlap.
  const int buffers = target.hasAsyncCopy ? 2 : 1;
  std::string why;
  for (auto [n, m] : mainTiles) {
    p.blockN = n, p.blockM = m;
    for (p.queryBuffers = buffers; p.queryBuffers >= 1; --p.queryBuffers)
      if ((why = mainProblem(p, target)).empty()) break;
    if (why.empty()) break;
  }
  if (!why.empty())
    return {std::nullopt, std::string("no flash_attn_bwd tile of ") + atom.name + " fits" +
                              (tile ? " the given tile" : "") + ": " + why};
  for (auto [m, n] : dqTiles) {
    p.dqBlockM = m, p.dqBlockN = n;
    for (p.keyBuffers = buffers; p.keyBuffers >= 1; --p.keyBuffers)
      if ((why = dqProblem(p, target)).empty()) break;
    if (why.empty()) {
      // mma.sync at head_dim 96 and 128, where it measured faster; at 64 (128 x 128) it
      // measured slower and at 256 ptxas spills for the extra fragments (bench/NOTES.md).
      p.prefetchFragments = atom.kind == AtomKind::MMASync && (headDim == 96 || headDim == 128);
      // mma.sync, where it measured faster: the dQ kernel's dP at head_dim 64 and 128, the
      // main kernel's without dQ at 64 (not at 128; bench/NOTES.md).
      p.dqKernelDpPerVariant = atom.kind == AtomKind::MMASync && (headDim == 64 || headDim == 128);
      p.mainKernelDpPerVariantWithoutDq = atom.kind == AtomKind::MMASync && headDim == 64;
      p.dynamicLds = std::max(attnBwdMainLdsBytes(p, target), attnBwdDqLdsBytes(p, target)) >
                     target.ldsBytes;
      return {p, ""};
    }
  }
  return {std::nullopt, std::string("no flash_attn_bwd dQ tile of ") + atom.name + " fits: " + why};
}

} // namespace

AttnBwdPlanResult planAttentionBwd(int headDim, ElemType elem, const TargetInfo &target,
                                   std::optional<AttnBwdTile> tile) {
  AtomChoice atoms = chooseAtoms(target, elem, AtomShape{16, 0, 0});
  if (!atoms) return {std::nullopt, atoms.failure};
  // The target's atoms of 16 rows in its order; the first one's reason when none fits.
  AttnBwdPlanResult first;
  for (const MMAAtom *atom : atoms.atoms) {
    // WMMA keeps transposed copies where they fit in LDS (head_dim 256 on gfx11 does not).
    AttnBwdPlanResult r = planWithAtom(*atom, headDim, elem, target, tile,
                                       atom->kind == AtomKind::WMMA);
    if (!r.plan && atom->kind == AtomKind::WMMA)
      r = planWithAtom(*atom, headDim, elem, target, tile, false);
    if (r.plan) return r;
    if (first.whyNot.empty()) first = r;
  }
  return first;
}

} // namespace tessera

// The portable flash_attn_bwd plan as plain data: the atom of its products, the key block of the
// main kernel and its query step, the query block of the deterministic dQ kernel, chosen from the
// target's atoms with a named reason when nothing fits. No MLIR: unit-tested alone.
#ifndef TESSERA_CODEGEN_FLASHATTNBWDPLAN_H
#define TESSERA_CODEGEN_FLASHATTNBWDPLAN_H

#include "tessera/Codegen/MMAAtom.h"
#include "tessera/Target/TargetInfo.h"

#include <optional>
#include <string>

namespace tessera {

/// An output of `rows` x `cols` cut into atom tiles and dealt to the waves of a workgroup in
/// blocks: the waves form a waveRows x waveCols grid (row-major; waves past it idle) and wave
/// (r, c) owns the blockRows() x blockCols() tiles from tile (r * blockRows(), c * blockCols()).
/// A product over a block loads blockRows() A and blockCols() B fragments per k-step for
/// perWave() matrix instructions.
struct WaveTiles {
  int rows = 0, cols = 0, tileRows = 0, tileCols = 0, waves = 0;
  int waveRows = 1, waveCols = 1;
  int tilesDown() const { return rows / tileRows; }
  int tilesAcross() const { return cols / tileCols; }
  int count() const { return tilesDown() * tilesAcross(); }
  int blockRows() const { return tilesDown() / waveRows; }
  int blockCols() const { return tilesAcross() / waveCols; }
  int perWave() const { return blockRows() * blockCols(); }
  int activeWaves() const { return waveRows * waveCols; }
};

/// The layout of `rows` x `cols` in tiles of tileRows x tileCols over `waves` waves: as many
/// waves busy as the tiles allow, then blocks of whole groups of `colGroup` column tiles where
/// possible, then the blocks whose fragments cover the fewest rows and columns (the LDS each
/// k-step reads).
WaveTiles dealTiles(int rows, int cols, int tileRows, int tileCols, int waves, int colGroup = 1);

/// Both kernels work on one atom (m x n x k, 16 rows) for all products; every wave of
/// `waves` takes a share of each product's tiles (WaveTiles). The main kernel owns `blockN` keys
/// (dK and dV in registers) and steps through queries `blockM` at a time:
///   S^T = K Q^T, dP^T = V dO^T   [blockN x blockM], P^T and dS^T to LDS,
///   dV += P^T dO, dK += dS^T Q   [blockN x headDim],
///   dQ partial = dS K            [blockM x headDim], added to the f32 workspace;
/// the deterministic dQ kernel owns `dqBlockM` queries and steps through keys `dqBlockN` at a
/// time: S, dP [dqBlockM x dqBlockN], dS to LDS, dQ += dS K [dqBlockM x headDim].
struct AttnBwdPlan {
  const MMAAtom *atom = nullptr;
  ElemType elem = ElemType::F16;
  int headDim = 0, waves = 0;
  int blockN = 0, blockM = 0;
  int dqBlockM = 0, dqBlockN = 0;
  /// The atom reads an operand stored with K along its rows element by element (WMMA: no
  /// transposing matrix loads, 16 elements per lane): the kernels then keep transposed copies
  /// of Q, dO, K and dS in LDS so that every operand is read along K, in vectors.
  bool transposedCopies = false;
  /// Buffers of the streamed blocks: the main kernel's query blocks (Q, dO and their statistics)
  /// and the dQ kernel's key blocks (K, V). Two where the target copies asynchronously and LDS
  /// allows: the next block lands while this one is computed.
  int queryBuffers = 1, keyBuffers = 1;
  /// The tiles live in dynamic shared memory (Hopper's opt-in beyond the 48 KiB of static
  /// shared memory), sized per kernel by attnBwd*LdsBytes.
  bool dynamicLds = false;
  /// Each k-step's operand fragments are loaded during the previous step's matrix ops
  /// (FlashAttention-2's register pipelining): set where that measured faster.
  bool prefetchFragments = false;
  /// dP's product emitted inside each score variant, next to P's exp2 (FlashAttention-2's
  /// order), instead of before the variants' branch: in the dQ kernel, and in the main kernel
  /// when it has no dQ product (deterministic). Set where that measured faster.
  bool dqKernelDpPerVariant = false, mainKernelDpPerVariantWithoutDq = false;

  int threads() const { return waves * atom->waveSize; }
  WaveTiles scores() const { return tiles(blockN, blockM); }
  WaveTiles keyGrads() const { return tiles(blockN, headDim); }
  WaveTiles queryGrads() const { return tiles(blockM, headDim); }
  WaveTiles dqScores() const { return tiles(dqBlockM, dqBlockN); }
  WaveTiles dqGrads() const { return tiles(dqBlockM, headDim); }
  /// On mma.sync, blocks of whole pairs of 8-column tiles: one ldmatrix.x4 loads two B
  /// fragments, and Hopper adds dQ's partials of a tile pair in one 16-byte reduction.
  WaveTiles tiles(int rows, int cols) const {
    return dealTiles(rows, cols, atom->m, atom->n, waves, atom->kind == AtomKind::MMASync ? 2 : 1);
  }
};

struct AttnBwdPlanResult {
  std::optional<AttnBwdPlan> plan;
  std::string whyNot; ///< the limit the closest candidate failed (atom, shape, LDS, registers)
};

/// The main kernel's tile a directive asks for (its `tile`: m queries per step, n keys, waves).
struct AttnBwdTile {
  int m, n, waves;
};

/// The plan of a flash_attn_bwd directive of `headDim` and `elem` on `target`: the given main
/// tile or the first key block (largest first) and query step that fit, and the dQ kernel's
/// first query block that fits.
AttnBwdPlanResult planAttentionBwd(int headDim, ElemType elem, const TargetInfo &target,
                                   std::optional<AttnBwdTile> tile = std::nullopt);

/// LDS bytes of the main kernel (K, V, Q, dO, P^T, dS^T tiles and the per-query statistics) and
/// of the deterministic dQ kernel (Q, dO, K, V, dS and the statistics), with the transposed
/// copies.
int attnBwdMainLdsBytes(const AttnBwdPlan &p, const TargetInfo &target);
/// LDS a backward workgroup may use on `target`: Hopper's opt-in dynamic shared memory, else the
/// target's static limit.
int attnBwdLdsLimit(const TargetInfo &target);
int attnBwdDqLdsBytes(const AttnBwdPlan &p, const TargetInfo &target);

} // namespace tessera

#endif // TESSERA_CODEGEN_FLASHATTNBWDPLAN_H

// The epilogue of a warpgroup's m64 x N f32 wgmma accumulator: scaled per row, rounded to 16
// bits and staged in shared memory as TMA's 128-byte swizzle lays a box out (panels of 64
// columns, 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r % 8)), then stored by TMA,
// or by the threads (16 bytes each) when the rows must stop at a runtime count that is not the
// tensor's end (TMA clips a box only there).
#ifndef TESSERA_CODEGEN_HOPPER_EPILOGUE_H
#define TESSERA_CODEGEN_HOPPER_EPILOGUE_H

#include "tessera/Codegen/Hopper/Tma.h"

namespace tessera::hopper {

/// Where warpgroup thread t (0..127) holds the m64nN f32 accumulator: value i is at row
/// firstRow(t) + 8 * half(i) and column 8 * group(i) + firstColumn(t) + i % 2. Every answer is
/// read off the atom table's wgmma accumulator layout (wgmmaAccumulatorLayout).
struct AccumulatorLayout {
  static int group(int i);
  static int half(int i);
  static int index(int group, int half, int e);
  /// 16 per warp, then the 8 lane groups of 4.
  static mlir::Value firstRow(KernelBuilder &kb, mlir::Value t);
  static mlir::Value firstColumn(KernelBuilder &kb, mlir::Value t);
};

/// A 64-row staged tile of `columns` 16-bit `elem` values at byte `base` of the dynamic shared
/// memory `smem` (memref<bytes x i8>).
struct StagedTile {
  mlir::Value smem, base;
  int smemBytes, columns;
  mlir::Type elem;
  static constexpr int rows = 64;
  int panels() const { return columns / 64; }
};

class EpilogueBuilder {
public:
  EpilogueBuilder(KernelBuilder &kb, TmaBuilder &tma) : kb(kb), tma(tma) {}

  /// Thread t's accumulator values `acc` times `rowScale[half]`, into the staged tile.
  void stage(const StagedTile &tile, llvm::ArrayRef<mlir::Value> acc, const mlir::Value rowScale[2],
             mlir::Value t);
  /// TMA stores of the tile's panels (one thread; after fenceProxyAsyncShared and a barrier),
  /// panel p to the box `coords(p)` of `map`, whose box shape is `box`.
  void storeByTma(const StagedTile &tile, mlir::Value map, llvm::ArrayRef<int64_t> box,
                  llvm::function_ref<llvm::SmallVector<mlir::Value>(int)> coords);
  /// The whole warpgroup (t in 0..127, after a barrier) stores rows [0, rows) of the tile to
  /// `dst` (memref<?x elem>): row r at element `dstBase + r * rowStride`. `aligned` (i1): dst's
  /// rows are 16-byte aligned (else element stores).
  void storeByThreads(const StagedTile &tile, mlir::Value t, mlir::Value rows, mlir::Value dst,
                      mlir::Value dstBase, mlir::Value rowStride, mlir::Value aligned);

private:
  /// Byte offset in `tile` of 16-byte chunk `chunk` (of the row, across panels) of row `row`.
  mlir::Value chunkOffset(const StagedTile &tile, mlir::Value row, mlir::Value chunk);

  KernelBuilder &kb;
  TmaBuilder &tma;
};

} // namespace tessera::hopper

#endif // TESSERA_CODEGEN_HOPPER_EPILOGUE_H

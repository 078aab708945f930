// Dropout on attention's probabilities from a counter-based RNG (Philox4x32-10), so that the
// backward regenerates the forward's mask instead of storing it. The mask is a fixed function of
// (seed, offset, sequence, query head, query, key), whatever the kernel's tiles (docs/attention.md,
// "Dropout"):
//   words = Philox4x32-10(key = (seed_lo, seed_hi ^ offset_hi),
//                         counter = (j >> 1, i >> 2, b * Hq + h, offset_lo))
//   r = 16 bits (j & 1) of words[i & 3];  kept when r >= floor(p * 65536)
// and a kept probability is scaled by 65536 / (65536 - floor(p * 65536)). One call serves a 4 x 2
// block of (query, key): every layout's lane holds several elements of one.
#ifndef TESSERA_CODEGEN_ATTENTION_DROPOUT_H
#define TESSERA_CODEGEN_ATTENTION_DROPOUT_H

#include "tessera/Codegen/Attention/AccView.h"
#include "tessera/Codegen/KernelBuilder.h"

namespace tessera::attn {

/// The RNG of one (sequence, query head) and the rate, as the kernel's i32/f32 values.
struct Dropout {
  mlir::Value key0, key1; ///< Philox key: seed_lo, seed_hi ^ offset_hi
  mlir::Value offset;     ///< the counter's last word: offset_lo
  mlir::Value threshold;  ///< floor(p * 65536): 16-bit draws below it drop
  mlir::Value keepScale;  ///< f32 65536 / (65536 - threshold): a kept probability's factor
  mlir::Value stream;     ///< b * Hq + h (i32); set by forStream

  /// The rate `p` (f32) and `rngState` (i32 memref: seed_lo, seed_hi, offset_lo, offset_hi).
  static Dropout load(KernelBuilder &kb, mlir::Value rngState, mlir::Value p);
  /// This RNG for sequence `batch`, query head `head` of `headsQ` (index values).
  Dropout forStream(KernelBuilder &kb, mlir::Value batch, mlir::Value head,
                    mlir::Value headsQ) const;
};

/// Which elements of a score tile survive, as an i32 whose bit r is register r's (a lane holds at
/// most 32 elements of an atom's tile): lane `lane`'s accumulator seen through `view`, the tile
/// starting at query query0 + queryOffset and key key0 + keyOffset of the sequence (query0 a
/// multiple of 4 and key0 of 2, as tile origins are). Packed, a kernel can draw the mask before the
/// products whose results it masks, holding one register a tile across them.
mlir::Value dropoutKeep(KernelBuilder &kb, const Dropout &d, const AccView &view,
                        mlir::Value lane, mlir::Value query0, mlir::Value key0,
                        int queryOffset = 0, int keyOffset = 0);

/// `tile` with the elements `keep` (dropoutKeep's bits) drops set to 0, the kept ones times
/// `factor` (null: 1).
mlir::Value applyDropout(KernelBuilder &kb, mlir::Value tile, mlir::Value keep,
                         mlir::Value factor = {});

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_DROPOUT_H

// How a target lays out a tile staged in LDS: its row stride (one 16-byte chunk of padding per
// row on padding targets, none where chunks are XOR-swizzled) and so its size, for the planners
// (plain C++) and KernelBuilder::allocLds alike.
#ifndef TESSERA_CODEGEN_LDSLAYOUT_H
#define TESSERA_CODEGEN_LDSLAYOUT_H

#include "tessera/Target/TargetInfo.h"

namespace tessera {

/// Elements of `elemBits` bits per 16-byte chunk (the unit of padding and swizzling).
inline int ldsChunkElems(int elemBits) { return 128 / elemBits; }

/// Elements per row of a `cols`-wide tile, padding included.
inline int ldsRowStride(const TargetInfo &target, int elemBits, int cols) {
  return target.ldsSwizzle == LdsSwizzle::Pad ? cols + ldsChunkElems(elemBits) : cols;
}

/// Bytes of a `rows` x `cols` tile of `elem`.
inline int ldsTileBytes(const TargetInfo &target, ElemType elem, int rows, int cols) {
  return rows * ldsRowStride(target, elemTypeBits(elem), cols) * elemTypeBits(elem) / 8;
}

} // namespace tessera

#endif // TESSERA_CODEGEN_LDSLAYOUT_H

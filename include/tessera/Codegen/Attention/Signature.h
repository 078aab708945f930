// The flash_attn kernel ABI (docs/flash_attn-abi.md) as typed argument handles: a tensor is its
// pointer and strides together, every scalar a handle, so kernel code never names an argument by
// a string.
#ifndef TESSERA_CODEGEN_ATTENTION_SIGNATURE_H
#define TESSERA_CODEGEN_ATTENTION_SIGNATURE_H

#include "tessera/Codegen/Attention/Visibility.h"
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

namespace tessera::attn {

/// A (batch, sequence, head, dim) tensor argument: its pointer and its batch, sequence and head
/// strides in elements (unit stride along the head dimension).
struct TensorArg {
  ArgHandle ptr, strideB, strideS, strideH;
};

/// The same tensor inside the kernel.
struct Tensor {
  mlir::Value ptr, strideB, strideS, strideH;

  static Tensor bind(mlir::gpu::GPUFuncOp func, const TensorArg &a) {
    return {argValue(func, a.ptr), argValue(func, a.strideB), argValue(func, a.strideS),
            argValue(func, a.strideH)};
  }
  /// The element offset of (row 0 of batch item `batch` at packed row `row0`, head `head`): a
  /// varlen tensor has no batch term, its items start at their packed row.
  mlir::Value base(KernelBuilder &kb, const SeqInfo &seq, mlir::Value batch, mlir::Value row0,
                   mlir::Value head) const;
  /// i1: every stride keeps 16-byte alignment for elements of `elemBits` bits.
  mlir::Value stridesAligned16(KernelBuilder &kb, int elemBits) const;
};

/// Every argument of a flash_attn kernel; the optional ones are null handles when the directive
/// lacks the feature.
struct FlashAttnArgs {
  TensorArg q, k, v, o;
  ArgHandle lse, lseStrideB, lseStrideH;  // return_lse
  ArgHandle cuSeqlensQ, cuSeqlensK;       // varlen
  ArgHandle seqUsedQ, seqUsedK;           // seqused: (B,) int32 lengths within cu_seqlens' rows
  ArgHandle sinks;                        // sinks: (Hq,) f32
  ArgHandle alibiSlopes, alibiStrideB;    // alibi: (Hq,) or (B, Hq) f32, stride 0 or Hq
  ArgHandle blockTable, blockTableStride, pageSize; // paged_kv: (B, max_pages) int32
  ArgHandle batch, seqQ, seqK, headsQ, headsKv;
  ArgHandle totalQ, totalK;               // varlen: the packed row counts
  ArgHandle scale;
  ArgHandle windowLeft, windowRight;      // sliding_window
  ArgHandle attentionChunk;               // attention_chunk: chunked local attention, 0 = off
  ArgHandle softcap;                      // softcap
  ArgHandle rngState, dropoutP;           // dropout: 4 x i32 (seed, offset), the rate (f32)
};

/// The kernel ABI of docs/flash_attn-abi.md: q, k, v, o (lse, cu_seqlens), sizes, strides, scale
/// and the feature parameters, launched on [ceil_div(Sq, blockM), Hq, B]. Generators append their
/// own arguments (tensor maps, tile counter) to `sig`.
struct FlashAttnSignature {
  KernelSignature sig;
  FlashAttnArgs args;
};
FlashAttnSignature flashAttnSignature(tessera::FlashAttnOp op, int blockM, int blockThreads);

/// Every argument of the flash_attn_bwd kernels (one ABI for the whole set): the forward's q, k,
/// v, o and LSE (an input here), dO, the gradients dq, dk, dv, and two workspaces: `stats` (f32,
/// per head and query row: Delta = rowsum(dO * O), then the LSE in the main kernel's base) and,
/// unless deterministic, `dqAccum` (f32 dQ partials, per head, query row and head-dim column,
/// zeroed by the runtime, then `dqPadRows` rows more: a query block that overhangs the last row
/// adds its zeros there instead of testing each row).
struct FlashAttnBwdArgs {
  FlashAttnArgs fwd;
  TensorArg dO, dq, dk, dv;
  ArgHandle stats, dqAccum;
};

/// The flash_attn_bwd ABI (docs/flash_attn-abi.md); each kernel of the set sets its own name,
/// grid and block. dq_accum's rows are `dqRowWidth` f32 wide (the kernels' tiles), plus
/// `dqPadRows` rows.
struct FlashAttnBwdSignature {
  KernelSignature sig;
  FlashAttnBwdArgs args;
};
FlashAttnBwdSignature flashAttnBwdSignature(tessera::FlashAttnBwdOp op, int dqRowWidth,
                                            int dqPadRows);

/// A paged KV cache argument: element (page, token, head, d) at page * stridePage + token *
/// strideToken + head * strideHead + d (NHD and HND are two sets of strides).
struct CacheArg {
  ArgHandle ptr, stridePage, strideToken, strideHead;
};

/// Every argument of the paged_decode kernels (one ABI for the set, docs/decode.md); the optional
/// ones are null handles when the directive lacks the feature.
struct PagedDecodeArgs {
  TensorArg q, o;                         // (B, Sq, Hq, D)
  CacheArg k, v;
  ArgHandle blockTable, blockTableStride, cacheSeqlens;
  ArgHandle cacheLeftpad;                 // cache_leftpad: (B,) i32, each sequence's first key
  // fp8 kv_dtype: f32 dequantisation scales, one each (per_tensor: null strides) or one per cache
  // slot and KV head (per_token: both at kScale's addressing of (page, token, head), no d).
  CacheArg kScale;
  ArgHandle vScale;
  ArgHandle lse, lseStrideB, lseStrideH;  // return_lse
  ArgHandle sinks;                        // sinks: (Hq,) f32
  ArgHandle alibiSlopes, alibiStrideB;    // alibi: (Hq,) or (B, Hq) f32, stride 0 or Hq
  ArgHandle batch, seqQ, headsQ, headsKv;
  ArgHandle numSplits, partials;          // split_kv
  ArgHandle scale, windowLeft, softcap;   // window_left: sliding_window, softcap: softcap
};

struct PagedDecodeSignature {
  KernelSignature sig;
  PagedDecodeArgs args;
};
/// The paged_decode ABI; each kernel of the set sets its own name, grid and block.
PagedDecodeSignature pagedDecodeSignature(tessera::PagedDecodeOp op);

/// The visibility rule of a flash_attn or flash_attn_bwd kernel for `seqQ` x `seqK`: its mask
/// with the window and chunk arguments it takes.
Visibility flashAttnVisibility(tessera::AttentionDirective op, KernelBuilder &kb,
                               mlir::gpu::GPUFuncOp func, const FlashAttnArgs &a,
                               mlir::Value seqQ, mlir::Value seqK);

/// The sequence lengths of batch item `batch` of a flash_attn kernel (dense or varlen).
SeqInfo seqInfo(KernelBuilder &kb, mlir::gpu::GPUFuncOp func, const FlashAttnArgs &a,
                bool varlen, mlir::Value batch);

} // namespace tessera::attn

#endif // TESSERA_CODEGEN_ATTENTION_SIGNATURE_H

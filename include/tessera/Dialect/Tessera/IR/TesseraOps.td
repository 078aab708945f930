// The tessera directives: wmma_gemm, flash_attn, flash_attn_bwd, paged_decode and attn_combine; and the
// operations of the kernels they generate that upstream dialects lack (atomic_addf,
// swap_wave_halves).
#ifndef TESSERA_OPS_TD
#define TESSERA_OPS_TD

include "tessera/Dialect/Tessera/IR/TesseraDialect.td"
include "tessera/Dialect/Tessera/IR/TesseraAttrs.td"
include "tessera/Dialect/Tessera/IR/TesseraInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// A directive defines a symbol (the kernel's name) and carries only attributes.
class Tessera_DirectiveOp<string mnemonic, list<Trait> traits = []>
    : Tessera_Op<mnemonic, !listconcat([Symbol, HasParent<"::mlir::ModuleOp">], traits)> {
  let assemblyFormat = "$sym_name attr-dict";
  let hasVerifier = 1;
}

def Tessera_WmmaGemmOp : Tessera_DirectiveOp<"wmma_gemm"> {
  let summary = "C = op(A) * op(B) on the matrix cores";
  let description = [{
    Generates a GEMM kernel `@sym_name` computing `C[M, N] = op(A)[M, K] * op(B)[K, N]` with
    f32 accumulation. M, N, K and the leading dimensions are runtime arguments; any size
    works (tails are masked). `transpose_a` means A is stored K x M (row-major), and
    `transpose_b` means B is stored N x K. All matrices are row-major with a runtime leading
    dimension (unit stride along the row).

    Kernel arguments, in order: `a`, `b`, `c` (pointers), `M`, `N`, `K`, `lda`, `ldb`,
    `ldc`.

    ```mlir
    tessera.wmma_gemm @gemm_bf16 {dtype = bf16, out_type = f32, transpose_b,
                                  tile = #tessera.tile<m = 128, n = 128, k = 32, waves = 4, stages = 1>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttr:$dtype,
                       TypeAttr:$out_type,
                       UnitAttr:$transpose_a,
                       UnitAttr:$transpose_b,
                       OptionalAttr<Tessera_TileConfigAttr>:$tile);
}

def Tessera_FlashAttnOp : Tessera_DirectiveOp<"flash_attn", [Tessera_AttentionDirective]> {
  let summary = "Attention forward (FlashAttention-2 style, online softmax)";
  let description = [{
    Generates a forward attention kernel `@sym_name`:
    `O = softmax(scale * Q K^T + mask) V` with q `(B, Sq, Hq, D)`, k and v `(B, Sk, Hkv, D)`,
    `Hq % Hkv == 0` (MHA, GQA and MQA at runtime). `head_dim` (D) and `dtype` are fixed; batch,
    lengths, head counts, strides and the scale are runtime arguments.

    Optional features the kernel supports (their values are runtime arguments):
    `sliding_window` (window left/right, -1 = unbounded), `attention_chunk` (chunked local
    attention: a query sees only the keys of its chunk of that many positions, 0 = off), `softcap`
    (`cap * tanh(s / cap)` applied to the scaled logits), `return_lse` (writes the
    log-sum-exp per row, `(B, Hq, Sq)` f32), `varlen` (packed batches with `cu_seqlens_q/k`),
    `sinks` (a logit per query head, `(Hq,)` f32, that joins every row's softmax denominator as a
    key without a value would: gpt-oss's attention sinks; O and the LSE include it),
    `alibi` (ALiBi: `-slope * |i + off - j|` added to the scaled logits, slopes `(Hq,)` or
    `(B, Hq)` f32).
    `seqused` (with `varlen`) takes `seqused_q` and `seqused_k` `(B,)` int32: sequence b uses only its
    first `seqused_q[b]` queries and `seqused_k[b]` keys (FlashAttention-3's), its rows still from
    `cu_seqlens_q/k`; the rows past them are not read or written.
    `paged_kv` (with `varlen`) reads K and V from a paged cache, `(num_pages, page_size, Hkv, D)`
    by strides, sequence b's key j at token `j % page_size` of page
    `block_table[b][j / page_size]` (`block_table` `(B, max_pages)` int32; `page_size` a runtime
    argument), as FlashAttention's varlen call with a `block_table` (chunked prefill over vLLM's
    cache); `cu_seqlens_k` still gives the key lengths.
    `dropout` drops each probability of P with a runtime rate `dropout_p` (kept ones scaled by
    `1 / (1 - p)`), the mask drawn from Philox4x32-10 keyed by a seed and offset in device memory
    (`rng_state`), so that `flash_attn_bwd` with `dropout` regenerates it; O includes it, the LSE
    does not (docs/attention.md).
    `pack_gqa` processes that many query heads of one KV head in one tile (1 = off).

    ```mlir
    tessera.flash_attn @fa_d128 {dtype = bf16, head_dim = 128,
                                 mask = #tessera.mask<causal_bottom_right>, return_lse,
                                 tile = #tessera.tile<m = 128, n = 64, k = 64, waves = 4, stages = 2>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttr:$dtype,
                       I64Attr:$head_dim,
                       DefaultValuedAttr<Tessera_MaskKindAttr, "::tessera::MaskKind::None">:$mask,
                       UnitAttr:$sliding_window,
                       UnitAttr:$softcap,
                       UnitAttr:$return_lse,
                       UnitAttr:$varlen,
                       UnitAttr:$sinks,
                       UnitAttr:$alibi,
                       UnitAttr:$attention_chunk,
                       UnitAttr:$paged_kv,
                       UnitAttr:$dropout,
                       UnitAttr:$seqused,
                       DefaultValuedAttr<I64Attr, "1">:$pack_gqa,
                       OptionalAttr<Tessera_TileConfigAttr>:$tile);
}

def Tessera_FlashAttnBwdOp : Tessera_DirectiveOp<"flash_attn_bwd", [Tessera_AttentionDirective]> {
  let summary = "Attention backward (dQ, dK, dV from O, dO and LSE)";
  let description = [{
    Generates the backward kernels of `flash_attn` with the same mask and feature set:
    given q, k, v, o, dO and the forward LSE, computes dQ, dK and dV (dK and dV summed over
    the query heads of a GQA group). `deterministic` makes the dQ accumulation order fixed
    (no floating-point atomics), so repeated runs are bitwise identical. `dropout` takes the
    forward's rate and `rng_state` and regenerates its mask; `seqused` the forward's used lengths.

    ```mlir
    tessera.flash_attn_bwd @fa_bwd {dtype = bf16, head_dim = 128,
                                    mask = #tessera.mask<causal_top_left>, deterministic}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttr:$dtype,
                       I64Attr:$head_dim,
                       DefaultValuedAttr<Tessera_MaskKindAttr, "::tessera::MaskKind::None">:$mask,
                       UnitAttr:$sliding_window,
                       UnitAttr:$softcap,
                       UnitAttr:$varlen,
                       UnitAttr:$alibi,
                       UnitAttr:$attention_chunk,
                       UnitAttr:$dropout,
                       UnitAttr:$seqused,
                       UnitAttr:$deterministic,
                       OptionalAttr<Tessera_TileConfigAttr>:$tile);
}

def Tessera_PagedDecodeOp : Tessera_DirectiveOp<"paged_decode", [Tessera_AttentionDirective]> {
  let summary = "Decode attention over a paged KV cache";
  let description = [{
    Generates a decode kernel `@sym_name` for a few query tokens per sequence against a
    KV cache stored in pages of `block_size` tokens addressed through a block table
    (vLLM layout). `kv_dtype` is the cache element type: `dtype` itself, or fp8 e4m3
    (`f8E4M3FNUZ` on gfx942, `f8E4M3FN` elsewhere) with dequantisation scales of
    granularity `kv_scale`. `fp8_products` (an fp8 cache with per-tensor scales) runs the QK
    and PV products on the chip's fp8 matrix instructions, the queries and P quantised to the
    cache's format; without it the cache is dequantised to `dtype` before the products (the
    high-precision default). Sequence lengths, block tables and the scale are runtime
    arguments. `split_kv` splits long contexts across workgroups and combines the partial
    results (the number of splits is a runtime argument). `sinks` takes a logit per query head,
    `(Hq,)` f32, that joins every row's softmax denominator as flash_attn's does (with
    `split_kv`, once, in the combine). `alibi` takes ALiBi slopes `(Hq,)` or `(B, Hq)` f32 as flash_attn's
    does (`-slope * |i + off - j|` on each logit; each row its own query head's slope).
    `cache_leftpad` takes a first key per sequence, `(B,)` i32 (FlashAttention's cache_leftpad): sequence b
    attends to its keys `cache_leftpad[b] .. cache_seqlens[b] - 1`, masks and biases aligned to that range's
    end as without it. `mask` is `none` or
    `causal_bottom_right` (several query tokens at the end of the context). A plain kernel
    `@sym_name_cache_write` writes new tokens' keys and values into the cache's slots
    (docs/decode.md).

    ```mlir
    tessera.paged_decode @decode_fp8 {dtype = bf16, kv_dtype = f8E4M3FN, head_dim = 128,
                                      block_size = 16, kv_scale = #tessera.kv_scale<per_token>,
                                      pack_gqa = 4, split_kv}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttr:$dtype,
                       OptionalAttr<TypeAttr>:$kv_dtype,
                       I64Attr:$head_dim,
                       I64Attr:$block_size,
                       OptionalAttr<Tessera_KVScaleAttr>:$kv_scale,
                       DefaultValuedAttr<Tessera_MaskKindAttr, "::tessera::MaskKind::None">:$mask,
                       UnitAttr:$sliding_window,
                       UnitAttr:$softcap,
                       UnitAttr:$return_lse,
                       UnitAttr:$split_kv,
                       UnitAttr:$fp8_products,
                       UnitAttr:$sinks,
                       UnitAttr:$alibi,
                       UnitAttr:$cache_leftpad,
                       DefaultValuedAttr<I64Attr, "1">:$pack_gqa,
                       OptionalAttr<Tessera_TileConfigAttr>:$tile);
  let extraClassDeclaration = [{
    /// The KV-cache element type: `kv_dtype` when given, else `dtype`.
    ::mlir::Type getKvElementType() {
      return getKvDtype() ? *getKvDtype() : getDtype();
    }
  }];
}

def Tessera_AttnCombineOp : Tessera_DirectiveOp<"attn_combine"> {
  let summary = "Merges attention results computed over parts of the keys";
  let description = [{
    Generates a kernel `@sym_name` that merges, row by row, `num_splits` attention results each
    computed over one part of the keys (split-KV decoding, context parallelism across devices):
    f32 outputs `out_partial (num_splits, B, S, H, head_dim)`, each normalised over its part, and
    their natural-log LSEs `lse_partial (num_splits, B, S, H)` give
    `O = sum_s w_s O_s / sum_s w_s` with `w_s = exp(LSE_s - max_s LSE_s)`, written in `dtype`
    (f32, f16 or bf16), and `LSE = max_s LSE_s + ln sum_s w_s` (f32): FlashAttention-3's
    `flash_attn_combine`, the combine step of paged_decode's `split_kv` as a directive of its
    own. The split count, sizes and every stride are runtime arguments. A part whose LSE is -inf
    (it saw no key) is skipped without reading its output; a row with no such part gives O = 0,
    LSE = -inf (docs/decode.md).

    ```mlir
    tessera.attn_combine @combine_bf16_d128 {dtype = bf16, head_dim = 128}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$dtype, I64Attr:$head_dim);
}

// In generated kernels (not a directive).
def Tessera_AtomicAddFOp : Tessera_Op<"atomic_addf"> {
  let summary = "adds 2 or 4 contiguous f32 to global memory atomically";
  let description = [{
    `memref[index + i] += value[i]` for each element, each add atomic (relaxed, device scope),
    the elements' order unspecified. The first element's address is aligned to the vector's
    size in bytes. Lowered to one vector reduction where the target has one (sm_90's
    `red.global.add.v2.f32` / `.v4.f32`), to one `memref.atomic_rmw addf` per element elsewhere.

    ```mlir
    tessera.atomic_addf %v, %workspace[%i] : vector<4xf32>, memref<?xf32>
    ```
  }];
  let arguments = (ins AllOfType<[VectorOfRankAndType<[1], [F32]>, FixedVectorOfLength<[2, 4]>],
                                 "vector<2xf32> or vector<4xf32>", "::mlir::VectorType">:$value,
                       MemRefRankOf<[F32], [1]>:$memref, Index:$index);
  let assemblyFormat = [{
    $value `,` $memref `[` $index `]` attr-dict `:` type($value) `,` type($memref)
  }];
}

// In generated kernels (not a directive).
def Tessera_SwapWaveHalvesOp : Tessera_Op<"swap_wave_halves", [Pure, AllTypesMatch<["a", "b", "lo", "hi"]>]> {
  let summary = "exchanges the upper half-wave of one value with the lower half-wave of another";
  let description = [{
    With h half the wave size and l the lane: `lo[l] = l < h ? a[l] : b[l - h]` and
    `hi[l] = l < h ? a[l + h] : b[l]`. `lo` thus holds both halves' lower halves and `hi` both
    upper halves, so one op moves two values across the half-waves where a shuffle moves one.
    Every lane of the wave takes part. Lowered to one `v_permlane32_swap` where the target has
    it (gfx950), to two `gpu.shuffle xor h` and two selects elsewhere.

    ```mlir
    %lo, %hi = tessera.swap_wave_halves %a, %b : f32
    ```
  }];
  let arguments = (ins AnyTypeOf<[F32, I32]>:$a, AnyTypeOf<[F32, I32]>:$b);
  let results = (outs AnyTypeOf<[F32, I32]>:$lo, AnyTypeOf<[F32, I32]>:$hi);
  let assemblyFormat = [{
    $a `,` $b attr-dict `:` type($a)
  }];
}

#endif // TESSERA_OPS_TD

"""The tolerance rule of CORRECTNESS.md for checking kernel outputs against float64, and the attention and paged
decode references (float64 and same-precision, numpy or torch), shared by the tests and the benchmarks."""
import math
from typing import NamedTuple


class Tolerance(NamedTuple):
    ok: bool
    failing: int            # elements out of tolerance, NaN included
    nan: int                # NaN elements (poison never overwritten, or computed)
    max_error: float        # max |out - ref| (NaN if any element is NaN)
    reference_error: float  # max |same - ref| of the same-precision implementation

    def __str__(self):
        if self.ok:
            return f"ok (max error {self.max_error:.3g}, same-precision {self.reference_error:.3g})"
        return (f"{self.failing} elements out of tolerance ({self.nan} NaN); max error {self.max_error:.3g}, "
                f"same-precision max error {self.reference_error:.3g}")


def check_tolerance(out64, ref64, same64, scale64, factor=2.0, floor=1e-5, unit_roundoff=0.0):
    """Elementwise |out - ref| <= factor * max|same - ref| + floor * scale, on float64 numpy arrays or torch tensors.

    ref64: the float64 result from the same (rounded) inputs; same64: a straightforward
    same-precision implementation (fp32 accumulation, rounded to the output dtype); scale64: the
    magnitude the floor scales with (|A|·|B| for a GEMM: it grows with K like any accumulation
    error). factor is 2 for forward kernels, 3 for backward. NaN never passes.
    unit_roundoff: that of the output dtype (output_roundoff); max|same - ref| is then taken as at least
    unit_roundoff * max|ref|, what rounding the largest element alone may cost: where few elements reach the
    largest magnitudes, one draw of `same` can round them all favourably and would leave a bound no correctly
    rounded output is sure to meet.
    """
    empty = 0 in tuple(same64.shape)
    reference_error = 0.0 if empty else float(abs(same64 - ref64).max())
    if unit_roundoff and not empty:
        reference_error = max(reference_error, unit_roundoff * float(abs(ref64).max()))
    err = abs(out64 - ref64)
    bad = ~(err <= factor * reference_error + floor * scale64)
    failing, nan = int(bad.sum()), int((out64 != out64).sum())
    max_error = 0.0 if empty else float(err.max())
    return Tolerance(failing == 0, failing, nan, max_error, reference_error)


def output_roundoff(dtype):
    """The unit roundoff (half an ulp of 1) of an output dtype: 2^-11 for f16, 2^-8 for bf16, 2^-24 for f32; 0 for
    float64 (a reference passed as the output)."""
    from ._arrays import dtype_name
    return {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 2.0**-24}.get(dtype_name(dtype), 0.0)


# ---- Attention: a float64 (or same-precision) reference over numpy arrays or torch tensors -------------------------
class AttentionResult(NamedTuple):
    o: object       # (B, Sq, Hq, D) float64 (same-precision: the values rounded to the input dtype)
    lse: object     # (B, Hq, Sq) float64 (same-precision: float32 values); -inf for rows without a visible key
    o_abs: object   # (B, Sq, Hq, D) float64: sum_j p_ij |v_j|, the magnitude the tolerance floor scales with


class _Ops:
    """The few array operations the reference needs, for numpy or torch."""

    def __init__(self, like):
        self.torch = type(like).__module__.startswith("torch")
        if self.torch:
            import torch
            self.lib = torch
        else:
            import numpy
            self.lib = numpy

    def cast(self, x, name):
        """x as float64 / float32, or rounded to f16 / bf16 / an fp8 e4m3 format (returned as float32)."""
        if self.torch:
            t = self.lib
            narrow = {"f16": "float16", "bf16": "bfloat16", "f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz"}
            if name in narrow:
                return x.to(getattr(t, narrow[name])).to(t.float32)
            return x.to({"f64": t.float64, "f32": t.float32}[name])
        np = self.lib
        if name in ("f16", "bf16", "f8E4M3FN", "f8E4M3FNUZ"):
            from ._arrays import numpy_dtype
            return x.astype(np.float32).astype(numpy_dtype(name)).astype(np.float32)
        return x.astype({"f64": np.float64, "f32": np.float32}[name])

    def perm(self, x, *axes):
        return x.permute(*axes) if self.torch else x.transpose(*axes)

    def arange(self, n, like):
        return self.lib.arange(n, device=like.device) if self.torch else self.lib.arange(n)

    def amax(self, x):
        return x.amax(-1, keepdim=True) if self.torch else x.max(-1, keepdims=True)

    def rowsum(self, x):
        return x.sum(-1, keepdim=True) if self.torch else x.sum(-1, keepdims=True)

    def full(self, shape, value, like):
        if self.torch:
            return self.lib.full(shape, value, dtype=like.dtype, device=like.device)
        return self.lib.full(shape, value, like.dtype)

    def where(self, c, a, b):
        if self.torch and not isinstance(b, self.lib.Tensor):
            b = self.lib.tensor(b, dtype=a.dtype, device=a.device)
        return self.lib.where(c, a, b)


def _diagonal_offset(Sq, Sk, causal, causal_align):
    return 0 if causal and causal_align == "top_left" else Sk - Sq


def visible_keys(Sq, Sk, causal=False, causal_align="bottom_right", window=(-1, -1), arange=None, rows=None,
                 attention_chunk=0):
    """(Sq, Sk) bool: key j visible from query i (docs/flash_attn-abi.md): off = 0 for causal top-left, else
    Sk - Sq; causal: j <= i + off; window (left, right): i + off - left <= j <= i + off + right (-1: unbounded);
    attention_chunk C > 0: j in the chunk of C positions holding i + off (FlashAttention-3's chunk mask).
    rows: the query indices to return (an index array; default all Sq)."""
    if arange is None:
        import numpy
        arange = numpy.arange
    i, j = (arange(Sq) if rows is None else rows)[:, None], arange(Sk)[None, :]
    off = _diagonal_offset(Sq, Sk, causal, causal_align)
    ok = (j >= 0) & (i >= 0)
    if attention_chunk > 0:
        first = (i + off) - (i + off) % attention_chunk   # floor: positions left of 0 too
        ok = ok & (j >= first) & (j < first + attention_chunk)
    if causal:
        ok = ok & (j <= i + off)
    if window[0] >= 0:
        ok = ok & (j >= i + off - window[0])
    if window[1] >= 0:
        ok = ok & (j <= i + off + window[1])
    return ok


PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
PHILOX_WEYL = (0x9E3779B9, 0xBB67AE85)


def philox4x32_10(counter, key):
    """Philox4x32-10 (Salmon et al., SC'11) on numpy: counter, a sequence of 4 uint32 arrays, and key, of 2,
    broadcasting against each other; returns the 4 output words (uint32)."""
    import numpy as np
    u64 = np.uint64
    low, shift = u64(0xFFFFFFFF), u64(32)
    c = [np.asarray(x, dtype=u64) & low for x in counter]
    k = [np.asarray(x, dtype=u64) & low for x in key]
    for round_ in range(10):
        if round_:
            k = [(k[0] + u64(PHILOX_WEYL[0])) & low, (k[1] + u64(PHILOX_WEYL[1])) & low]
        p0, p1 = c[0] * u64(PHILOX_MULTIPLIERS[0]), c[2] * u64(PHILOX_MULTIPLIERS[1])
        c = [(p1 >> shift) ^ c[1] ^ k[0], p1 & low, (p0 >> shift) ^ c[3] ^ k[1], p0 & low]
    return [x.astype(np.uint32) for x in c]


def _seed_words(dropout_seed):
    """(seed, offset) as ints from tessera.flash_attn's dropout_seed forms: an int, a pair, a (2,) int64 array."""
    if isinstance(dropout_seed, int):
        return dropout_seed, 0
    pair = dropout_seed.tolist() if hasattr(dropout_seed, "tolist") else list(dropout_seed)
    return tuple(int(x) % (1 << 64) for x in pair)


def dropout_keep(dropout_seed, dropout_p, B, Hq, Sq, Sk, first_batch=0, rows=None):
    """(B, Hq, Sq, Sk) bool numpy: the probabilities tessera's dropout keeps for this seed and rate (docs/attention.md,
    "Dropout"): query i, key j of batch item b (first_batch + its index; varlen: the sequence) and query head h keep
    their probability when 16 bits (j & 1) of word i & 3 of Philox4x32-10 with key (seed_lo, seed_hi ^ offset_hi)
    and counter (j >> 1, i >> 2, b * Hq + h, offset_lo) are at least floor(dropout_p * 65536). rows: only these
    query rows (an index array; the result has len(rows) rows)."""
    import numpy as np
    seed, offset = _seed_words(dropout_seed)
    threshold = int(np.float32(dropout_p) * np.float32(65536))
    key = (seed & 0xFFFFFFFF, (seed >> 32) ^ (offset >> 32))
    i = (np.arange(Sq) if rows is None else np.asarray(rows, dtype=np.int64))[:, None]
    quads, quad_of = np.unique(i >> 2, return_inverse=True)   # one Philox call a (4 queries, 2 keys) block
    quad_of = quad_of.reshape(i.shape)
    bq, bk = quads[:, None], np.arange(-(-Sk // 2))[None, :]
    j = np.arange(Sk)[None, :]
    keep = np.zeros((B, Hq, len(i), Sk), dtype=bool)
    for b in range(B):
        for h in range(Hq):
            words = np.stack(philox4x32_10((bk, bq, (first_batch + b) * Hq + h, offset & 0xFFFFFFFF), key))
            word = words[i & 3, quad_of, j >> 1]
            keep[b, h] = (word >> (16 * (j & 1)).astype(np.uint32)) & np.uint32(0xFFFF) >= threshold
    return keep


def _dropout_terms(ops, dropout, B, Hq, Sq, Sk, like, rows=None):
    """(keep (B, Hq, Sq or len(rows), Sk) as a 0/1 float64 array of like's library, the kept ones' factor) for a
    reference's `dropout` option ((dropout_seed, dropout_p) or with the first batch item's index third); (None, 1)
    without."""
    if dropout is None or not dropout[1]:
        return None, 1.0
    from ._attention import dropout_keep_scale
    if rows is not None and not isinstance(rows, __import__("numpy").ndarray):
        rows = rows.cpu().numpy()
    keep = dropout_keep(dropout[0], dropout[1], B, Hq, Sq, Sk, *dropout[2:], rows=rows).astype("float64")
    if ops.torch:
        keep = ops.lib.from_numpy(keep).to(like.device)
    return keep, dropout_keep_scale(dropout[1])


def _logits(ops, qb, kbt, scale, softcap, visible, bias=None):
    """(s, t): the scaled (capped) logits q·k of qb (h, Sq, D) and kbt ([h,] D, Sk), plus `bias` (ALiBi's, when
    given), -inf where `visible` is False; t = tanh(scale·q·k / softcap), unmasked, for softcap's derivative 1 - t²
    (None without softcap)."""
    s = (qb @ kbt) * scale
    t = None
    if softcap > 0:
        t = ops.lib.tanh(s / softcap)
        s = softcap * t
    if bias is not None:
        s = s + bias
    return ops.where(visible, s, float("-inf")), t


def _alibi_bias(ops, slopes, b, h0, h1, Sq, Sk, causal, causal_align, work, like, rows=None):
    """ALiBi's bias for batch item b and query heads h0:h1: -slope[h] * |i + off - j| (h, Sq, Sk), slopes (Hq,) or
    (B, Hq); None without slopes."""
    if slopes is None:
        return None
    row = slopes if len(slopes.shape) == 1 else slopes[b]
    i = (ops.arange(Sq, like) if rows is None else rows)[:, None]
    off = _diagonal_offset(Sq, Sk, causal, causal_align)
    distance = ops.cast(abs(i + off - ops.arange(Sk, like)[None, :]), work)
    return -ops.cast(row[h0:h1], work)[:, None, None] * distance[None]


def _softmax(ops, s, sink=None):
    """(P, LSE) of logits s (..., Sk), LSE with a trailing 1; rows without a visible key: P = 0, LSE = -inf. sink
    (broadcasting against the LSE): a logit that joins every row's denominator (no value): such rows get
    LSE = sink."""
    m = ops.amax(s) if s.shape[-1] else ops.full(s.shape[:-1] + (1,), float("-inf"), s)
    if sink is not None:
        m = ops.where(m > sink, m, sink)
    m = ops.where(m > float("-inf"), m, 0.0)
    p = ops.lib.exp(s - m)
    l = ops.rowsum(p) + (0 if sink is None else ops.lib.exp(sink - m))
    row_lse = ops.where(l > 0, m + ops.lib.log(ops.where(l > 0, l, 1.0)), float("-inf"))
    return p / ops.where(l > 0, l, 1.0), row_lse


FP8_TOP_EXPONENT = {"f8E4M3FN": 8, "f8E4M3FNUZ": 7}   # the largest power of two each holds: 256 (of 448), 128 (240)


def _fp8_rows(ops, x, fp8):
    """x (..., D) with each row scaled by the power of two that puts its largest magnitude in [2^(top - 1), 2^top),
    rounded to `fp8` and scaled back (exact): tessera.paged_decode's queries under fp8_products."""
    amax = ops.amax(abs(ops.cast(x, "f64")))
    exponent = ops.cast(ops.lib.frexp(amax)[1], "f64")
    power = 2.0 ** ops.where((amax > 0) & (amax < float("inf")), FP8_TOP_EXPONENT[fp8] - exponent, 0.0)
    return ops.cast(ops.cast(x, "f32") * ops.cast(power, "f32"), fp8) / ops.cast(power, "f32")


def attention_reference(q, k, v, causal=False, causal_align="bottom_right", scale=None, window=(-1, -1),
                        softcap=0.0, precision="float64", dtype=None, rows=None, max_bytes=1 << 30, p_format=None,
                        sinks=None, alibi_slopes=None, attention_chunk=0, dropout=None):
    """Attention forward on numpy arrays or torch tensors q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D) with
    tessera.flash_attn's semantics. precision "float64": the reference (the same input values, exact math in
    float64); "same": the straightforward same-precision implementation of CORRECTNESS.md (fp32 logits, softcap
    and softmax, P rounded to the input dtype, fp32 P·V, O rounded to the input dtype). dtype: the input dtype
    name ('f16'/'bf16', default from q). Rows without a visible key give O = 0, LSE = -inf.
    rows: only these query rows (an index array of the same library; results have len(rows) rows).
    p_format: an fp8 format P is rounded to (precision "same"; unnormalised, exp(s - max), and stretched by the
    largest power of two the format holds first, as tessera.paged_decode's fp8_products does) instead of the input
    dtype. sinks: (Hq,) logits, one per query head, in each row's softmax denominator (tessera.flash_attn's sinks).
    alibi_slopes: (Hq,) or (B, Hq), ALiBi's -slope * |i + off - j| added to the (capped) logits. attention_chunk: the
    chunk mask of visible_keys. dropout: (dropout_seed, dropout_p[, first batch item]) as tessera.flash_attn's, the
    kept probabilities (dropout_keep) scaled, the LSE without it (with rows, the mask's rows too). Works per batch item
    and chunk of heads (at most max_bytes of logits at a time)."""
    from ._arrays import dtype_name
    ops = _Ops(q)
    dtype = dtype or dtype_name(q.dtype)
    work = "f64" if precision == "float64" else "f32"
    Sk, Hkv = k.shape[1], k.shape[2]
    full_Sq = q.shape[1]
    if rows is not None:
        q = q[:, rows]
    B, Sq, Hq, D = q.shape
    scale = 1.0 / D ** 0.5 if scale is None else scale
    o = ops.full((B, Sq, Hq, v.shape[-1]), 0.0, ops.cast(q[:0], "f64"))    # O in V's head dim
    o_abs, lse = ops.full(o.shape, 0.0, o), ops.full((B, Hq, Sq), float("-inf"), o)
    if B * Sq * Hq == 0:
        return AttentionResult(o, lse, o_abs)
    visible = visible_keys(full_Sq, Sk, causal, causal_align, window, arange=lambda n: ops.arange(n, q), rows=rows,
                           attention_chunk=attention_chunk)
    group = Hq // Hkv if Hkv else 1
    chunk = max(1, max_bytes // max(1, Sq * Sk * 8))
    keep, keep_scale = _dropout_terms(ops, dropout, B, Hq, full_Sq, Sk, q, rows)
    for b in range(B):
        for h0 in range(0, Hq, chunk):
            heads = ops.arange(min(Hq, h0 + chunk), q)[h0:] // group
            qb = ops.perm(ops.cast(q[b, :, h0:h0 + chunk], work), 1, 0, 2)   # (h, Sq, D)
            kb = ops.perm(ops.cast(k[b][:, heads], work), 1, 2, 0)          # (h, D, Sk)
            vb = ops.perm(ops.cast(v[b][:, heads], work), 1, 0, 2)          # (h, Sk, D)
            bias = _alibi_bias(ops, alibi_slopes, b, h0, min(Hq, h0 + chunk), full_Sq, Sk, causal, causal_align, work,
                               q, rows)
            s, _ = _logits(ops, qb, kb, scale, softcap, visible, bias)
            sink = None if sinks is None else ops.cast(sinks[h0:h0 + chunk], work)[:, None, None]
            p, row_lse = _softmax(ops, s, sink)
            if keep is not None:   # P V from the kept probabilities (unscaled: the kernels scale O with 1 / l)
                p = p * ops.cast(keep[b, h0:h0 + chunk], work)
            if precision != "float64" and p_format and Sk:   # (no keys: nothing to round)
                # The online softmax's P, exp(s - max) (its largest exactly 1), stretched, rounded, over the row sum
                # (the row's largest P is 1 / sum).
                stretch = 2.0 ** FP8_TOP_EXPONENT[p_format]
                largest = ops.amax(p)
                largest = ops.where(largest > 0, largest, 1.0)
                p = ops.cast(p / largest * stretch, p_format) / stretch * largest
            elif precision != "float64":
                p = ops.cast(p, dtype)
            ob = (p @ vb) * keep_scale
            if precision != "float64":
                ob = ops.cast(ob, dtype)
            o[b, :, h0:h0 + chunk] = ops.cast(ops.perm(ob, 1, 0, 2), "f64")
            o_abs[b, :, h0:h0 + chunk] = ops.cast(ops.perm((p @ abs(vb)) * keep_scale, 1, 0, 2), "f64")
            lse[b, h0:h0 + chunk] = ops.cast(row_lse[..., 0], "f64")
    return AttentionResult(o, lse, o_abs)


def attention_probs(q, k, causal=False, causal_align="bottom_right", scale=None, window=(-1, -1), softcap=0.0,
                    alibi_slopes=None, attention_chunk=0, dropout=None):
    """The attention probabilities of tessera.flash_attn's forward, (B, Hq, Sq, Sk) float32 of q's library (torch:
    on its device): P = softmax of the scaled (capped, biased, masked) logits in float32, 0 where a key is not
    visible; with dropout ((dropout_seed, dropout_p[, first batch item]) as attention_reference's) the dropped ones
    negated, as FlashAttention's S_dmask encodes them (FlashAttention's return_attn_probs)."""
    ops = _Ops(q)
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / D ** 0.5 if scale is None else scale
    probs = ops.full((B, Hq, Sq, Sk), 0.0, ops.cast(q[:0], "f32"))
    if B * Hq * Sq * Sk == 0:
        return probs
    visible = visible_keys(Sq, Sk, causal, causal_align, window, arange=lambda n: ops.arange(n, q),
                           attention_chunk=attention_chunk)
    keep, _ = _dropout_terms(ops, dropout, B, Hq, Sq, Sk, q)
    heads = ops.arange(Hq, q) // (Hq // Hkv)
    for b in range(B):
        qb = ops.perm(ops.cast(q[b], "f32"), 1, 0, 2)                      # (Hq, Sq, D)
        kb = ops.perm(ops.cast(k[b][:, heads], "f32"), 1, 2, 0)            # (Hq, D, Sk)
        bias = _alibi_bias(ops, alibi_slopes, b, 0, Hq, Sq, Sk, causal, causal_align, "f32", q)
        p, _ = _softmax(ops, _logits(ops, qb, kb, scale, softcap, visible, bias)[0])
        probs[b] = p if keep is None else p * ops.cast(2 * keep[b] - 1, "f32")
    return probs


def _sequence_rows(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k):
    """Per sequence, its (first, end) query and key rows: cu_seqlens' ranges, cut to seqused_q/k where given."""
    cq, ck = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]
    out = []
    for b in range(len(cq) - 1):
        q1 = cq[b + 1] if seqused_q is None else cq[b] + int(seqused_q[b])
        k1 = ck[b + 1] if seqused_k is None else ck[b] + int(seqused_k[b])
        out.append(((cq[b], q1), (ck[b], k1)))
    return out


def attention_reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_q=None, seqused_k=None, **options):
    """attention_reference over packed sequences: q (total_q, Hq, D), k/v (total_k, Hkv, D), cu_seqlens as
    sequences of ints (seqused_q/k: each sequence's used rows, FlashAttention-3's); O (total_q, Hq, D) and LSE
    (Hq, total_q). Rows outside every sequence (or past its seqused_q): O = 0, LSE = -inf."""
    ops = _Ops(q)
    like = ops.cast(q[:0], "f64")
    total_q, Hq = q.shape[:2]
    o, o_abs = (ops.full((total_q, Hq, v.shape[-1]), 0.0, like) for _ in range(2))
    lse = ops.full((Hq, total_q), float("-inf"), like)
    for b, ((q0, q1), (k0, k1)) in enumerate(_sequence_rows(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)):
        r = attention_reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], **_item_options(options, b))
        o[q0:q1], o_abs[q0:q1], lse[:, q0:q1] = r.o[0], r.o_abs[0], r.lse[0]
    return AttentionResult(o, lse, o_abs)


def _pages(ops, cache, pages):
    """cache[pages]; torch indexes no fp8 tensor, so those through their bytes."""
    if ops.torch and cache.element_size() == 1:
        return cache.view(ops.lib.uint8)[pages].view(cache.dtype)
    return cache[pages]


def paged_decode_reference(q, k_cache, v_cache, block_table, cache_seqlens, kv_layout="NHD", causal=True, scale=None,
                           window_left=-1, softcap=0.0, precision="float64", k_scale=None, v_scale=None,
                           fp8_products=False, sinks=None, alibi_slopes=None, cache_leftpad=None):
    """tessera.paged_decode's result as attention_reference's (AttentionResult: O (B, Sq, Hq, D), LSE (B, Hq, Sq),
    o_abs), on numpy arrays or torch tensors: each sequence's first cache_seqlens[b] keys and values gathered from
    the pages its block_table row names (no other entry or slot is read: NaN there cannot reach the result), then
    attention_reference with bottom-right alignment (query t at position len - Sq + t) and the window
    (window_left, unbounded). precision as attention_reference's. Rows that see no key: O = 0, LSE = -inf.
    fp8 caches with k_scale and v_scale (numbers or one-element arrays; per-token: (num_pages, Hkv, block_size)
    arrays) are dequantised first: stored x scale in float64, and for precision "same" rounded to q's dtype (the
    straightforward dequantise-then-attend); with fp8_products (per-tensor scales) "same" is the straightforward
    fp8 product instead: the scaled cache values kept in float32, each query row rounded to the cache's format
    through a power of two (_fp8_rows), P rounded to it (attention_reference's p_format). sinks: (Hq,) logits and
    alibi_slopes ((Hq,) or (B, Hq)), as attention_reference's. cache_leftpad: (B,) first keys; sequence b attends to
    its keys cache_leftpad[b] .. cache_seqlens[b] - 1 only (aligned to their end)."""
    from ._arrays import dtype_name
    ops = _Ops(q)
    B, Sq, Hq, D = q.shape
    like = ops.cast(q[:0], "f64")
    o, o_abs = ops.full(q.shape, 0.0, like), ops.full(q.shape, 0.0, like)
    lse = ops.full((B, Hq, Sq), float("-inf"), like)
    block_size = k_cache.shape[1 if kv_layout == "NHD" else 2]
    options = dict(causal=causal, causal_align="bottom_right", scale=scale, window=(window_left, -1),
                   softcap=softcap, precision=precision, sinks=sinks)
    fp8 = dtype_name(k_cache.dtype) if fp8_products and precision != "float64" else None
    if fp8:
        q = _fp8_rows(ops, q, fp8)
        options["p_format"] = fp8
    for b in range(B):
        length = int(cache_seqlens[b])
        pages = block_table[b, :-(-length // block_size)]
        pages = pages.long() if ops.torch else pages
        k, v = (_pages(ops, cache, pages) for cache in (k_cache, v_cache))
        if kv_layout != "NHD":
            k, v = (ops.perm(x, 0, 2, 1, 3) for x in (k, v))                             # (pages, bs, Hkv, D)
        k, v = (x.reshape(-1, *x.shape[2:])[None, :length] for x in (k, v))              # (1, length, Hkv, D)
        if k_scale is not None:
            k, v = (ops.cast(x, "f64") * _token_scales(ops, s, pages, length) for x, s in ((k, k_scale), (v, v_scale)))
            if precision != "float64":
                k, v = (ops.cast(x, "f32" if fp8 else dtype_name(q.dtype)) for x in (k, v))
        if cache_leftpad is not None:
            first = min(int(cache_leftpad[b]), length)
            k, v = k[:, first:], v[:, first:]
        slopes = None if alibi_slopes is None else alibi_slopes[b] if len(alibi_slopes.shape) == 2 else alibi_slopes
        r = attention_reference(q[b:b + 1], k, v, **options, dtype=dtype_name(q.dtype), alibi_slopes=slopes)
        o[b], lse[b], o_abs[b] = r.o[0], r.lse[0], r.o_abs[0]
    return AttentionResult(o, lse, o_abs)


def _token_scales(ops, scale, pages, length):
    """A dequantisation scale as a factor of keys (1, length, Hkv, D): a float, or per-token scales
    (num_pages, Hkv, block_size) gathered from `pages` into (1, length, Hkv, 1)."""
    shape = tuple(getattr(scale, "shape", ()))
    if len(shape) != 3 or math.prod(shape) == 1:
        return float(scale.reshape(-1)[0]) if shape else float(scale)
    s = ops.perm(ops.cast(_pages(ops, scale, pages), "f64"), 0, 2, 1)                   # (pages, bs, Hkv)
    return s.reshape(-1, s.shape[2])[None, :length, :, None]


class AttentionGradients(NamedTuple):
    dq: object      # (B, Sq, Hq, D) float64 (same-precision: the values rounded to the input dtype)
    dk: object      # (B, Sk, Hkv, D), summed over the query heads of each GQA group
    dv: object      # (B, Sk, Hkv, D)
    # float64 magnitudes the tolerance floor scales with (zeros for precision "same"), sums of the absolute terms:
    # with |dS|' = P·(|dO|·|V|ᵀ + rowsum(|dO|·P|V|))·|1 - t²| (the terms of dP and D), scale·|dS|'·|K|,
    # scale·|dS|'ᵀ·|Q| and Pᵀ·|dO|; 0 exactly where no visible (query, key) pair reaches the element, where the
    # kernels must give exactly 0
    dq_abs: object
    dk_abs: object
    dv_abs: object
    dsinks: object = None   # (Hq,) float64 with sinks: -sum over rows of P_sink * rowsum(dO * O)


def _item_options(options, b):
    """A varlen reference's options for sequence b: per-sequence ALiBi slopes ((B, Hq)) as that sequence's, dropout's
    mask as that sequence's."""
    slopes = options.get("alibi_slopes")
    if slopes is not None and len(slopes.shape) == 2:
        options = {**options, "alibi_slopes": slopes[b]}
    if options.get("dropout") is not None:
        options = {**options, "dropout": (*options["dropout"][:2], b)}
    return options


def attention_backward_reference(q, k, v, do, causal=False, causal_align="bottom_right", scale=None,
                                 window=(-1, -1), softcap=0.0, precision="float64", dtype=None, max_bytes=1 << 30,
                                 sinks=None, alibi_slopes=None, attention_chunk=0, dropout=None):
    """The gradients of attention_reference's O for upstream gradient `do` (O's shape), on numpy arrays or torch
    tensors, with the same mask, window, softcap and GQA rules. precision "float64": the reference (exact math on
    the same input values); "same": the straightforward same-precision implementation of CORRECTNESS.md, the
    arithmetic of the kernels (FlashAttention-2's): fp32 logits, softcap and softmax, O from P rounded to the input
    dtype (as the forward), D = rowsum(dO·O) in fp32 from O rounded, dS = P·(dP - D) in fp32, P and dS rounded to
    the input dtype for the fp32 products, each gradient rounded once to the input dtype. Works per batch item, KV
    head and chunk of its query heads (at most max_bytes of logits at a time). sinks: as attention_reference's; the
    result's dsinks is then their gradient (float64 in both precisions). alibi_slopes, attention_chunk: as
    attention_reference's (the slopes get no gradient). dropout: as attention_reference's (the forward's mask)."""
    from ._arrays import dtype_name
    ops = _Ops(q)
    dtype = dtype or dtype_name(q.dtype)
    exact = precision == "float64"
    work = "f64" if exact else "f32"
    rounded = (lambda x: x) if exact else (lambda x: ops.cast(x, dtype))   # noqa: E731
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / D ** 0.5 if scale is None else scale
    like = ops.cast(q[:0], "f64")
    dq, dq_abs = ops.full(q.shape, 0.0, like), ops.full(q.shape, 0.0, like)
    dk, dk_abs = ops.full(k.shape, 0.0, like), ops.full(k.shape, 0.0, like)
    dv, dv_abs = ops.full(v.shape, 0.0, like), ops.full(v.shape, 0.0, like)
    dsinks = None if sinks is None else ops.full((Hq,), 0.0, like)
    if B * Sq * Hq * Sk == 0:
        return AttentionGradients(dq, dk, dv, dq_abs, dk_abs, dv_abs, dsinks)
    visible = visible_keys(Sq, Sk, causal, causal_align, window, arange=lambda n: ops.arange(n, q),
                           attention_chunk=attention_chunk)
    group = Hq // Hkv
    chunk = max(1, max_bytes // max(1, Sq * Sk * 8))
    keep, keep_scale = _dropout_terms(ops, dropout, B, Hq, Sq, Sk, q)
    for b in range(B):
        for g in range(Hkv):
            kb, vb = ops.cast(k[b, :, g], work), ops.cast(v[b, :, g], work)        # (Sk, D)
            dk_sum, dv_sum, dk_abs_sum, dv_abs_sum = 0, 0, 0, 0
            for h0 in range(g * group, (g + 1) * group, chunk):
                h1 = min((g + 1) * group, h0 + chunk)
                qb = ops.perm(ops.cast(q[b, :, h0:h1], work), 1, 0, 2)               # (h, Sq, D)
                dob = ops.perm(ops.cast(do[b, :, h0:h1], work), 1, 0, 2)
                bias = _alibi_bias(ops, alibi_slopes, b, h0, h1, Sq, Sk, causal, causal_align, work, q)
                s, t = _logits(ops, qb, kb.T, scale, softcap, visible, bias)
                sink = None if sinks is None else ops.cast(sinks[h0:h1], work)[:, None, None]
                p, row_lse = _softmax(ops, s, sink)                                 # (h, Sq, Sk)
                dp = dob @ vb.T
                # Dropout: O = (P Z / (1 - p)) V, so dV takes P Z / (1 - p) and dP its Z / (1 - p).
                z = 1 if keep is None else ops.cast(keep[b, h0:h1], work) * keep_scale
                pz, dp = p * z, dp * z
                if exact:
                    delta = ops.rowsum(p * dp)   # = rowsum(dO·O) for the exact O = P·V
                else:
                    delta = ops.rowsum(dob * rounded(rounded(p * (z != 0)) @ vb * keep_scale))
                if sink is not None:   # the sink's probability times its dP (0: no value) minus D
                    dsinks[h0:h1] = dsinks[h0:h1] - ops.cast(
                        (ops.lib.exp(sink - row_lse) * delta).sum(-1).sum(-1), "f64")
                ds = p * (dp - delta)
                if t is not None:
                    ds = ds * (1 - t * t)
                ds_r, pt = rounded(ds), ops.perm(rounded(pz), 0, 2, 1)
                dq[b, :, h0:h1] = ops.cast(ops.perm(rounded((ds_r @ kb) * scale), 1, 0, 2), "f64")
                dk_sum = dk_sum + (ops.perm(ds_r, 0, 2, 1) @ qb).sum(0)
                dv_sum = dv_sum + (pt @ dob).sum(0)
                if exact:   # the magnitude of dS's terms, 0 exactly where P is (dS itself is 0 for a row of one key)
                    terms = (abs(dob) @ abs(vb.T)) * z + ops.rowsum(abs(dob) * (pz @ abs(vb)))   # of dP and of D
                    ds_abs = p * terms * (1 if t is None else abs(1 - t * t))
                    dq_abs[b, :, h0:h1] = ops.perm((ds_abs @ abs(kb)) * scale, 1, 0, 2)
                    dk_abs_sum = dk_abs_sum + (ops.perm(ds_abs, 0, 2, 1) @ abs(qb)).sum(0) * scale
                    dv_abs_sum = dv_abs_sum + (pt @ abs(dob)).sum(0)
            dk[b, :, g] = ops.cast(rounded(dk_sum * scale), "f64")
            dv[b, :, g] = ops.cast(rounded(dv_sum), "f64")
            if exact:
                dk_abs[b, :, g], dv_abs[b, :, g] = dk_abs_sum, dv_abs_sum
    return AttentionGradients(dq, dk, dv, dq_abs, dk_abs, dv_abs, dsinks)


def sink_gradient_tolerance(q, k, v, do, ref, same, sinks, factor=3.0, **options):
    """What a sink gradient (tessera.flash_attn_bwd's dsinks) may differ from the float64 `ref.dsinks` by, per head:
    factor x the same-precision error, plus the rounding of O and dO to the input dtype over the terms of the sum,
    unit roundoff x sum over rows of exp(sink - LSE) * rowsum(|dO * O|) (a tolerance floor that grows with the rows,
    as the sum's own terms do). `options`: the call's mask, window, softcap and scale."""
    from ._arrays import dtype_name
    ops = _Ops(q)
    fwd = attention_reference(q, k, v, sinks=sinks, **options)
    terms = ops.lib.exp(ops.cast(sinks, "f64")[None, :, None] - fwd.lse) * \
        ops.perm(abs(ops.cast(do, "f64") * fwd.o).sum(-1), 0, 2, 1)
    unit = 2.0 ** -(11 if dtype_name(q.dtype) == "f16" else 8)
    return factor * abs(same.dsinks - ref.dsinks) + 2 * unit * terms.sum(-1).sum(0)


def attention_backward_reference_varlen(q, k, v, do, cu_seqlens_q, cu_seqlens_k, seqused_q=None, seqused_k=None,
                                        **options):
    """attention_backward_reference over packed sequences (the layouts of flash_attn_varlen_bwd; seqused_q/k as
    attention_reference_varlen's); rows outside every sequence (or past its seqused) get 0."""
    ops = _Ops(q)
    like = ops.cast(q[:0], "f64")
    grads = [ops.full(x.shape, 0.0, like) for x in (q, k, v, q, k, v)]
    dsinks = None
    for b, ((q0, q1), (k0, k1)) in enumerate(_sequence_rows(cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)):
        rows = (slice(q0, q1), slice(k0, k1), slice(k0, k1)) * 2
        r = attention_backward_reference(q[None, rows[0]], k[None, rows[1]], v[None, rows[2]], do[None, rows[0]],
                                         **_item_options(options, b))
        for whole, part, at in zip(grads, r, rows):
            whole[at] = part[0]
        if r.dsinks is not None:
            dsinks = r.dsinks if dsinks is None else dsinks + r.dsinks
    return AttentionGradients(*grads, dsinks)


class AttentionCheck(NamedTuple):
    ok: bool
    o: Tolerance
    lse: object         # Tolerance, or None when LSE was not checked
    problems: tuple     # what failed, in words

    def __str__(self):
        text = f"O {self.o}" + (f"; LSE {self.lse}" if self.lse is not None else "")
        return text if self.ok else "; ".join(self.problems) + f" ({text})"


def check_attention(out, ref, same, lse=None, factor=2.0, floor=1e-5):
    """The tolerance rule of CORRECTNESS.md for an attention output (and LSE) against the float64 reference
    `ref` and the same-precision `same` (AttentionResults from attention_reference on the same inputs).
    O: |out - ref| <= factor * max|same - ref| + floor * o_abs, max|same - ref| at least the unit roundoff of out's
    dtype times max|ref| (check_tolerance); rows without a visible key must be exactly 0.
    LSE: -inf exactly where the reference is -inf; elsewhere the same rule with floor * max(1, |ref|).
    NaN never passes. `out` (and `lse`) in layout of the reference (the varlen ones for varlen)."""
    ops = _Ops(ref.o)
    out64 = ops.cast(out, "f64")
    problems = []
    ref_nan = int((ref.o != ref.o).sum())
    if ref_nan:     # NaN logits also read as rows without a visible key below: say where they come from
        problems.append(f"the reference has {ref_nan} NaN elements: the inputs hold NaN (or values their dtype "
                        "cannot represent) where the kernel reads them")
    o_tol = check_tolerance(out64, ref.o, same.o, ref.o_abs, factor, floor, output_roundoff(out.dtype))
    if not o_tol.ok:
        problems.append(f"O: {o_tol}")
    # Fully masked rows: O exactly 0 (ref.lse is (..., Hq, Sq); O rows are (..., Sq, Hq, D)).
    empty_rows = ref.lse == float("-inf")
    empty_rows = ops.perm(empty_rows, 0, 2, 1) if len(ref.lse.shape) == 3 else ops.perm(empty_rows, 1, 0)
    bad_empty = int(((out64 != 0).sum(-1) * empty_rows).sum()) if out64.shape[-1] else 0
    if bad_empty:
        problems.append(f"{bad_empty} rows without a visible key are not exactly 0")
    lse_tol = None
    if lse is not None:
        lse64 = ops.cast(lse, "f64")
        inf = ref.lse == float("-inf")
        wrong_inf = int((inf & ~(lse64 == float("-inf"))).sum())
        if wrong_inf:
            problems.append(f"LSE: {wrong_inf} rows without a visible key are not -inf")
        zero = ops.full((), 0.0, ref.lse)
        finite = lambda x: ops.where(inf, zero, x)   # noqa: E731
        lse_tol = check_tolerance(finite(lse64), finite(ref.lse), finite(ops.cast(same.lse, "f64")),
                                  finite(abs(ref.lse) + 1), factor, floor)
        if not lse_tol.ok:
            problems.append(f"LSE: {lse_tol}")
    return AttentionCheck(not problems, o_tol, lse_tol, tuple(problems))


class BackwardCheck(NamedTuple):
    ok: bool
    dq: Tolerance
    dk: Tolerance
    dv: Tolerance
    problems: tuple     # what failed, in words

    def __str__(self):
        text = f"dq {self.dq}; dk {self.dk}; dv {self.dv}"
        return text if self.ok else "; ".join(self.problems) + f" ({text})"


def check_attention_backward(grads, ref, same, factor=3.0, floor=1e-5):
    """The tolerance rule of CORRECTNESS.md for attention gradients `grads` = (dq, dk, dv) against the float64
    reference `ref` and the same-precision `same` (AttentionGradients of attention_backward_reference), each judged
    on its own: |g - ref| <= factor * max|same - ref| + floor * magnitude (factor 3 for a backward; max|same - ref|
    at least the unit roundoff of g's dtype times max|ref|, as check_attention's); where the
    magnitude is exactly 0 (no visible pair reaches the element: fully masked query rows, keys no query sees) the
    gradient must be exactly 0. NaN never passes."""
    ops = _Ops(ref.dq)
    tolerances, problems = [], []
    for name, got, r, sm, magnitude in zip(("dq", "dk", "dv"), grads, ref[:3], same[:3], ref[3:]):
        got64 = ops.cast(got, "f64")
        tol = check_tolerance(got64, r, sm, magnitude, factor, floor, output_roundoff(got.dtype))
        tolerances.append(tol)
        if not tol.ok:
            problems.append(f"{name}: {tol}")
        unreached = int(((magnitude == 0) & (got64 != 0)).sum())
        if unreached:
            problems.append(f"{name}: {unreached} elements that no visible (query, key) pair reaches are not exactly 0")
    return BackwardCheck(not problems, *tolerances, tuple(problems))

"""FlashAttention 2's Python interface on Tessera's kernels: the functions and argument names of
`flash_attn.flash_attn_interface`, so code written for it switches with an import:

    from tessera.flash_attn_interface import flash_attn_func, flash_attn_varlen_func

Each function calls tessera.flash_attn / tessera.flash_attn_varlen (torch tensors: differentiable, on the current
stream; numpy arrays: on the simulator with Tessera's `device=` keyword). Differences from FlashAttention
(docs/python.md): dropout's mask comes from Tessera's own Philox stream (the keyword `dropout_seed=` fixes it; by
default a seed is drawn on the GPU from torch's generator; numpy inputs need one); ALiBi aligns as the causal mask does (bottom-right), with -slope * |i + Sk - Sq - j| in every row
(FlashAttention 2 adds slope * j under causal, which shifts each row's LSE but not out);
`return_attn_probs=True` returns (out, softmax_lse, S_dmask) with S_dmask, for tests, as FlashAttention's only with
dropout: the probabilities (B, H, Sq, Sk) float32, dropped ones negated, rebuilt outside the kernels
(tessera.testing.attention_probs; its dropout mask is tessera.testing.dropout_keep's), else None.
flash_attn_with_kvcache runs on tessera.paged_cache_write and tessera.paged_decode (flash_attn_varlen's paged call
for a right window bound without causal);
flash_attn_combine (FlashAttention-3's) is tessera.attn_combine.
"""
from . import _arrays, _attention, _decode
from ._combine import attn_combine
from ._attention import flash_attn, flash_attn_varlen
from ._decode import paged_cache_write, paged_decode
from ._errors import InputError

__all__ = [
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
    "flash_attn_combine",
]


def _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed=None):
    """tessera.flash_attn's options for FlashAttention's (causal aligned bottom-right, as FlashAttention 2.1+)."""
    dropout_p = _attention.dropout_rate(who, dropout_p)
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise InputError(f"{who}: window_size must be a pair (left, right), got {window_size!r}")
    return dict(causal=causal, causal_align="bottom_right", scale=softmax_scale, window=tuple(window_size),
                softcap=softcap, alibi_slopes=alibi_slopes, dropout_p=dropout_p, dropout_seed=dropout_seed)


def _result(result, return_attn_probs, probs=None):
    """FlashAttention's return: out, or (out, softmax_lse, S_dmask); S_dmask is probs() with dropout (the
    probabilities, dropped ones negated: testing.attention_probs), None without (FlashAttention returns none then
    either)."""
    if not return_attn_probs:
        return result
    return (*result, probs() if probs is not None else None)


def _with_drawn_seed(who, options, q, return_attn_probs):
    """options with dropout's seed drawn here when S_dmask is asked for and none was given: its mask is rebuilt on
    the host from the seed."""
    if return_attn_probs and options["dropout_p"] and options["dropout_seed"] is None:
        return dict(options, dropout_seed=_attention.rng_state(who, q, None))
    return options


def _probs(q, k, options, first_batch=0):
    """S_dmask of a dense call with these options (None without dropout)."""
    from . import testing
    if not options["dropout_p"]:
        return None
    q, k = (x.detach() if hasattr(x, "detach") else x for x in (q, k))     # not differentiable
    return testing.attention_probs(q, k, options["causal"], options["causal_align"], options["scale"],
                                   options["window"], options["softcap"], options["alibi_slopes"],
                                   dropout=(options["dropout_seed"], options["dropout_p"], first_batch))


def _varlen_probs(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, options):
    """S_dmask of a varlen call, (batch, nheads, max_seqlen_q, max_seqlen_k), zero past each sequence (None without
    dropout)."""
    if not options["dropout_p"]:
        return None
    cq, ck = ([int(x) for x in cu.tolist()] for cu in (cu_seqlens_q, cu_seqlens_k))
    slopes = options["alibi_slopes"]
    probs = _arrays.zeros(_arrays.describe(q, "q"), (len(cq) - 1, q.shape[1], max_seqlen_q, max_seqlen_k), "f32")
    for b in range(len(cq) - 1):
        sequence = dict(options, alibi_slopes=slopes if slopes is None or len(slopes.shape) == 1 else slopes[b])
        p = _probs(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], sequence, first_batch=b)
        probs[b, :, :p.shape[2], :p.shape[3]] = p[0]
    return probs


def _dense(who, q, k, v, options, return_attn_probs, deterministic, device):
    """flash_attn with FlashAttention's return."""
    options = _with_drawn_seed(who, options, q, return_attn_probs)
    return _result(flash_attn(q, k, v, **options, return_lse=return_attn_probs, deterministic=deterministic,
                              device=device), return_attn_probs, lambda: _probs(q, k, options))


def _varlen(who, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, options, return_attn_probs,
            deterministic, device, block_table=None):
    """flash_attn_varlen with FlashAttention's return."""
    if return_attn_probs and options["dropout_p"] and block_table is not None:
        raise InputError(f"{who}: return_attn_probs with dropout over a paged K/V cache (block_table) is not "
                         "supported: S_dmask is rebuilt from contiguous keys")
    options = _with_drawn_seed(who, options, q, return_attn_probs)
    result = flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options,
                               return_lse=return_attn_probs, block_table=block_table, deterministic=deterministic,
                               device=device)
    return _result(result, return_attn_probs, lambda: _varlen_probs(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                                    max_seqlen_k, options))


def _unpacked(who, name, packed, layout):
    """The slices of `packed` along its packing axis, the dimension of extent 3 or 2 in `layout` (views: gradients
    flow back into it)."""
    dims = layout.strip("()").split(", ")
    axis = next(i for i, d in enumerate(dims) if d in ("2", "3"))
    shape = tuple(_arrays.describe(packed, f"{who}: {name}").shape)
    if len(shape) != len(dims) or shape[axis] != int(dims[axis]):
        raise InputError(f"{who}: {name} must be {len(dims)}-D {layout}, got shape {shape}")
    index = (slice(None),) * axis
    return [packed[index + (i,)] for i in range(int(dims[axis]))]


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, dropout_seed=None, device=None):
    """q (batch, seqlen_q, nheads, headdim), k and v (batch, seqlen_k, nheads_k, headdim), nheads % nheads_k == 0;
    returns out (batch, seqlen_q, nheads, headdim), or with return_attn_probs (out, softmax_lse (batch, nheads,
    seqlen_q), S_dmask)."""
    who = "tessera.flash_attn_interface.flash_attn_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed)
    return _dense(who, q, k, v, options, return_attn_probs, deterministic, device)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              dropout_seed=None, device=None):
    """qkv (batch, seqlen, 3, nheads, headdim); as flash_attn_func on its three slices."""
    who = "tessera.flash_attn_interface.flash_attn_qkvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed)
    q, k, v = _unpacked(who, "qkv", qkv, "(batch, seqlen, 3, nheads, headdim)")
    return _dense(who, q, k, v, options, return_attn_probs, deterministic, device)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             dropout_seed=None, device=None):
    """kv (batch, seqlen_k, 2, nheads_k, headdim); as flash_attn_func with its two slices as k and v."""
    who = "tessera.flash_attn_interface.flash_attn_kvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed)
    k, v = _unpacked(who, "kv", kv, "(batch, seqlen_k, 2, nheads_k, headdim)")
    return _dense(who, q, k, v, options, return_attn_probs, deterministic, device)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *,
                           dropout_seed=None, device=None):
    """q (total_q, nheads, headdim), k and v (total_k, nheads_k, headdim), cu_seqlens_q/k int32 (batch + 1);
    returns out (total_q, nheads, headdim), or with return_attn_probs (out, softmax_lse (nheads, total_q), S_dmask).
    block_table (batch, max_num_blocks) int32: k and v are pages (num_blocks, page_block_size, nheads_k, headdim)."""
    who = "tessera.flash_attn_interface.flash_attn_varlen_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed)
    return _varlen(who, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, options, return_attn_probs,
                   deterministic, device, block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, dropout_seed=None, device=None):
    """qkv (total, 3, nheads, headdim); as flash_attn_varlen_func on its three slices with one cu_seqlens."""
    who = "tessera.flash_attn_interface.flash_attn_varlen_qkvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed)
    q, k, v = _unpacked(who, "qkv", qkv, "(total, 3, nheads, headdim)")
    return _varlen(who, q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, options, return_attn_probs,
                   deterministic, device)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                                    dropout_seed=None, device=None):
    """kv (total_k, 2, nheads_k, headdim); as flash_attn_varlen_func with its two slices as k and v."""
    who = "tessera.flash_attn_interface.flash_attn_varlen_kvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, dropout_seed)
    k, v = _unpacked(who, "kv", kv, "(total_k, 2, nheads_k, headdim)")
    return _varlen(who, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, options, return_attn_probs,
                   deterministic, device)


def _rotated(x, cos, sin, positions, interleaved):
    """x (B, S, H, D) with its first rotary_dim = 2 * cos.shape[-1] features rotated by the angles of `positions`
    (B, S) (cos, sin: (seqlen_ro, rotary_dim / 2)), in float32 and rounded back to x's dtype, as FlashAttention's
    rotary kernel: pairs (2i, 2i + 1) when interleaved (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX)."""
    xp, half = _arrays.library(x), cos.shape[-1]
    index = positions if xp.__name__ == "numpy" else positions.long()
    c, s = (_arrays.as_float32(t[index][:, :, None, :]) for t in (cos, sin))
    head = _arrays.as_float32(x[..., :2 * half])
    a, b = (head[..., 0::2], head[..., 1::2]) if interleaved else (head[..., :half], head[..., half:])
    ra, rb = a * c - b * s, a * s + b * c
    out = xp.stack([ra, rb], -1).reshape(head.shape) if interleaved else _arrays.concat_last([ra, rb])
    out = out.astype(x.dtype) if xp.__name__ == "numpy" else out.to(x.dtype)
    return _arrays.concat_last([out, x[..., 2 * half:]])


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, *, device=None):
    """Decode against a KV cache, appending the new keys and values first: q (batch, seqlen_q, nheads, headdim);
    k_cache, v_cache (batch, seqlen_cache, nheads_k, headdim), or pages (num_blocks, page_block_size, nheads_k,
    headdim) with block_table (batch, max_blocks) int32; cache_seqlens: the tokens each sequence holds
    before the call (an int or (batch,) int32; None: the whole contiguous cache). k, v (batch, seqlen_new, nheads_k,
    headdim): written into the cache at cache_seqlens.. (in place, tessera.paged_cache_write) before attention over
    cache_seqlens + seqlen_new keys (tessera.paged_decode, causal aligned bottom-right). cache_leftpad (batch,) int32:
    the first key of each sequence (keys cache_leftpad[b] .. cache_seqlens[b] + seqlen_new - 1 count; rotary
    positions stay the cache's own). cache_batch_idx (batch,):
    the contiguous cache's row each sequence takes (default row b). rotary_cos, rotary_sin
    (seqlen_ro, rotary_dim / 2): the new k rotated at its positions, q at its own (causal or a window) or at
    cache_seqlens (else), before either is used. Returns out, or (out, softmax_lse (batch, nheads, seqlen_q)).
    Under torch.compile the whole call is one operator (torch.ops.tessera.flash_attn_with_kvcache)."""
    who = "tessera.flash_attn_interface.flash_attn_with_kvcache"
    if _arrays.compiling():
        return _arrays.torch_ops.call_flash_attn_with_kvcache(
            q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
            block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes, num_splits,
            return_softmax_lse)
    _options(who, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes)
    if cache_batch_idx is not None and block_table is not None:
        raise InputError(f"{who}: cache_batch_idx indexes a contiguous cache's rows; with a block_table, name the "
                         "pages in the table instead")
    if (k is None) != (v is None):
        raise InputError(f"{who}: k and v come together (new keys and their values), got only "
                         f"{'k' if v is None else 'v'}")
    if (rotary_cos is None) != (rotary_sin is None):
        raise InputError(f"{who}: rotary_cos and rotary_sin come together, got only "
                         f"{'rotary_cos' if rotary_sin is None else 'rotary_sin'}")
    # The decode kernels bound the keys on the left only: a right bound without causal runs flash_attn_varlen's
    # paged call (the prefill kernel), which has no left padding.
    right_bound = not causal and window_size[1] != -1
    if right_bound and cache_leftpad is not None:
        raise InputError(f"{who}: window_size = {tuple(window_size)} without causal (a right bound) cannot take "
                         "cache_leftpad: that call runs on the prefill kernel, which has no left padding")
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if x is not None and len(_arrays.describe(x, f"{who}: {name}").shape) != 4:
            raise InputError(f"{who}: {name} must be 4-D, got shape {tuple(x.shape)}")
    xp, B, Sq = _arrays.library(q), q.shape[0], q.shape[1]
    if cache_seqlens is None and block_table is not None:
        raise InputError(f"{who}: a paged cache (block_table given) needs cache_seqlens")
    if cache_seqlens is None or isinstance(cache_seqlens, int):   # None: the whole contiguous cache
        length = k_cache.shape[1] if cache_seqlens is None else cache_seqlens
        lengths = xp.full((B,), length, dtype=xp.int32, **({"device": q.device} if xp.__name__ == "torch" else {}))
    else:
        lengths = cache_seqlens
    if cache_leftpad is not None:   # before any device work (new keys count: they land past cache_seqlens)
        _decode.check_leftpad(who, cache_leftpad, B, lengths + (0 if k is None else k.shape[1]))
    if block_table is None:
        k_cache, v_cache, block_table = _decode._as_pages(
            who, q, k_cache, v_cache, lengths, "NHD", device, rows=cache_batch_idx,
            features=_decode._features(alibi_slopes=alibi_slopes, cache_leftpad=cache_leftpad))
    if rotary_cos is not None:
        # Causal or windowed: each query token at its own position; else all at the cache's end.
        steps = _arrays.arange(Sq, lengths)[None, :]
        q = _rotated(q, rotary_cos, rotary_sin,
                     lengths[:, None] + (steps if causal or tuple(window_size) != (-1, -1) else 0 * steps),
                     rotary_interleaved)
        if k is not None:
            k = _rotated(k, rotary_cos, rotary_sin, lengths[:, None] + _arrays.arange(k.shape[1], lengths)[None, :],
                         rotary_interleaved)
    if k is not None:
        news, page = k.shape[1], k_cache.shape[1]
        positions = lengths[:, None] + _arrays.arange(news, lengths)[None, :]
        rows = _arrays.arange(B, lengths)[:, None]
        pages = block_table[rows, positions // page]
        slots = (pages * page + positions % page).reshape(-1)
        slots = slots.astype("int64") if xp.__name__ == "numpy" else slots.long()
        paged_cache_write(k.reshape(B * news, *k.shape[2:]), v.reshape(B * news, *v.shape[2:]), k_cache, v_cache,
                          slots, device=device)
        lengths = _arrays.as_int32(lengths + news)
    if right_bound:
        return _attend_pages(q, k_cache, v_cache, block_table, lengths, scale=softmax_scale, window=window_size,
                             softcap=softcap, alibi_slopes=alibi_slopes, return_lse=return_softmax_lse, device=device)
    return paged_decode(q, k_cache, v_cache, block_table, lengths, causal=causal, softmax_scale=softmax_scale,
                        window_left=window_size[0], softcap=softcap, num_splits=num_splits,
                        return_lse=return_softmax_lse, alibi_slopes=alibi_slopes, cache_leftpad=cache_leftpad,
                        device=device)


def _attend_pages(q, k_pages, v_pages, block_table, lengths, return_lse, **options):
    """q (B, Sq, Hq, D) against the first lengths[b] keys of each sequence's pages, through flash_attn_varlen's paged
    call (bottom-right alignment, as paged_decode's): its query rows packed (B * Sq, Hq, D), its key lengths as
    cu_seqlens_k (offsets into nothing: pages are found through the table). Returns out (B, Sq, Hq, Dv), in V's
    head_dim, and with return_lse its LSE (B, Hq, Sq)."""
    B, Sq, Hq, D = q.shape
    xp = _arrays.library(q)
    cu_q = _arrays.arange(B + 1, lengths) * Sq
    ends = xp.cumsum(lengths, 0)
    cu_k = _arrays.concat_last([0 * cu_q[:1], _arrays.as_int32(ends)])
    result = flash_attn_varlen(q.reshape(B * Sq, Hq, D), k_pages, v_pages, cu_q, cu_k, Sq,
                               block_table.shape[1] * k_pages.shape[1], block_table=block_table, return_lse=return_lse,
                               **options)
    out, lse = result if return_lse else (result, None)
    out = out.reshape(B, Sq, Hq, out.shape[-1])
    if not return_lse:
        return out
    lse = lse.reshape(Hq, B, Sq)
    return out, (lse.transpose(1, 0, 2) if xp.__name__ == "numpy" else lse.permute(1, 0, 2))


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, device=None):
    """FlashAttention-3's combine of split results: out_partial (num_splits, batch, seqlen, nheads, headdim) float32
    and lse_partial (num_splits, batch, seqlen, nheads) float32 (or packed (num_splits, total_q, ...)) merged into
    (out, softmax_lse): tessera.attn_combine."""
    return attn_combine(out_partial, lse_partial, out=out, out_dtype=out_dtype, device=device)

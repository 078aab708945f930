"""FlashAttention 2's Python interface on Tessera's kernels: the functions and argument names of
`flash_attn.flash_attn_interface`, so code written for it switches with an import:

    from tessera.flash_attn_interface import flash_attn_func, flash_attn_varlen_func

Each function calls tessera.flash_attn / tessera.flash_attn_varlen (torch tensors: differentiable, on the current
stream; numpy arrays: on the simulator with Tessera's `device=` keyword). Differences from FlashAttention
(docs/python.md): `dropout_p` > 0, `alibi_slopes` and a `block_table` raise InputError (not built yet);
`return_attn_probs=True` returns (out, softmax_lse, None): no probabilities are materialised.
"""
from . import _arrays
from ._attention import flash_attn, flash_attn_varlen
from ._errors import InputError

__all__ = [
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
]


def _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes):
    """tessera.flash_attn's options for FlashAttention's (causal aligned bottom-right, as FlashAttention 2.1+)."""
    if alibi_slopes is not None:
        raise InputError(f"{who}: alibi_slopes is not supported yet (pass None)")
    if not isinstance(dropout_p, (int, float)) or isinstance(dropout_p, bool) or dropout_p != 0:
        raise InputError(f"{who}: dropout_p = {dropout_p!r}: dropout is not supported yet (pass 0.0, as evaluation "
                         "does)")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise InputError(f"{who}: window_size must be a pair (left, right), got {window_size!r}")
    return dict(causal=causal, causal_align="bottom_right", scale=softmax_scale, window=tuple(window_size),
                softcap=softcap)


def _result(result, return_attn_probs):
    """FlashAttention's return: out, or (out, softmax_lse, S_dmask) with S_dmask None."""
    return (*result, None) if return_attn_probs else result


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
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, device=None):
    """q (batch, seqlen_q, nheads, headdim), k and v (batch, seqlen_k, nheads_k, headdim), nheads % nheads_k == 0;
    returns out (batch, seqlen_q, nheads, headdim), or with return_attn_probs (out, softmax_lse (batch, nheads,
    seqlen_q), None)."""
    who = "tessera.flash_attn_interface.flash_attn_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return _result(flash_attn(q, k, v, **options, return_lse=return_attn_probs, deterministic=deterministic,
                              device=device), return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              device=None):
    """qkv (batch, seqlen, 3, nheads, headdim); as flash_attn_func on its three slices."""
    who = "tessera.flash_attn_interface.flash_attn_qkvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    q, k, v = _unpacked(who, "qkv", qkv, "(batch, seqlen, 3, nheads, headdim)")
    return _result(flash_attn(q, k, v, **options, return_lse=return_attn_probs, deterministic=deterministic,
                              device=device), return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             device=None):
    """kv (batch, seqlen_k, 2, nheads_k, headdim); as flash_attn_func with its two slices as k and v."""
    who = "tessera.flash_attn_interface.flash_attn_kvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    k, v = _unpacked(who, "kv", kv, "(batch, seqlen_k, 2, nheads_k, headdim)")
    return _result(flash_attn(q, k, v, **options, return_lse=return_attn_probs, deterministic=deterministic,
                              device=device), return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, device=None):
    """q (total_q, nheads, headdim), k and v (total_k, nheads_k, headdim), cu_seqlens_q/k int32 (batch + 1);
    returns out (total_q, nheads, headdim), or with return_attn_probs (out, softmax_lse (nheads, total_q), None)."""
    who = "tessera.flash_attn_interface.flash_attn_varlen_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    if block_table is not None:
        raise InputError(f"{who}: block_table (a paged K/V cache) is not supported yet; tessera.paged_decode "
                         "serves paged caches for up to 8 query tokens")
    return _result(flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options,
                                     return_lse=return_attn_probs, deterministic=deterministic, device=device),
                   return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, device=None):
    """qkv (total, 3, nheads, headdim); as flash_attn_varlen_func on its three slices with one cu_seqlens."""
    who = "tessera.flash_attn_interface.flash_attn_varlen_qkvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    q, k, v = _unpacked(who, "qkv", qkv, "(total, 3, nheads, headdim)")
    return _result(flash_attn_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **options,
                                     return_lse=return_attn_probs, deterministic=deterministic, device=device),
                   return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, device=None):
    """kv (total_k, 2, nheads_k, headdim); as flash_attn_varlen_func with its two slices as k and v."""
    who = "tessera.flash_attn_interface.flash_attn_varlen_kvpacked_func"
    options = _options(who, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    k, v = _unpacked(who, "kv", kv, "(total_k, 2, nheads_k, headdim)")
    return _result(flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options,
                                     return_lse=return_attn_probs, deterministic=deterministic, device=device),
                   return_attn_probs)

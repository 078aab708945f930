"""torch.ops.tessera.*: the attention forward and backward, paged decode, the cache writer, FlashAttention's kvcache
call and the combine of attention over parts of the keys as PyTorch custom operators (torch.library.custom_op), with fake implementations for torch.compile's tracing and the forward's
autograd formula.

tessera.flash_attn and the other entry points call these operators while torch.compile traces (so a compiled model
has no graph break and AOTAutograd differentiates through the forward); eager calls keep the direct path, whose
repeat cache costs less host time than an operator dispatch. Every operator runs the same checks and kernels as the
eager call it wraps, on torch's current stream (capturable in a CUDA graph)."""
from typing import Optional

import torch
from torch import Tensor

from . import _arrays, _attention, _attention_bwd, _combine, _decode
from ._errors import InputError

# ---- Attention forward and backward --------------------------------------------------------------


def _options(causal, causal_align, scale, window_left, window_right, softcap):
    """The Python API's attention options from the operators' arguments (_arguments is the inverse)."""
    return dict(causal=causal, causal_align=causal_align, scale=scale, window=(window_left, window_right),
                softcap=softcap)


def _arguments(options):
    """The operators' attention arguments (causal ... softcap) from the Python API's options."""
    left, right = options["window"]
    return (options["causal"], options["causal_align"], options["scale"], int(left), int(right),
            float(options["softcap"]))


def _extras(sinks, alibi_slopes, attention_chunk, dropout_p, rng_state):
    """The Python API's keyword arguments for the operators' optional features (the dropout seed as the (2,) int64
    array the kernels read)."""
    return dict(sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk, dropout_p=dropout_p,
                dropout_seed=rng_state if dropout_p else None)


def _with_lse(result, return_lse, q):
    """(O, LSE) from a call's result: an empty LSE where none was asked for (an operator's outputs are fixed)."""
    return result if return_lse else (result, q.new_empty((0,), dtype=torch.float32))


def _with_dsinks(grads, q):
    """(dq, dk, dv, dsinks) from a backward's result: an empty dsinks for a call without sinks."""
    return tuple(grads) if len(grads) == 4 else (*grads, q.new_empty((0,), dtype=torch.float32))


@torch.library.custom_op("tessera::flash_attn", mutates_args=())
def flash_attn(q: Tensor, k: Tensor, v: Tensor, causal: bool, causal_align: str, scale: Optional[float],
               window_left: int, window_right: int, softcap: float, return_lse: bool, deterministic: bool,
               sinks: Optional[Tensor] = None, alibi_slopes: Optional[Tensor] = None, attention_chunk: int = 0,
               dropout_p: float = 0.0, rng_state: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """tessera.flash_attn: (O, LSE); LSE is empty (0,) unless return_lse (the backward needs it). deterministic
    chooses the backward's kernels; rng_state is dropout's (seed, offset) as a (2,) int64 tensor."""
    with torch.no_grad():
        result = _attention.flash_attn(q, k, v, **_options(causal, causal_align, scale, window_left, window_right,
                                                           softcap), return_lse=return_lse,
                                       **_extras(sinks, alibi_slopes, attention_chunk, dropout_p, rng_state))
    return _with_lse(result, return_lse, q)


@flash_attn.register_fake
def _(q, k, v, causal, causal_align, scale, window_left, window_right, softcap, return_lse, deterministic, sinks=None,
      alibi_slopes=None, attention_chunk=0, dropout_p=0.0, rng_state=None):
    B, Sq, Hq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((B, Hq, Sq) if return_lse else (0,), dtype=torch.float32)


@torch.library.custom_op("tessera::flash_attn_varlen", mutates_args=())
def flash_attn_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                      max_seqlen_k: int, causal: bool, causal_align: str, scale: Optional[float], window_left: int,
                      window_right: int, softcap: float, return_lse: bool, deterministic: bool,
                      sinks: Optional[Tensor] = None, alibi_slopes: Optional[Tensor] = None, attention_chunk: int = 0,
                      dropout_p: float = 0.0, rng_state: Optional[Tensor] = None,
                      block_table: Optional[Tensor] = None, seqused_q: Optional[Tensor] = None,
                      seqused_k: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """tessera.flash_attn_varlen: (O, LSE (Hq, total_q) or empty)."""
    with torch.no_grad():
        result = _attention.flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                              **_options(causal, causal_align, scale, window_left, window_right,
                                                         softcap), return_lse=return_lse,
                                              **_extras(sinks, alibi_slopes, attention_chunk, dropout_p, rng_state),
                                              block_table=block_table, seqused_q=seqused_q, seqused_k=seqused_k)
    return _with_lse(result, return_lse, q)


@flash_attn_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, causal_align, scale, window_left,
      window_right, softcap, return_lse, deterministic, sinks=None, alibi_slopes=None, attention_chunk=0,
      dropout_p=0.0, rng_state=None, block_table=None, seqused_q=None, seqused_k=None):
    total_q, Hq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((Hq, total_q) if return_lse else (0,), dtype=torch.float32)


@torch.library.custom_op("tessera::flash_attn_bwd", mutates_args=())
def flash_attn_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, causal: bool,
                   causal_align: str, scale: Optional[float], window_left: int, window_right: int, softcap: float,
                   deterministic: bool, sinks: Optional[Tensor] = None, alibi_slopes: Optional[Tensor] = None,
                   attention_chunk: int = 0, dropout_p: float = 0.0,
                   rng_state: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """tessera.flash_attn_bwd: (dq, dk, dv, dsinks); dsinks is empty (0,) without sinks."""
    with torch.no_grad():
        return _with_dsinks(_attention_bwd.flash_attn_bwd(
            q, k, v, out, _attention_bwd.kernel_ready(dout, out), lse,
            **_options(causal, causal_align, scale, window_left, window_right, softcap), deterministic=deterministic,
            **_extras(sinks, alibi_slopes, attention_chunk, dropout_p, rng_state)), q)


def _fake_grads(q, k, v, sinks):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty(sinks.shape if sinks is not None else (0,), dtype=torch.float32))


@flash_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, causal, causal_align, scale, window_left, window_right, softcap, deterministic,
      sinks=None, alibi_slopes=None, attention_chunk=0, dropout_p=0.0, rng_state=None):
    return _fake_grads(q, k, v, sinks)


@torch.library.custom_op("tessera::flash_attn_varlen_bwd", mutates_args=())
def flash_attn_varlen_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                          cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                          causal: bool, causal_align: str, scale: Optional[float], window_left: int,
                          window_right: int, softcap: float, deterministic: bool, sinks: Optional[Tensor] = None,
                          alibi_slopes: Optional[Tensor] = None, attention_chunk: int = 0, dropout_p: float = 0.0,
                          rng_state: Optional[Tensor] = None, seqused_q: Optional[Tensor] = None,
                          seqused_k: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """tessera.flash_attn_varlen_bwd: (dq, dk, dv, dsinks); dsinks is empty (0,) without sinks."""
    with torch.no_grad():
        return _with_dsinks(_attention_bwd.flash_attn_varlen_bwd(
            q, k, v, out, _attention_bwd.kernel_ready(dout, out), lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
            max_seqlen_k, **_options(causal, causal_align, scale, window_left, window_right, softcap),
            deterministic=deterministic, **_extras(sinks, alibi_slopes, attention_chunk, dropout_p, rng_state),
            seqused_q=seqused_q, seqused_k=seqused_k), q)


@flash_attn_varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, causal_align, scale,
      window_left, window_right, softcap, deterministic, sinks=None, alibi_slopes=None, attention_chunk=0,
      dropout_p=0.0, rng_state=None, seqused_q=None, seqused_k=None):
    return _fake_grads(q, k, v, sinks)


def _no_lse(who, lse, out):
    if lse.numel() == 0 and out.numel() != 0:
        raise InputError(f"{who}: the backward needs the forward's LSE; call the operator with return_lse=True "
                         "when its inputs require grad (tessera.flash_attn does)")


# The operators' arguments between the tensors they start with and the optional features: the attention options,
# return_lse and deterministic.
_OPTIONS = 8


def _save(ctx, inputs, output):
    q, k, v, *rest = inputs
    options, (sinks, alibi_slopes, chunk, dropout_p, rng_state) = rest[:_OPTIONS], rest[_OPTIONS:]
    ctx.save_for_backward(q, k, v, *output, sinks, alibi_slopes, rng_state)
    ctx.options, ctx.features = options, (chunk, dropout_p)


def _save_varlen(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, *rest = inputs
    options, (sinks, alibi_slopes, chunk, dropout_p, rng_state, _, seqused_q, seqused_k) = \
        rest[:_OPTIONS], rest[_OPTIONS:]
    ctx.save_for_backward(q, k, v, *output, sinks, alibi_slopes, rng_state, cu_seqlens_q, cu_seqlens_k, seqused_q,
                          seqused_k)
    ctx.options, ctx.features = (max_q, max_k, *options), (chunk, dropout_p)


def _grads(grads, sinks, before, after):
    """Autograd's gradients for an operator's inputs: dq, dk, dv, `before` Nones, dsinks where sinks were given,
    `after` Nones."""
    dq, dk, dv, dsinks = grads
    return dq, dk, dv, *[None] * before, dsinks if sinks is not None else None, *[None] * after


def _flash_attn_grad(ctx, dout, _dlse):
    q, k, v, out, lse, sinks, alibi_slopes, rng_state = ctx.saved_tensors
    *options, _, deterministic = ctx.options
    _no_lse("tessera::flash_attn", lse, out)
    grads = torch.ops.tessera.flash_attn_bwd(dout, q, k, v, out, lse, *options, deterministic, sinks, alibi_slopes,
                                             *ctx.features, rng_state)
    return _grads(grads, sinks, _OPTIONS, 4)


def _flash_attn_varlen_grad(ctx, dout, _dlse):
    q, k, v, out, lse, sinks, alibi_slopes, rng_state, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k = \
        ctx.saved_tensors
    *options, _, deterministic = ctx.options
    _no_lse("tessera::flash_attn_varlen", lse, out)
    grads = torch.ops.tessera.flash_attn_varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *options,
                                                    deterministic, sinks, alibi_slopes, *ctx.features, rng_state,
                                                    seqused_q, seqused_k)
    return _grads(grads, sinks, 4 + _OPTIONS, 7)


flash_attn.register_autograd(_flash_attn_grad, setup_context=_save)
flash_attn_varlen.register_autograd(_flash_attn_varlen_grad, setup_context=_save_varlen)


def _feature_arguments(who, q, features, backward=False):
    """The operators' optional-feature arguments (sinks, alibi_slopes, attention_chunk, dropout_p, rng_state) from a
    call's keywords, the scalars checked here (while tracing: before any operator runs); dropout's seed drawn or
    converted once (_attention.rng_state), so the backward regenerates the forward's mask (a backward's must be
    given)."""
    dropout_p = _attention.dropout_rate(who, features.get("dropout_p", 0.0))
    if backward:
        _attention_bwd.check_forward_seed(who, dropout_p, features.get("dropout_seed"))
    rng_state = _attention.rng_state(who, q, features.get("dropout_seed")) if dropout_p else None
    return (features.get("sinks"), features.get("alibi_slopes"),
            _attention._chunk(who, features.get("attention_chunk", 0)), dropout_p, rng_state)


def call_flash_attn(who, q, k, v, varlen_args, options, features, return_lse, deterministic, out, lse):
    """tessera.flash_attn (varlen_args empty) or flash_attn_varlen through the operators, as torch.compile traces it:
    features are the call's optional-feature keywords (sinks, alibi_slopes, attention_chunk, dropout_p,
    dropout_seed; varlen: block_table, seqused_q, seqused_k); the LSE is computed whenever autograd records the call
    (its backward needs it); out= and lse= are filled by copies."""
    records = _attention.records_grad((q, k, v, features.get("sinks")))
    args = (*_arguments(options), bool(return_lse or records), bool(deterministic),
            *_feature_arguments(who, q, features))
    if varlen_args:
        o, l = torch.ops.tessera.flash_attn_varlen(q, k, v, *varlen_args, *args, features.get("block_table"),
                                                   features.get("seqused_q"), features.get("seqused_k"))
    else:
        o, l = torch.ops.tessera.flash_attn(q, k, v, *args)
    if out is not None:
        o = out.copy_(o)
    if lse is not None:
        l = lse.copy_(l)
    return (o, l) if return_lse else o


def call_flash_attn_bwd(who, q, k, v, out, dout, lse, varlen_args, options, features, deterministic, grads):
    """tessera.flash_attn_bwd / flash_attn_varlen_bwd through the operators (features as call_flash_attn's, the
    forward's dropout_seed given); dq=, dk=, dv= are filled by copies. Returns (dq, dk, dv), and dsinks with
    sinks."""
    args = (*_arguments(options), bool(deterministic), *_feature_arguments(who, q, features, backward=True))
    if varlen_args:
        result = torch.ops.tessera.flash_attn_varlen_bwd(dout, q, k, v, out, lse, *varlen_args, *args,
                                                         features.get("seqused_q"), features.get("seqused_k"))
    else:
        result = torch.ops.tessera.flash_attn_bwd(dout, q, k, v, out, lse, *args)
    result = tuple(r if g is None else g.copy_(r) for r, g in zip(result, (*grads, None)))
    return result if features.get("sinks") is not None else result[:3]


# ---- Paged decode and the cache writer ----------------------------------------------------------


def _scale_pair(value):
    """An fp8 scale as the operators take it: (tensor, None) or (None, number)."""
    return (value, None) if isinstance(value, Tensor) else (None, None if value is None else float(value))


def _scale(tensor, value):
    return tensor if tensor is not None else value


@torch.library.custom_op("tessera::paged_decode", mutates_args=())
def paged_decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Optional[Tensor], cache_seqlens: Tensor,
                 kv_layout: str, causal: bool, softmax_scale: Optional[float], k_scale: Optional[Tensor],
                 v_scale: Optional[Tensor], k_scale_value: Optional[float], v_scale_value: Optional[float],
                 window_left: int, softcap: float, num_splits: int, return_lse: bool,
                 fp8_products: bool = False, cache_leftpad: Optional[Tensor] = None, sinks: Optional[Tensor] = None,
                 alibi_slopes: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """tessera.paged_decode: (O, LSE (B, Hq, Sq) or empty). An fp8 cache's scale is a tensor (k_scale) or a number
    (k_scale_value)."""
    result = _decode.paged_decode(q, k_cache, v_cache, block_table, cache_seqlens, kv_layout=kv_layout,
                                  causal=causal, softmax_scale=softmax_scale,
                                  k_scale=_scale(k_scale, k_scale_value), v_scale=_scale(v_scale, v_scale_value),
                                  window_left=window_left, softcap=softcap, num_splits=num_splits,
                                  return_lse=return_lse, fp8_products=fp8_products, cache_leftpad=cache_leftpad,
                                  sinks=sinks, alibi_slopes=alibi_slopes)
    return _with_lse(result, return_lse, q)


@paged_decode.register_fake
def _(q, k_cache, v_cache, block_table, cache_seqlens, kv_layout, causal, softmax_scale, k_scale, v_scale,
      k_scale_value, v_scale_value, window_left, softcap, num_splits, return_lse, fp8_products=False,
      cache_leftpad=None, sinks=None, alibi_slopes=None):
    B, Sq, Hq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((B, Hq, Sq) if return_lse else (0,), dtype=torch.float32)


def call_paged_decode(q, k_cache, v_cache, block_table, cache_seqlens, kv_layout, causal, softmax_scale, k_scale,
                      v_scale, window_left, softcap, num_splits, out, return_lse, plan, fp8_products=False,
                      cache_leftpad=None, sinks=None, alibi_slopes=None):
    """tessera.paged_decode through the operator, as torch.compile traces it: a plan contributes its num_splits (the
    compiled graph's own workspaces come from torch's allocator); out= is filled by a copy."""
    if plan is not None:
        num_splits = plan.num_splits
    (k_tensor, k_value), (v_tensor, v_value) = _scale_pair(k_scale), _scale_pair(v_scale)
    o, lse = torch.ops.tessera.paged_decode(q, k_cache, v_cache, block_table, cache_seqlens, kv_layout, bool(causal),
                                            softmax_scale, k_tensor, v_tensor, k_value, v_value, int(window_left),
                                            float(softcap), int(num_splits), bool(return_lse), bool(fp8_products),
                                            cache_leftpad, sinks, alibi_slopes)
    if out is not None:
        o = out.copy_(o)
    return (o, lse) if return_lse else o


@torch.library.custom_op("tessera::paged_cache_write", mutates_args=("k_cache", "v_cache", "k_scale", "v_scale"))
def paged_cache_write(key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor,
                      kv_layout: str, k_scale: Optional[Tensor], v_scale: Optional[Tensor],
                      k_scale_value: Optional[float], v_scale_value: Optional[float]) -> None:
    """tessera.paged_cache_write: writes the caches (and per-token scales) in place."""
    _decode.paged_cache_write(key, value, k_cache, v_cache, slot_mapping, kv_layout=kv_layout,
                              k_scale=_scale(k_scale, k_scale_value), v_scale=_scale(v_scale, v_scale_value))


@paged_cache_write.register_fake
def _(key, value, k_cache, v_cache, slot_mapping, kv_layout, k_scale, v_scale, k_scale_value, v_scale_value):
    return None


def call_paged_cache_write(key, value, k_cache, v_cache, slot_mapping, kv_layout, k_scale, v_scale):
    (k_tensor, k_value), (v_tensor, v_value) = _scale_pair(k_scale), _scale_pair(v_scale)
    torch.ops.tessera.paged_cache_write(key, value, k_cache, v_cache, slot_mapping, kv_layout, k_tensor, v_tensor,
                                        k_value, v_value)


@torch.library.custom_op("tessera::flash_attn_with_kvcache", mutates_args=("k_cache", "v_cache"))
def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
                            rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], cache_seqlens: Optional[Tensor],
                            cache_seqlens_value: Optional[int], cache_batch_idx: Optional[Tensor],
                            cache_leftpad: Optional[Tensor], block_table: Optional[Tensor],
                            softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
                            softcap: float, rotary_interleaved: bool, alibi_slopes: Optional[Tensor], num_splits: int,
                            return_lse: bool) -> tuple[Tensor, Tensor]:
    """flash_attn_interface.flash_attn_with_kvcache: (out, softmax_lse (B, Hq, Sq) or empty); appends k and v to the
    caches in place. cache_seqlens is a tensor or a number (cache_seqlens_value), or neither (the whole cache)."""
    from . import flash_attn_interface
    result = flash_attn_interface.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, rotary_cos, rotary_sin,
        cache_seqlens if cache_seqlens is not None else cache_seqlens_value,
        cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal, (window_left, window_right), softcap,
        rotary_interleaved, alibi_slopes, num_splits, return_lse)
    return _with_lse(result, return_lse, q)


@flash_attn_with_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value, cache_batch_idx,
      cache_leftpad, block_table, softmax_scale, causal, window_left, window_right, softcap, rotary_interleaved,
      alibi_slopes, num_splits, return_lse):
    B, Sq, Hq, _ = q.shape
    return (q.new_empty((B, Sq, Hq, v_cache.shape[-1])),
            q.new_empty((B, Hq, Sq) if return_lse else (0,), dtype=torch.float32))


def call_flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                 cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
                                 rotary_interleaved, alibi_slopes, num_splits, return_lse):
    """flash_attn_with_kvcache through its operator, as torch.compile traces it (the cache length an int or a
    tensor)."""
    lengths, length = (cache_seqlens, None) if isinstance(cache_seqlens, Tensor) else (None, cache_seqlens)
    left, right = window_size
    o, lse = torch.ops.tessera.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, lengths, length, cache_batch_idx, cache_leftpad,
        block_table, softmax_scale, bool(causal), int(left), int(right), float(softcap), bool(rotary_interleaved),
        alibi_slopes, int(num_splits), bool(return_lse))
    return (o, lse) if return_lse else o


# ---- The combine of results over parts of the keys -------------------------------------------------------------


@torch.library.custom_op("tessera::attn_combine", mutates_args=())
def attn_combine(out_partial: Tensor, lse_partial: Tensor, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """tessera.attn_combine: (out, lse), lse (batch, seqlen, nheads) stored (batch, nheads, seqlen)."""
    return _combine.attn_combine(out_partial, lse_partial, out_dtype=out_dtype)


@attn_combine.register_fake
def _(out_partial, lse_partial, out_dtype):
    rows = tuple(out_partial.shape[1:-1])
    lse = out_partial.new_empty(rows[:-2] + (rows[-1], rows[-2]), dtype=torch.float32).transpose(-1, -2)
    return out_partial.new_empty(rows + (out_partial.shape[-1],), dtype=out_dtype), lse


def call_attn_combine(out_partial, lse_partial, out, out_dtype):
    """tessera.attn_combine through the operator, as torch.compile traces it: out= is filled by a copy."""
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else torch.float32
    elif not isinstance(out_dtype, torch.dtype):
        name = _arrays.dtype_name(out_dtype)
        if name not in _combine.OUT_DTYPES:
            raise InputError(f"tessera.attn_combine: out_dtype {out_dtype!r} is not supported (float32, float16, "
                             "bfloat16)")
        out_dtype = getattr(torch, _arrays.TORCH_NAMES[name])
    o, lse = torch.ops.tessera.attn_combine(out_partial, lse_partial, out_dtype)
    return (o if out is None else out.copy_(o)), lse


is_compiling = torch.compiler.is_compiling

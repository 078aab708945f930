""""tessera" as a Hugging Face Transformers attention implementation.

    import tessera.integrations.transformers       # registers "tessera" (AttentionInterface and its mask)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="tessera", dtype=torch.bfloat16)

Prefill and training run tessera.flash_attn (causal bottom-right, GQA without expanded copies, sliding windows,
softcap, the model's scaling), differentiable through tessera.flash_attn_bwd; a batch with padding, or a row of
packed documents (position ids restarting at 0), runs tessera.flash_attn_varlen on its sequences; attention dropout
(a model's attention_dropout in training) is tessera's, its seed drawn from torch's CUDA generator. Decode steps (up
to 8 new tokens, no grad) run tessera.paged_decode on the cache's tensors as they are (a contiguous cache; lengths
from the positions or the mask, on the device; a left-padded batch's first keys as cache_leftpad, but for sliding
layers) when a decode kernel set serves the head_dim and divides the capacity (a StaticCache of a multiple of 16
slots, say); otherwise flash_attn (or flash_attn_varlen) with the new query rows over the tokens seen."""
import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

import tessera
from tessera import InputError, KernelNotFoundError

NAME = "tessera"
MAX_DECODE_QUERIES = 8      # paged_decode's q_len limit


def _half(x, who):
    """q, k, v in the dtype the kernels take: f16/bf16 as they are, float32 under autocast in its dtype."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return x
    if torch.is_autocast_enabled(x.device.type):
        return x.to(torch.get_autocast_dtype(x.device.type))
    raise InputError(f"{who}: the model computes attention in {x.dtype}; tessera's kernels take float16 or bfloat16: "
                     "load the model with dtype=torch.bfloat16 (or float16), or run it under torch.autocast")


class _PerForward:
    """A value derived from a tensor every layer of one forward step shares (the padding mask, the position ids),
    computed once for that tensor object: what needs a device-to-host copy costs one per step, not one per layer."""

    def __init__(self, compute):
        self.compute, self.key, self.value = compute, None, None

    def __call__(self, tensor):
        key = (tensor, tensor._version)      # the version counter: an in-place update is another value
        if self.key is None or self.key[0] is not tensor or self.key[1] != key[1]:
            self.key, self.value = key, self.compute(tensor)
        return self.value


def _padding(mask):
    """How a 2-D mask pads: "right" (ones then zeros: none, or right padding), "left" (zeros then ones, with some
    zeros: a left-padded batch), else None (holes)."""
    ones = mask.bool()
    right, left = torch.stack(((ones[:, 1:] <= ones[:, :-1]).all(), (ones[:, 1:] >= ones[:, :-1]).all())).tolist()
    return "right" if right else "left" if left else None


def _documents(positions):
    """Where each packed document starts in a (1, S) row of position ids (a new document restarts at 0), or None
    when the row is one sequence."""
    starts = (positions[0] == 0).nonzero()[:, 0].tolist()
    return None if starts == [0] else starts


_padding_of = _PerForward(_padding)
_seen = _PerForward(lambda positions: int(positions.max()) + 1)      # tokens a cache holds, padding-free calls
_packed = _PerForward(_documents)


_SERVED = {}     # (shapes, strides, dtypes, device, options) -> whether a paged_decode set serves such calls


@torch.compiler.disable
def _paged_decode_serves(q, k, v, lengths, options, leftpad):
    """Whether the bundle has a paged_decode set for these tensors (head_dim, dtype, a block size dividing the
    cache's capacity; cache_leftpad where given): asked of paged_decode_plan once per kind of call, outside any
    graph torch.compile traces."""
    key = (q.shape, q.stride(), k.shape, k.stride(), q.dtype, k.dtype, q.device, options["window"][0] != -1,
           options["softcap"] > 0, leftpad is not None)
    if key not in _SERVED:
        try:
            tessera.paged_decode_plan(q, k, v, None, lengths, window_left=options["window"][0],
                                      softcap=options["softcap"], cache_leftpad=leftpad)
            _SERVED[key] = True
        except (InputError, KernelNotFoundError):
            _SERVED[key] = False
    return _SERVED[key]


def _decode_step(q, k, v, options):
    """A call paged_decode may serve: causal, at most MAX_DECODE_QUERIES new tokens, nothing recorded for autograd
    (host checks only: the lengths and the bundle are looked at after them)."""
    return options["causal"] and not options.get("dropout_p") and q.shape[1] <= MAX_DECODE_QUERIES and \
        not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))


def _decode(q, k, v, lengths, options, leftpad=None):
    """tessera.paged_decode over a cache's tensors as they are (k, v: (B, capacity, Hkv, D) views of the cache's
    (B, Hkv, capacity, D) tensors; a contiguous cache), each sequence's first lengths[b] tokens (from leftpad[b]
    where given: a left-padded batch), for a _decode_step; None when no decode set serves it (then flash_attn or
    flash_attn_varlen does)."""
    if not _paged_decode_serves(q, k, v, lengths, options, leftpad):
        return None
    return tessera.paged_decode(q, k, v, None, lengths, causal=True, softmax_scale=options["scale"],
                                window_left=options["window"][0], softcap=options["softcap"], cache_leftpad=leftpad)


def _unpadded(q, k, v, mask, options):
    """flash_attn_varlen on the tokens the 2-D padding mask keeps (the queries are the last Sq of the mask's
    positions; keys past the mask's width are unused cache capacity), scattered back to (B, Sq, Hq, D) with zeros
    in padded rows."""
    B, Sq, Hq, D = q.shape
    Sk = k.shape[1]
    keep_k = F.pad(mask.bool(), (0, Sk - mask.shape[1]))
    keep_q = mask.bool()[:, mask.shape[1] - Sq:]
    rows_q, rows_k = keep_q.flatten().nonzero()[:, 0], keep_k.flatten().nonzero()[:, 0]
    lens_q, lens_k = keep_q.sum(-1, dtype=torch.int32), keep_k.sum(-1, dtype=torch.int32)
    cu_q, cu_k = (F.pad(x.cumsum(0, dtype=torch.int32), (1, 0)) for x in (lens_q, lens_k))
    max_q, max_k = (int(x) for x in torch.stack((lens_q.max(), lens_k.max())).tolist())
    o = tessera.flash_attn_varlen(q.reshape(B * Sq, Hq, D)[rows_q], k.reshape(B * Sk, *k.shape[2:])[rows_k],
                                  v.reshape(B * Sk, *v.shape[2:])[rows_k], cu_q, cu_k, max_q, max_k, **options)
    out = o.new_zeros(B * Sq, Hq, D)
    out = out.index_put((rows_q,), o)
    return out.view(B, Sq, Hq, D)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, is_causal=None, **kwargs):
    """The AttentionInterface function: query (B, Hq, Sq, D), key and value (B, Hkv, Sk, D) as the model's
    attention layer hands them; returns (O (B, Sq, Hq, D), None)."""
    who = "tessera attention"
    if kwargs.get("output_attentions"):
        raise InputError(f"{who}: output_attentions=True needs the attention weights, which tessera never forms; use "
                         "attn_implementation='eager' for them")
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    q, k, v = (_half(x, who).transpose(1, 2) for x in (query, key, value))
    window = (sliding_window - 1, sliding_window - 1) if sliding_window else (-1, -1)
    options = dict(causal=bool(causal), scale=scaling, window=window, softcap=float(softcap or 0.0))
    if dropout:     # training with attention dropout (models pass 0 in eval): the seed from torch's CUDA generator
        options["dropout_p"] = float(dropout)
    positions = kwargs.get("position_ids")
    Sq, Sk = q.shape[1], k.shape[1]
    if attention_mask is not None:
        # A decode step over padding at either end is paged_decode's: mask column j is cache slot j, so a sequence's
        # keys are its ones (right padding: the first sum; left padding: from width - sum to the width). Not left
        # padding on a sliding layer: a static sliding cache rolls its slots, so its padding is not at the front.
        out = None
        if _decode_step(q, k, v, options) and attention_mask.dim() == 2 and attention_mask.shape[1] <= Sk and \
                (padding := _padding_of(attention_mask)) and (padding == "right" or not sliding_window):
            kept = attention_mask.sum(-1, dtype=torch.int32)
            if padding == "right":
                out = _decode(q, k, v, kept, options)
            else:
                width = torch.full_like(kept, attention_mask.shape[1])
                out = _decode(q, k, v, width, options, leftpad=width - kept)
        if out is None:
            out = _unpadded(q, k, v, attention_mask, options)
    elif Sk > Sq and positions is not None:
        # A cache: a StaticCache holds more slots than tokens seen, so a sequence's keys are its first
        # min(last query position + 1, Sk) slots (without padding, positions are slots; a full sliding-window
        # cache holds the last Sk tokens in order).
        out = None
        if _decode_step(q, k, v, options):
            out = _decode(q, k, v, (positions[:, -1] + 1).clamp(max=Sk).to(torch.int32), options)
        if out is None:
            seen = min(_seen(positions), Sk)
            out = tessera.flash_attn(q, k[:, :seen], v[:, :seen], **options)
    elif Sk == Sq and positions is not None and q.shape[0] == 1 and (documents := _packed(positions)) is not None:
        starts = documents + [Sq]     # packed documents (training on packed rows): one varlen sequence each
        cu = torch.tensor(starts, dtype=torch.int32, device=q.device)
        longest = max(b - a for a, b in zip(starts, starts[1:]))
        out = tessera.flash_attn_varlen(q[0], k[0], v[0], cu, cu, longest, longest, **options)[None]
    else:
        out = tessera.flash_attn(q, k, v, **options)
    return out.to(query.dtype), None


AttentionInterface.register(NAME, attention_forward)
AttentionMaskInterface.register(NAME, flash_attention_mask)   # None, or the 2-D padding mask

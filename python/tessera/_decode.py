"""tessera.paged_decode and tessera.paged_decode_plan: attention of a few new query tokens per sequence over a paged KV
cache with the paged_decode kernel sets (docs/decode.md), on torch CUDA tensors or on numpy arrays through the
simulator."""
import functools
import math
import operator
import sys
from typing import NamedTuple

from . import _arrays, _attention, _launch, _ondemand, _paths
from ._errors import InputError, KernelNotFoundError

LAYOUTS = {"NHD": "(num_pages, block_size, Hkv, D)", "HND": "(num_pages, Hkv, block_size, D)"}
CAUSAL = "causal_bottom_right"
FEATURES = ("sliding_window", "softcap", "return_lse", "split_kv")   # unit attributes beyond what a call needs
MAX_BLOCK_SIZE = 1024
DEFAULT_ROWS = 16       # query rows per decode workgroup when the manifest's grid does not spell it (docs/decode.md)
SIM_PROCESSORS = 4      # the simulator's $sm_count (docs/simulator.md)
# FlashAttention-3's num_splits_heuristic (hopper/heuristics.h), on the sizes the host knows.
SPLIT_BUSY = 0.8        # no split when the workgroups fill this share of the multiprocessors
SPLIT_TILE, SPLIT_MIN_TILES = 64, 4    # ... or when the context has at most 4 key tiles of 64
SPLIT_CHUNK, SPLIT_MAX = 256, 128      # at most one split per 256 keys, and 128 in all
SPLIT_EFFICIENCY = 0.85                # the fewest splits whose wave efficiency is within 85% of the best
FP8 = ("f8E4M3FN", "f8E4M3FNUZ")       # fp8 cache formats: OCP e4m3 (gfx950, gfx11, sm_90) and gfx942's FNUZ


class Call(NamedTuple):
    """A validated paged_decode call: sizes, the kernel-set variant wanted, the runtime parameters."""
    dtype: str          # q's (and the output's)
    kv_dtype: str       # the caches': dtype, or an fp8 format (FP8)
    D: int
    B: int
    Sq: int
    Hq: int
    Hkv: int
    block_size: int
    max_blocks: int
    kv_layout: str
    mask: str           # none or causal_bottom_right
    scale: float
    window_left: int    # -1: off
    softcap: float      # 0: off
    return_lse: bool
    num_splits: int     # as asked: 0 = the heuristic's choice
    kv_scale: str = "per_tensor"    # fp8 caches: per_tensor or per_token scales
    fp8_products: bool = False      # fp8 caches: QK and PV on fp8 matrix instructions
    sinks: bool = False             # a sink logit per query head joins each row's softmax denominator
    alibi: bool = False             # ALiBi slopes ((Hq,) or (B, Hq)) bias the logits
    cache_leftpad: bool = False     # each sequence's keys start at cache_leftpad[b] (FlashAttention's)

    def empty(self):
        """True when there is no query row: nothing is launched."""
        return self.B == 0 or self.Sq == 0 or self.Hq == 0

    def masks(self):
        """The masks a kernel set may have for this call, the exact one first: one query token sees every key under
        either (it sits at the end of its sequence)."""
        other = "none" if self.mask == CAUSAL else CAUSAL
        return (self.mask, other) if self.Sq == 1 else (self.mask,)

    def needed(self):
        return {"sliding_window": self.window_left != -1, "softcap": self.softcap > 0,
                "return_lse": self.return_lse, "split_kv": self.num_splits != 1}


class DecodePlan(NamedTuple):
    """What paged_decode_plan fixed for calls up to its sizes: the kernel set, the split count, and its call (the
    sizes, dtype and options it was made for)."""
    kernel_set: object
    num_splits: int
    call: Call


# ---- Checks -------------------------------------------------------------------------------------
def _cache_dims(info, kv_layout):
    """(num_pages, block_size, Hkv) of a cache of this layout."""
    pages, a, b, _ = info.shape
    return (pages, a, b) if kv_layout == "NHD" else (pages, b, a)


def _cache_strides(info, kv_layout):
    """(stride_page, stride_token, stride_head) in elements."""
    page, a, b, _ = info.strides
    return (page, a, b) if kv_layout == "NHD" else (page, b, a)


def _check_tensors(who, infos, kv_layout, k_scale, v_scale):
    """q, k_cache, v_cache: layout, dtype, head_dim and its unit stride. Returns (dtype, D)."""
    if not isinstance(kv_layout, str) or kv_layout not in LAYOUTS:
        raise InputError(f"{who}: kv_layout must be 'NHD' {LAYOUTS['NHD']} or 'HND' {LAYOUTS['HND']}, got "
                         f"{kv_layout!r}")
    q, k, v = infos["q"], infos["k_cache"], infos["v_cache"]
    for name, info, layout in (("q", q, "(B, Sq, Hq, D)"), ("k_cache", k, LAYOUTS[kv_layout]),
                               ("v_cache", v, LAYOUTS[kv_layout])):
        _attention._check_tensor(who, name, info, 4, layout)
    if q.dtype not in _attention.DTYPES:
        raise InputError(f"{who}: q has dtype {_attention._spelled(q.dtype)}; supported: float16, bfloat16")
    kv_dtype = _check_kv(who, q.dtype, k, v, k_scale, v_scale, "q")
    D = q.shape[-1]
    if k.shape[-1] != D or v.shape[-1] != D:
        raise InputError(f"{who}: q, k_cache and v_cache must have the same head_dim, got {D}, {k.shape[-1]} and "
                         f"{v.shape[-1]}")
    if D not in _attention.HEAD_DIMS:
        raise InputError(f"{who}: head_dim {D} is not supported (supported: "
                         f"{', '.join(map(str, _attention.HEAD_DIMS))})")
    if k.shape != v.shape:
        raise InputError(f"{who}: k_cache and v_cache must have the same shape {LAYOUTS[kv_layout]}, got "
                         f"{k.shape} and {v.shape}")
    for name, info in (("q", q), ("k_cache", k), ("v_cache", v)):
        _attention._check_head_dim_stride(who, name, info)
    return q.dtype, kv_dtype, D


def _check_kv(who, dtype, k, v, k_scale, v_scale, source):
    """The caches' dtype: `source`'s `dtype`, or an fp8 format with both scales given. Returns it."""
    for name, info in (("k_cache", k), ("v_cache", v)):
        if info.dtype not in _attention.DTYPES + FP8:
            raise InputError(f"{who}: {name} has dtype {_attention._spelled(info.dtype)}; supported: float16, "
                             f"bfloat16, {', '.join(_attention._spelled(f) for f in FP8)}")
    if k.dtype != v.dtype:
        raise InputError(f"{who}: k_cache and v_cache must have the same dtype, got {_attention._spelled(k.dtype)} "
                         f"and {_attention._spelled(v.dtype)}")
    scales = (("k_scale", k_scale), ("v_scale", v_scale))
    if k.dtype in FP8:
        missing = [name for name, value in scales if value is None]
        if missing:
            raise InputError(f"{who}: the caches are {_attention._spelled(k.dtype)}: {' and '.join(missing)} "
                             "(dequantised value = stored x scale) must be given")
        for name, value in scales:
            _check_scale(who, name, value)
        return k.dtype
    if k.dtype != dtype:
        raise InputError(f"{who}: {source}, k_cache and v_cache must have the same dtype (or fp8 caches: "
                         f"{', '.join(_attention._spelled(f) for f in FP8)}), got {_attention._spelled(dtype)} "
                         f"and {_attention._spelled(k.dtype)}")
    given = [f"{name}={value!r}" for name, value in scales if value is not None]
    if given:
        raise InputError(f"{who}: {' and '.join(given)} given, but scales dequantise fp8 caches and this cache is "
                         f"{_attention._spelled(k.dtype)}: leave them out")
    return k.dtype


def _check_scale(who, name, value):
    """An fp8 scale: a positive finite number, a one-element float32 tensor / array (both per-tensor; a tensor is
    read on the device, so a CUDA graph replays with its current value) or a 3-D float32 one of several elements
    (per-token, shape checked by _scale_granularity)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (math.isfinite(value) and value > 0):
            raise InputError(f"{who}: {name} must be a positive finite number, got {value!r}")
        return
    try:
        info = _arrays.describe(value, f"{who}: {name}")
    except InputError:
        raise InputError(f"{who}: {name} must be a number, a one-element float32 tensor or per-token scales "
                         f"(num_pages, Hkv, block_size) float32, got {type(value).__name__}") from None
    if info.dtype != "f32" or (math.prod(info.shape) != 1 and len(info.shape) != 3):
        raise InputError(f"{who}: {name} must be a one-element float32 tensor (per-tensor) or (num_pages, Hkv, "
                         f"block_size) float32 (per-token), got dtype {_attention._spelled(info.dtype)} and shape "
                         f"{info.shape}")


def _per_token(value):
    """A scale given per token: a 3-D array of more than one element."""
    shape = tuple(getattr(value, "shape", ()))
    return len(shape) == 3 and math.prod(shape) > 1


def _scale_granularity(who, k_scale, v_scale, dims):
    """'per_tensor' or 'per_token' for an fp8 cache of (num_pages, Hkv, block_size) `dims`: both scales of one kind,
    per-token ones of exactly those dims and of the same strides (the kernels address both alike)."""
    kinds = [_per_token(x) for x in (k_scale, v_scale)]
    if not any(kinds):
        return "per_tensor"
    if not all(kinds):
        raise InputError(f"{who}: k_scale and v_scale must both be per-tensor (a number or one element) or both "
                         f"per-token ({dims[0]}, {dims[1]}, {dims[2]}) (num_pages, Hkv, block_size), got "
                         f"{'per-token' if kinds[0] else 'per-tensor'} and {'per-token' if kinds[1] else 'per-tensor'}")
    infos = [_arrays.describe(x, name) for x, name in ((k_scale, "k_scale"), (v_scale, "v_scale"))]
    for name, info in zip(("k_scale", "v_scale"), infos):
        if info.shape != tuple(dims):
            raise InputError(f"{who}: per-token {name} must be (num_pages, Hkv, block_size) = {tuple(dims)} like the "
                             f"caches, got {info.shape}")
    if infos[0].strides != infos[1].strides:
        raise InputError(f"{who}: per-token k_scale and v_scale must have the same strides (the kernels address both "
                         f"alike), got {infos[0].strides} and {infos[1].strides}")
    return "per_token"


def _scale_strides(info):
    """The ABI's kv_scale_stride_* of per-token scales (num_pages, Hkv, block_size)."""
    page, head, token = info.strides
    return {"kv_scale_stride_page": page, "kv_scale_stride_token": token, "kv_scale_stride_head": head}


def _scale_arrays(infos, like, k_scale, v_scale):
    """Adds k_scale and v_scale to `infos` as one-element float32 arrays beside `like` (numbers become arrays: on
    the GPU a fill on the current stream, no synchronisation)."""
    for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not isinstance(value, (int, float)):
            infos[name] = _arrays.describe(value, name)
            continue
        if like.kind == "torch":
            torch = sys.modules["torch"]
            array = torch.full((1,), float(value), dtype=torch.float32, device=like.obj.device)
        else:
            import numpy as np
            array = np.full((1,), value, np.float32)
        infos[name] = _arrays.describe(array, name)


def _check_tables(who, infos, B):
    """block_table (B, max_blocks) and cache_seqlens (B,): int32, unit stride along a row (the ABI has a row stride
    for block_table only)."""
    table, lens = infos["block_table"], infos["cache_seqlens"]
    for name, info, ndim, layout in (("block_table", table, 2, "(B, max_blocks)"), ("cache_seqlens", lens, 1, "(B,)")):
        if info.dtype != "int32":
            raise InputError(f"{who}: {name} has dtype {info.dtype}; it must be int32")
        _attention._check_tensor(who, name, info, ndim, layout)
        if info.shape[0] != B:
            raise InputError(f"{who}: q has batch size {B} but {name} has {info.shape[0]} rows")
        if info.shape[-1] > 1 and info.strides[-1] != 1 and all(info.shape):
            raise InputError(f"{who}: {name} has shape {info.shape} and strides {info.strides} (elements); it needs "
                             "unit stride along its last dimension: use .contiguous() / numpy.ascontiguousarray")


def check_leftpad(who, cache_leftpad, B, cache_seqlens):
    """cache_leftpad's description: (B,) int32 with unit stride, and on numpy (with numpy cache_seqlens) each value in
    [0, cache_seqlens[b]] (torch tensors are not read: no synchronisation)."""
    info = _arrays.describe(cache_leftpad, f"{who}: cache_leftpad")
    if info.shape != (B,) or info.dtype != "int32" or (B > 1 and info.strides != (1,)):
        raise InputError(f"{who}: cache_leftpad must be an int32 vector of each sequence's first key, shape ({B},) "
                         f"with unit stride, got shape {info.shape}, dtype {_attention._spelled(info.dtype)}, strides "
                         f"{info.strides}")
    if info.kind == "numpy" and _arrays.library(cache_seqlens).__name__ == "numpy":
        bad = [b for b in range(B) if not 0 <= int(cache_leftpad[b]) <= int(cache_seqlens[b])]
        if bad:
            b = bad[0]
            raise InputError(f"{who}: cache_leftpad[{b}] = {int(cache_leftpad[b])} is outside [0, cache_seqlens[{b}]"
                             f" = {int(cache_seqlens[b])}]: a sequence's keys are cache_leftpad[b] .. "
                             "cache_seqlens[b] - 1")
    return info


def _with_leftpad(who, call, infos, cache_leftpad):
    """call for a cache_leftpad (check_leftpad's: infos["cache_leftpad"] added), or call as it is without."""
    if cache_leftpad is None:
        return call
    infos["cache_leftpad"] = check_leftpad(who, cache_leftpad, call.B, infos["cache_seqlens"].obj)
    return call._replace(cache_leftpad=True)


def _check_lengths(who, call, infos, num_pages):
    """Host (numpy) tables by value: each length fits the block table, and the pages it uses are the cache's. torch
    tables are not read (that would synchronise, and CUDA graphs replay with new values)."""
    import numpy as np
    lens = infos["cache_seqlens"].obj.astype(np.int64)
    table = infos["block_table"].obj
    pads = infos.get("cache_leftpad")
    first = pads.obj.astype(np.int64) if pads is not None and pads.kind == "numpy" else None
    fault = _attention.page_table_fault(lens, table, call.block_size, num_pages, first)
    if fault and fault[0] == "length":
        b, capacity = fault[1], call.max_blocks * call.block_size
        raise InputError(f"{who}: cache_seqlens[{b}] = {int(lens[b])} is outside [0, {capacity}] (block_table has "
                         f"{call.max_blocks} pages of {call.block_size} tokens per sequence)")
    if fault:
        b, j = fault[1:]
        raise InputError(f"{who}: block_table[{b}, {j}] = {int(table[b, j])} is not a page of the cache (0 to "
                         f"{num_pages - 1}); cache_seqlens[{b}] = {int(lens[b])} uses its first "
                         f"{-(-int(lens[b]) // call.block_size)} entries" +
                         ("" if first is None else f" from entry {int(min(first[b], lens[b])) // call.block_size} "
                          f"(cache_leftpad[{b}] = {int(first[b])})"))


def _integer(who, name, value):
    try:
        return operator.index(value)
    except TypeError:
        raise InputError(f"{who}: {name} must be an integer, got {value!r}") from None


def _check_options(who, D, causal, softmax_scale, window_left, softcap, return_lse, num_splits):
    """(mask, scale, window_left, softcap, return_lse, num_splits), checked."""
    window_left, num_splits = _integer(who, "window_left", window_left), _integer(who, "num_splits", num_splits)
    if window_left < -1:
        raise InputError(f"{who}: window_left must be >= 0 (keys pos - window_left <= j are visible) or -1 (no "
                         f"window), got {window_left}")
    if num_splits < 0:
        raise InputError(f"{who}: num_splits must be >= 1, or 0 for the heuristic's choice, got {num_splits}")
    # flash_attn's checks: the window is (window_left, unbounded) to the right, bottom-right aligned.
    mask, scale, _, softcap, return_lse = _attention._options(who, D, causal, "bottom_right", softmax_scale,
                                                              (window_left, -1), softcap, return_lse)
    return mask, scale, window_left, softcap, return_lse, num_splits


def _prepare(who, arrays, out, device, kv_layout, causal, softmax_scale, k_scale, v_scale, window_left, softcap,
             return_lse, num_splits, fp8_products=False, sinks=None, alibi_slopes=None, cache_leftpad=None):
    """Every check of a call, then its device: (infos, Call, Device). Nothing touches a device before the last
    step."""
    _arrays.refuse_grad(who, arrays)
    infos = _attention._describe_all(who, arrays + (("out", out),))
    dtype, kv_dtype, D = _check_tensors(who, infos, kv_layout, k_scale, v_scale)
    B, Sq, Hq, _ = infos["q"].shape
    num_pages, block_size, Hkv = _cache_dims(infos["k_cache"], kv_layout)
    _attention._check_heads(who, Hq, Hkv)
    if block_size < 1 or block_size > MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise InputError(f"{who}: block_size {block_size} (k_cache {infos['k_cache'].shape} as "
                         f"{kv_layout} {LAYOUTS[kv_layout]}) must be a power of two from 1 to {MAX_BLOCK_SIZE}")
    _check_tables(who, infos, B)
    options = _check_options(who, D, causal, softmax_scale, window_left, softcap, return_lse, num_splits)
    kv_scale = _scale_granularity(who, k_scale, v_scale, (num_pages, Hkv, block_size)) if kv_dtype in FP8 else \
        "per_tensor"
    if fp8_products not in (False, True):
        raise InputError(f"{who}: fp8_products must be True or False, got {fp8_products!r}")
    if fp8_products and (kv_dtype not in FP8 or kv_scale != "per_tensor"):
        raise InputError(f"{who}: fp8_products=True runs the products on the fp8 cache's own bytes: it needs an fp8 "
                         f"cache ({' or '.join(FP8)}) with per-tensor k_scale and v_scale, got a {kv_dtype} cache" +
                         (" with per-token scales" if kv_scale == "per_token" else ""))
    call = Call(dtype, kv_dtype, D, B, Sq, Hq, Hkv, block_size, infos["block_table"].shape[1], kv_layout, *options,
                kv_scale, fp8_products)
    call = _attention._with_alibi(who, _attention._with_sinks(who, call, infos, sinks), infos, alibi_slopes)
    call = _with_leftpad(who, call, infos, cache_leftpad)
    if infos["out"] is not None:
        _attention._check_output(who, "out", infos["out"], (B, Sq, Hq, D), dtype)
    if infos["block_table"].kind == infos["cache_seqlens"].kind == "numpy":
        _check_lengths(who, call, infos, num_pages)
    scales = {name: value for name, value in (("k_scale", k_scale), ("v_scale", v_scale))
              if value is not None and not isinstance(value, (int, float))}
    given = [(name, info) for name, info in infos.items() if info is not None]
    given += [(name, _arrays.describe(value, name)) for name, value in scales.items()]
    dev = _launch.runtime_device(who, given, device, outputs=("out",), aligned=("q", "k_cache", "v_cache", "out"))
    if kv_dtype in FP8:
        _scale_arrays(infos, infos["q"], k_scale, v_scale)
    return infos, call, dev


# ---- Kernel choice ------------------------------------------------------------------------------
def _serves(kernel_set, call):
    """True when `kernel_set` is a paged_decode set of the call's dtype and cache format (fp8: and scale
    granularity), head_dim and block_size, with a mask it may have (Call.masks) and every feature it needs."""
    a = kernel_set.attributes
    return (kernel_set.directive == "paged_decode" and a.get("dtype") == call.dtype and
            a.get("kv_dtype", call.dtype) == call.kv_dtype and a.get("kv_scale", "per_tensor") == call.kv_scale and
            bool(a.get("fp8_products", False)) == call.fp8_products and
            bool(a.get("sinks", False)) == call.sinks and bool(a.get("alibi", False)) == call.alibi and
            bool(a.get("cache_leftpad", False)) == call.cache_leftpad and
            a.get("head_dim") == call.D and
            a.get("block_size") == call.block_size and a.get("mask", "none") in call.masks() and
            all(a.get(f, False) for f, want in call.needed().items() if want))


def directive_for(call):
    """The directive that compiles a kernel set for the call's variant, with every runtime feature (as the default
    bundle's `pd_<dtype>_d<D>_b<block>` sets have)."""
    fp8 = call.kv_dtype in FP8
    name = (f"pd_{call.dtype}_d{call.D}_b{call.block_size}" + ("_fp8" if fp8 else "") +
            ("_pertoken" if call.kv_scale == "per_token" else "") + ("_products" if call.fp8_products else "") +
            ("" if call.mask == CAUSAL else "_none") + ("_sinks" if call.sinks else "") +
            ("_alibi" if call.alibi else "") + ("_leftpad" if call.cache_leftpad else ""))
    attributes = [f"dtype = {call.dtype}", f"head_dim = {call.D}", f"block_size = {call.block_size}",
                  f"mask = #tessera.mask<{call.mask}>", *FEATURES]
    if fp8:
        attributes[1:1] = [f"kv_dtype = {call.kv_dtype}", f"kv_scale = #tessera.kv_scale<{call.kv_scale}>"]
    attributes += [a for a, on in (("fp8_products", call.fp8_products), ("sinks", call.sinks), ("alibi", call.alibi),
                                   ("cache_leftpad", call.cache_leftpad)) if on]
    return f"tessera.paged_decode @{name} {{{', '.join(attributes)}}}"


def find_kernel_set(bundle, call):
    """The paged_decode kernel set of `bundle` for the call: the exact mask before the other one that serves Sq = 1,
    then the fewest extra features (unused ones get neutral values). KernelNotFoundError names the variant and the
    directive that would add it."""
    masks = call.masks()
    fits = [(masks.index(s.attributes.get("mask", "none")), sum(bool(s.attributes.get(f)) for f in FEATURES), s.name,
             s) for s in bundle.kernel_sets.values() if _serves(s, call)]
    if not fits:
        wanted = (f"dtype={call.dtype}" +
                  (f" kv_dtype={call.kv_dtype} kv_scale={call.kv_scale}" if call.kv_dtype in FP8 else "") +
                  (" fp8_products" if call.fp8_products else "") + (" sinks" if call.sinks else "") +
                  (" alibi" if call.alibi else "") + (" cache_leftpad" if call.cache_leftpad else "") +
                  f" head_dim={call.D} block_size={call.block_size} mask={' or '.join(masks)}" +
                  "".join(f" {f}" for f, want in call.needed().items() if want))
        names = [s.name for s in bundle.kernel_sets.values() if s.directive == "paged_decode"]
        raise KernelNotFoundError(f"bundle {bundle.directory} ({bundle.target}) has no paged_decode kernel set with "
                                  f"{wanted} (paged_decode kernel sets: {', '.join(names) or 'none'}); this "
                                  f"directive compiles one: {directive_for(call)}")
    return min(fits)[-1]


def kernel_set_for(dev, call):
    """find_kernel_set on the device's bundle, remembered per bundle and variant; where the bundle lacks it, the set
    directive_for(call) compiles on demand (_ondemand)."""
    key = ("paged_decode", call.dtype, call.kv_dtype, call.kv_scale, call.fp8_products, call.sinks, call.alibi,
           call.cache_leftpad, call.D, call.block_size, call.masks(), *call.needed().values())
    return _ondemand.lookup(dev, key, lambda bundle: find_kernel_set(bundle, call), directive_for(call))


# ---- Splits -------------------------------------------------------------------------------------
def rows_per_workgroup(kernel_set):
    """Query rows per decode workgroup: the constant divisor of the ceil_div in the `_decode` kernel's grid[1]
    (docs/decode.md: Hkv * ceil_div(Hq / Hkv * Sq, rows)); DEFAULT_ROWS when the grid spells it otherwise."""
    def divisors(e):
        if isinstance(e, list):
            if e[0] == "ceil_div" and isinstance(e[2], int):
                yield e[2]
            for operand in e[1:]:
                yield from divisors(operand)
    return next(divisors(kernel_set.kernels[0].info["grid"][1]), DEFAULT_ROWS)


@functools.cache
def _gpu_processors(ordinal):
    return sys.modules["torch"].cuda.get_device_properties(ordinal).multi_processor_count


def processors(dev):
    """The device's multiprocessors (CUs on AMD): torch's device properties (the runtime keeps its count for grid
    expressions' $sm_count), the simulator's SIM_PROCESSORS."""
    return SIM_PROCESSORS if dev.backend == "sim" else _gpu_processors(dev.ordinal)


def split_count(workgroups, context, processors):
    """FlashAttention-3's split rule on host-known sizes (never the lengths: calls stay capturable): one split when
    `workgroups` (of one split) fill SPLIT_BUSY of the `processors` (the workgroup slots the device holds at once)
    or the `context` (the longest a block table allows) has at most SPLIT_MIN_TILES key tiles of SPLIT_TILE; else the
    fewest splits, at most SPLIT_MAX and one per SPLIT_CHUNK keys, whose wave efficiency (workgroups over whole
    waves) is within SPLIT_EFFICIENCY of the best."""
    if workgroups == 0 or workgroups >= SPLIT_BUSY * processors or -(-context // SPLIT_TILE) <= SPLIT_MIN_TILES:
        return 1

    def efficiency(splits):
        waves = workgroups * splits / processors
        return waves / math.ceil(waves)
    counts = range(1, min(SPLIT_MAX, -(-context // SPLIT_CHUNK)) + 1)
    best = max(map(efficiency, counts))
    return next(s for s in counts if efficiency(s) >= SPLIT_EFFICIENCY * best)


def resident_per_processor(kernel, dev):
    """How many workgroups of `kernel` one multiprocessor holds at once, from its manifest entry: on NVIDIA by its
    registers (allocated per warp in units of 256 from one of the four sub-partitions' 16384, as cuda_occupancy.h
    counts them), threads (2048), shared memory (228 KiB, 1 KiB reserved per workgroup) and 32 workgroups; on AMD its waves per SIMD over four SIMDs; 1 on the simulator. The decode
    workgroups are small: several share a multiprocessor, and the split count fills them all."""
    info = kernel.info
    threads = math.prod(info.get("block", [1]))
    regs = info.get("registers", {})
    if dev.backend == "sim":
        return 1
    if "regs" in regs:
        warps = -(-threads // 32)
        per_warp = -(-regs["regs"] * 32 // 256) * 256
        lds = info.get("lds_bytes", 0) + info.get("dynamic_lds_bytes", 0)
        limits = [4 * (16384 // per_warp) // warps, 2048 // threads, 32]
        if lds:
            limits.append(233472 // (lds + 1024))
        return max(1, min(limits))
    waves = max(1, threads // (64 if dev.arch.startswith("gfx9") else 32))
    return max(1, info.get("occupancy_waves_per_simd", 1) * 4 // waves)


def num_splits_for(call, kernel_set, dev):
    """The call's num_splits, or with 0 the heuristic's for the workgroups of one split (docs/decode.md's grid) over
    the workgroups the device holds at once."""
    if call.num_splits:
        return call.num_splits
    rows = rows_per_workgroup(kernel_set)
    workgroups = call.B * call.Hkv * -(-(call.Hq // max(call.Hkv, 1) * call.Sq) // rows)
    slots = processors(dev) * resident_per_processor(kernel_set.kernels[0], dev)
    return split_count(workgroups, call.max_blocks * call.block_size, slots)


def _check_plan(who, plan, call, dev):
    """The plan's kernel set and split count, for a call that fits it: the same device, dtype, head_dim, block_size
    and heads, no larger batch or query count (the workspace was reserved for those), the plan's set serving its
    mask and features, num_splits 0 or the plan's."""
    if not isinstance(plan, DecodePlan):
        raise InputError(f"{who}: plan must come from tessera.paged_decode_plan, got {type(plan).__name__}")
    made, kernel_set = plan.call, plan.kernel_set
    if kernel_set.bundle.device is not dev:
        raise InputError(f"{who}: the plan was made for {kernel_set.bundle.device!r}, this call runs on {dev!r}")
    fixed = ("dtype", "kv_dtype", "kv_scale", "fp8_products", "sinks", "alibi", "cache_leftpad", "D", "block_size",
             "Hq", "Hkv")
    if any(getattr(call, f) != getattr(made, f) for f in fixed) or call.B > made.B or call.Sq > made.Sq:
        have = lambda c: ", ".join(f"{f}={getattr(c, f)}" for f in ("B", "Sq") + fixed)   # noqa: E731
        raise InputError(f"{who}: the call ({have(call)}) does not fit the plan ({have(made)}): the plan serves its "
                         "dtype, products, sinks, ALiBi, cache_leftpad, head_dim, block_size and heads with at most "
                         "its B and Sq")
    if call.num_splits not in (0, plan.num_splits):
        raise InputError(f"{who}: num_splits={call.num_splits} but the plan fixed {plan.num_splits}: pass 0 (or the "
                         "plan's) with plan=")
    if not _serves(kernel_set, call._replace(num_splits=plan.num_splits)):
        raise InputError(f"{who}: the plan's kernel set {kernel_set.name} ({kernel_set.attributes}) does not serve "
                         f"this call's mask {call.mask} and features: make the plan with the call's options")
    return kernel_set, plan.num_splits


# ---- Launch -------------------------------------------------------------------------------------
def _values(call, kernel_set, infos, ptrs, num_splits):
    """Every argument of the ABI by name, restricted to those the kernel set takes."""
    values = dict(ptrs, B=call.B, Sq=call.Sq, Hq=call.Hq, Hkv=call.Hkv, num_splits=num_splits, scale=call.scale,
                  window_left=call.window_left, softcap=call.softcap,
                  block_table_stride=infos["block_table"].strides[0],
                  lse_stride_b=call.Hq * call.Sq, lse_stride_h=call.Sq)   # the LSE paged_decode allocates
    for name, t in (("q", "q"), ("out", "o")):
        values.update(zip(_attention._stride_args(t), infos[name].strides[:3]))
    for name, t in (("k_cache", "k"), ("v_cache", "v")):
        values.update(zip((f"{t}_stride_page", f"{t}_stride_token", f"{t}_stride_head"),
                          _cache_strides(infos[name], call.kv_layout)))
    if call.kv_scale == "per_token":
        values.update(_scale_strides(infos["k_scale"]))
    if call.alibi:   # (Hq,): every sequence's slopes; (B, Hq): each sequence's row
        slopes = infos["alibi_slopes"]
        values.update(alibi_stride_b=slopes.strides[0] if len(slopes.shape) == 2 else 0)
    return {name: value for name, value in values.items() if name in kernel_set.settable}


_POINTERS = {"q": "q", "k_cache": "k_cache", "v_cache": "v_cache", "block_table": "block_table",
             "cache_seqlens": "cache_seqlens", "out": "o", "lse": "lse", "k_scale": "k_scale",
             "v_scale": "v_scale", "sinks": "sinks", "alibi_slopes": "alibi_slopes",
             "cache_leftpad": "cache_leftpad"}   # the caller's -> the ABI's


def _run(call, dev, kernel_set, infos, num_splits):
    """Launches the set on `infos` (out and lse included): torch on the current stream (asynchronous), numpy through
    simulator memory. An empty cache or block table is never read (every length is 0 then): q's pointer stands in
    for a null one."""
    q = infos["q"]
    if q.kind == "numpy":
        with _launch.SimMemory(dev) as mem:
            ptrs = {_POINTERS[name]: mem.put(info) for name, info in infos.items()}
            kernel_set.launch(None, **_values(call, kernel_set, infos, ptrs, num_splits))
            dev.synchronize()
            for name in ("out", "lse"):
                if name in infos:
                    mem.get(infos[name])
        return
    ptrs = {_POINTERS[name]: info.ptr or q.ptr for name, info in infos.items()}
    kernel_set.launch(_launch.stream_of(q.obj.device), **_values(call, kernel_set, infos, ptrs, num_splits))


_ARRAYS = ("q", "k_cache", "v_cache", "block_table", "cache_seqlens")
CONTIGUOUS = {"NHD": "(B, capacity, Hkv, D)", "HND": "(B, Hkv, capacity, D)"}


def _as_pages(who, q, k_cache, v_cache, cache_seqlens, kv_layout, device, rows=None, features=()):
    """A contiguous cache (block_table None: (B, capacity, Hkv, D) or HND (B, Hkv, capacity, D)) as pages of the
    largest block size a kernel set of the call has that tiles each sequence's rows (capacity and the batch stride
    multiples of it), among the sets with the call's `features` (attribute names: sinks, alibi, cache_leftpad,
    fp8_products) where any has them, else among all of the dtype and head_dim (_block_sizes): views
    (num_pages, block_size, ...) of the same memory and the block table that names sequence b's pages in order,
    made on the caches' device (torch: no synchronisation). rows: the cache row each sequence takes ((B,) integers
    on the caches' device, FlashAttention's cache_batch_idx; any number of cache rows), else row b. Returns
    (k_pages, v_pages, block_table)."""
    if not isinstance(kv_layout, str) or kv_layout not in LAYOUTS:
        raise InputError(f"{who}: kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
    infos = _attention._describe_all(who, (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                                           ("cache_seqlens", cache_seqlens)))
    qi, k, v = infos["q"], infos["k_cache"], infos["v_cache"]
    for name, info, layout in (("q", qi, "(B, Sq, Hq, D)"), ("k_cache", k, CONTIGUOUS[kv_layout]),
                               ("v_cache", v, CONTIGUOUS[kv_layout])):
        _attention._check_tensor(who, name, info, 4, layout)
    if k.shape != v.shape or k.strides != v.strides:
        raise InputError(f"{who}: without a block_table k_cache and v_cache are contiguous caches "
                         f"{CONTIGUOUS[kv_layout]} of one shape and strides, got {k.shape} / {k.strides} and "
                         f"{v.shape} / {v.strides}")
    if rows is None and k.shape[0] != qi.shape[0]:
        raise InputError(f"{who}: without a block_table k_cache is {CONTIGUOUS[kv_layout]}, one row per sequence: "
                         f"q has batch size {qi.shape[0]} but k_cache {k.shape[0]}")
    if rows is not None and tuple(getattr(rows, "shape", ())) != (qi.shape[0],):
        raise InputError(f"{who}: cache_batch_idx must be ({qi.shape[0]},), the cache row of each sequence, got "
                         f"shape {tuple(getattr(rows, 'shape', ()))}")
    if rows is not None and k.kind != "torch" and ((rows < 0) | (rows >= k.shape[0])).any():   # torch: no sync
        raise InputError(f"{who}: cache_batch_idx must name rows 0 to {k.shape[0] - 1} of the cache, got "
                         f"{[int(r) for r in rows]}")
    B, a, c, D = k.shape
    capacity, heads = (a, c) if kv_layout == "NHD" else (c, a)
    stride_b, stride_t = k.strides[0], k.strides[1 if kv_layout == "NHD" else 2]
    dev = _launch.runtime_device(who, [(n, i) for n, i in infos.items()], device,
                                 aligned=("q", "k_cache", "v_cache"))
    kv_dtype = k.dtype
    sizes = _block_sizes(dev, qi.dtype, kv_dtype, D, tuple(features))

    def tiles(bs):
        return capacity % bs == 0 and (B <= 1 or (stride_t and stride_b % (bs * stride_t) == 0))
    fitting = [bs for bs in sizes if isinstance(bs, int) and tiles(bs)]
    if not fitting:
        bs = max((2**i for i in range(11) if tiles(2**i)), default=1)
        raise KernelNotFoundError(
            f"{who}: a contiguous cache of capacity {capacity} (batch stride {stride_b}, token stride {stride_t}) "
            f"runs on a paged_decode set whose block_size divides both in tokens; bundle {dev.bundle().directory} "
            f"(with the later bundles of its target) has for dtype={qi.dtype} kv_dtype={kv_dtype} head_dim={D} the "
            f"block sizes {', '.join(map(str, sizes)) or 'none'}; this directive compiles one: "
            + directive_for(Call(qi.dtype, kv_dtype, D, 0, 1, 0, 0, bs, 0, kv_layout, CAUSAL, 1.0, -1, 0.0, False, 0)))
    bs = fitting[0]
    per_seq = capacity // bs
    step = stride_b // (bs * stride_t) if B > 1 else per_seq       # pages from one sequence to the next
    pages = (B - 1) * step + per_seq if B else 0
    if kv_layout == "NHD":
        shape, strides = (pages, bs, heads, D), (bs * stride_t, stride_t, k.strides[2], k.strides[3])
    else:
        shape, strides = (pages, heads, bs, D), (bs * stride_t, k.strides[1], stride_t, k.strides[3])
    if k.kind == "torch":
        torch = sys.modules["torch"]
        views = [x.as_strided(shape, strides) for x in (k_cache, v_cache)]
        first = torch.arange(B, dtype=torch.int32, device=k_cache.device) * step   # each row's first page
        table = first[:, None] + torch.arange(per_seq, dtype=torch.int32, device=k_cache.device)[None, :]
    else:
        import numpy as np
        size = k.itemsize
        views = [np.lib.stride_tricks.as_strided(x, shape, tuple(s * size for s in strides)) for x in (k_cache, v_cache)]
        table = (np.arange(B, dtype=np.int32)[:, None] * step + np.arange(per_seq, dtype=np.int32)[None, :])
    if rows is not None:
        table = table[rows.long() if k.kind == "torch" else rows]
    return views[0], views[1], table


def _block_sizes(dev, dtype, kv_dtype, D, features):
    """The block sizes of the paged_decode sets for this dtype, cache format and head_dim in the device's bundle and
    the same target's later bundles of the search path (where a kernel the first lacks is found: _ondemand.lookup),
    among those with every one of `features` where any has them, largest first; remembered per device bundle."""
    bundle = dev.bundle()

    def sizes():
        bundles = [bundle] + [dev.bundle(later) for later in _paths.later_bundles(bundle.directory)]
        sets = [s for b in bundles for s in b.kernel_sets.values()
                if s.directive == "paged_decode" and s.attributes.get("dtype") == dtype and
                s.attributes.get("kv_dtype", dtype) == kv_dtype and s.attributes.get("head_dim") == D]
        sets = [s for s in sets if all(s.attributes.get(f) for f in features)] or sets
        return sorted({s.attributes.get("block_size") for s in sets}, reverse=True)
    return bundle.remember(("paged_decode block sizes", dtype, kv_dtype, D, features), sizes)


def _features(fp8_products=False, sinks=None, alibi_slopes=None, cache_leftpad=None):
    """The kernel-set attributes a call with these options needs (_as_pages prefers the sets with them)."""
    return tuple(f for f, on in (("fp8_products", fp8_products), ("sinks", sinks is not None),
                                 ("alibi", alibi_slopes is not None), ("cache_leftpad", cache_leftpad is not None))
                 if on)


def paged_decode(q, k_cache, v_cache, block_table, cache_seqlens, *, kv_layout="NHD", causal=True, softmax_scale=None,
                 k_scale=None, v_scale=None, window_left=-1, softcap=0.0, num_splits=0, out=None, return_lse=False,
                 plan=None, fp8_products=False, sinks=None, alibi_slopes=None, cache_leftpad=None, device=None):
    """Decode attention over a paged KV cache: for each sequence b, the Sq new query tokens q[b] against the first
    cache_seqlens[b] keys and values (the new tokens' included), gathered from the pages block_table[b] names.

    q: (B, Sq, Hq, D) float16 or bfloat16, any strides with unit stride on D. k_cache, v_cache: pages of block_size
    tokens in q's dtype (or fp8, below), kv_layout "NHD" (num_pages, block_size, Hkv, D) or "HND" (num_pages, Hkv, block_size, D),
    any strides with unit stride on D; Hq % Hkv == 0 (query head h reads KV head h // (Hq // Hkv)). block_table:
    (B, max_blocks) int32, unit stride along a row; or None for contiguous caches (B, capacity, Hkv, D) (HND:
    (B, Hkv, capacity, D)), one row per sequence, run as pages of the largest block size of the bundle's sets that
    divides the capacity and the batch stride (a table naming each sequence's pages in order is made on the device);
    cache_seqlens: (B,) int32. Only the first
    ceil(cache_seqlens[b] / block_size) entries of a row are read, and no key at or past a sequence's length.
    causal: query token t sees keys up to len - Sq + t (bottom-right); window_left >= 0: only keys from
    pos - window_left; softcap > 0: logits s become softcap * tanh(s / softcap); softmax_scale defaults to 1/sqrt(D).
    num_splits: 0 lets the FlashAttention-3 rule choose from host-known sizes (never cache_seqlens), 1 does not
    split, n > 1 splits each sequence's keys n ways (split_kv kernel sets). Returns O (B, Sq, Hq, D) in q's dtype
    (`out` when given), and with return_lse also LSE (B, Hq, Sq) float32; a row that sees no key (cache_seqlens 0)
    gives O = 0 and LSE = -inf. plan: a paged_decode_plan for calls up to its sizes (fixed num_splits, workspace
    reserved: CUDA graph capture needs no warm-up call). torch CUDA tensors run on torch's current stream
    (asynchronous, capturable: nothing is read back); numpy arrays on device='sim:<target>'. Every check comes
    before any device work (InputError; KernelNotFoundError names the directive that would add a missing set).
    fp8 caches (float8_e4m3fn; float8_e4m3fnuz on gfx942) need k_scale and v_scale, each a positive number or a
    one-element float32 tensor on the device (dequantised value = stored x scale; a tensor is read on the device, so
    graph replays see its current value): the kernels widen the cache exactly to q's dtype and fold the scales in
    float32 (K's into the score scale, V's into the output). fp8_products=True (per-tensor scales) instead runs QK and
    PV on the chip's fp8 matrix instructions, each query row scaled by a power of two into the cache's format and P
    stretched into it before they are rounded to it (docs/decode.md: its tolerance; gfx942, gfx950, sm_90 and
    sm_90a; not gfx11).
    sinks: (Hq,) float32, unit stride: query head h's logit joins each of its rows' softmax denominator (gpt-oss's
    attention sinks, as tessera.flash_attn's): O and LSE include it, once also when the keys are split (the combine
    adds it); a row without a visible key gives O = 0 and LSE = sinks[h].
    alibi_slopes: (Hq,) or (B, Hq) float32, unit stride along the heads: ALiBi, -slope * |i + off - j| added to each
    (capped) scaled logit of query token i and key j (off = cache_seqlens[b] - Sq), as tessera.flash_attn's.
    cache_leftpad: (B,) int32, FlashAttention's: sequence b's keys are cache_leftpad[b] .. cache_seqlens[b] - 1 of
    its cache (the slots before are never read); the causal mask, window and ALiBi align to that range's end as
    without it (so nothing changes but which keys count). 0 <= cache_leftpad[b] <= cache_seqlens[b] (numpy: checked;
    torch: a larger pad gives that sequence no key).
    """
    who = "tessera.paged_decode"
    if _arrays.compiling():
        return _arrays.torch_ops.call_paged_decode(q, k_cache, v_cache, block_table, cache_seqlens, kv_layout, causal,
                                                   softmax_scale, k_scale, v_scale, window_left, softcap, num_splits,
                                                   out, return_lse, plan, fp8_products, cache_leftpad, sinks,
                                                   alibi_slopes)
    if block_table is None:
        _contiguous_scales(who, k_scale, v_scale)
        if cache_leftpad is not None:
            check_leftpad(who, cache_leftpad, q.shape[0], cache_seqlens)
        k_cache, v_cache, block_table = _as_pages(who, q, k_cache, v_cache, cache_seqlens, kv_layout, device,
                                                  features=_features(fp8_products, sinks, alibi_slopes,
                                                                     cache_leftpad))
    infos, call, dev = _prepare(who, tuple(zip(_ARRAYS, (q, k_cache, v_cache, block_table, cache_seqlens))), out,
                                device, kv_layout, causal, softmax_scale, k_scale, v_scale, window_left, softcap,
                                return_lse, num_splits, fp8_products, sinks, alibi_slopes, cache_leftpad)
    if plan is None:
        kernel_set = kernel_set_for(dev, call)
        splits = num_splits_for(call, kernel_set, dev)
    else:
        kernel_set, splits = _check_plan(who, plan, call, dev)
    if out is None:
        out = _arrays.empty(infos["q"], (call.B, call.Sq, call.Hq, call.D), call.dtype)
        infos["out"] = _arrays.describe(out, "out")
    lse = None
    if "lse" in kernel_set.settable:   # the set writes an LSE: a scratch one unless asked for
        lse = _arrays.empty(infos["q"], (call.B, call.Hq, call.Sq), "f32")
        infos["lse"] = _arrays.describe(lse, "lse")
    _check_cache_strides(who, call, kernel_set, infos)
    if not call.empty():
        _run(call, dev, kernel_set, infos, splits)
    return (out, lse) if call.return_lse else out


def _contiguous_scales(who, k_scale, v_scale):
    """Contiguous caches take per-tensor scales: per-token ones (B, Hkv, capacity) do not page like the cache."""
    if _per_token(k_scale) or _per_token(v_scale):
        raise InputError(f"{who}: contiguous caches (block_table=None) take per-tensor k_scale and v_scale; "
                         "per-token scales (num_pages, Hkv, block_size) need a paged cache and its block_table")


def _check_cache_strides(who, call, kernel_set, infos):
    """The cache strides the set's `divisible` rules ask for: kernels that copy whole 16-byte rows of the cache
    asynchronously (sm_90) need each stride a multiple of 8 elements. A cache is never copied to fix it."""
    for kernel in kernel_set.kernels:
        for rule in kernel.info.get("divisible", ()):
            tensor, _, axis = rule["arg"].partition("_stride_")
            if tensor not in ("k", "v") or not isinstance(rule["by"], int):
                continue
            name = f"{tensor}_cache"
            strides = dict(zip(("page", "token", "head"), _cache_strides(infos[name], call.kv_layout)))
            if strides[axis] % rule["by"]:
                raise InputError(f"{who}: {name} has {axis} stride {strides[axis]} (elements; strides "
                                 f"{infos[name].strides}); the {kernel_set.bundle.target} decode kernels copy its "
                                 f"rows as 16-byte vectors, so every stride must be a multiple of {rule['by']}")


def paged_decode_plan(q, k_cache, v_cache, block_table, cache_seqlens, *, kv_layout="NHD", causal=True,
                      window_left=-1, softcap=0.0, num_splits=0, return_lse=False, k_scale=None, v_scale=None,
                      fp8_products=False, sinks=None, alibi_slopes=None, cache_leftpad=None, device=None):
    """A DecodePlan for paged_decode calls up to these arrays' sizes (the largest batch and query count, the widest
    block table a CUDA graph will see): checks them as paged_decode would, chooses the kernel set and num_splits
    (the heuristic's for these sizes when 0), and reserves the set's workspaces on the current stream and the
    spare a capture stream takes (KernelSet.reserve), launching nothing. Pass it as paged_decode(..., plan=plan) to
    calls with the same dtype, head_dim, block_size, heads and options and at most its B and Sq: they skip the
    choice and use its num_splits, so every replay of a captured graph splits alike whatever its lengths.
    The values of window_left and softcap do not matter, only whether they are on; for fp8 caches neither do the
    scales' (calls pass their own), only whether they are per-token: k_scale and v_scale may be left out for
    per-tensor ones. Likewise sinks, alibi_slopes and cache_leftpad: only whether the calls pass them."""
    who = "tessera.paged_decode_plan"
    if _arrays.dtype_name(getattr(k_cache, "dtype", None)) in FP8 and k_scale is None and v_scale is None:
        k_scale = v_scale = 1.0
    if block_table is None:
        _contiguous_scales(who, k_scale, v_scale)
        k_cache, v_cache, block_table = _as_pages(who, q, k_cache, v_cache, cache_seqlens, kv_layout, device,
                                                  features=_features(fp8_products, sinks, alibi_slopes,
                                                                     cache_leftpad))
    infos, call, dev = _prepare(who, tuple(zip(_ARRAYS, (q, k_cache, v_cache, block_table, cache_seqlens))), None,
                                device, kv_layout, causal, None, k_scale, v_scale, window_left, softcap, return_lse,
                                num_splits, fp8_products, sinks, alibi_slopes, cache_leftpad)
    kernel_set = kernel_set_for(dev, call)
    splits = num_splits_for(call, kernel_set, dev)
    if not call.empty():
        # Nothing is launched: the sizes count, not the pointers (q's stands in for each) or o's strides (q's).
        qi = infos["q"]
        infos["out"] = qi
        ptrs = {abi: qi.ptr for abi in _POINTERS.values()}
        stream = None if qi.kind == "numpy" else _launch.stream_of(qi.obj.device)
        kernel_set.reserve(stream, **_values(call, kernel_set, infos, ptrs, splits))
    return DecodePlan(kernel_set, splits, call)


# ---- Cache writes -------------------------------------------------------------------------------
def _check_cache_write(who, infos, kv_layout, k_scale, v_scale):
    """key, value, k_cache, v_cache, slot_mapping, the scales: Returns (dtype, kv_dtype, kv_scale, D, num_tokens,
    num_pages, block_size, Hkv)."""
    if not isinstance(kv_layout, str) or kv_layout not in LAYOUTS:
        raise InputError(f"{who}: kv_layout must be 'NHD' {LAYOUTS['NHD']} or 'HND' {LAYOUTS['HND']}, got "
                         f"{kv_layout!r}")
    key, value, k, v, slots = (infos[n] for n in ("key", "value", "k_cache", "v_cache", "slot_mapping"))
    for name, info, ndim, layout in (("key", key, 3, "(num_tokens, Hkv, D)"), ("value", value, 3, "(num_tokens, Hkv, D)"),
                                     ("k_cache", k, 4, LAYOUTS[kv_layout]), ("v_cache", v, 4, LAYOUTS[kv_layout]),
                                     ("slot_mapping", slots, 1, "(num_tokens,)")):
        _attention._check_tensor(who, name, info, ndim, layout)
    for name, info in (("key", key), ("value", value)):
        if info.dtype not in _attention.DTYPES:
            raise InputError(f"{who}: {name} has dtype {_attention._spelled(info.dtype)}; supported: float16, "
                             "bfloat16")
    if key.dtype != value.dtype:
        raise InputError(f"{who}: key and value must have the same dtype, got {_attention._spelled(key.dtype)} and "
                         f"{_attention._spelled(value.dtype)}")
    kv_dtype = _check_kv(who, key.dtype, k, v, k_scale, v_scale, "key, value")
    if slots.dtype != "int64":
        raise InputError(f"{who}: slot_mapping has dtype {slots.dtype}; it must be int64 (page * block_size + "
                         "offset, negative for a token to skip)")
    if slots.shape[0] > 1 and slots.strides[0] != 1:
        raise InputError(f"{who}: slot_mapping has stride {slots.strides[0]}; it needs unit stride: use "
                         ".contiguous() / numpy.ascontiguousarray")
    if k.shape != v.shape:
        raise InputError(f"{who}: k_cache and v_cache must have the same shape {LAYOUTS[kv_layout]}, got "
                         f"{k.shape} and {v.shape}")
    num_pages, block_size, Hkv = _cache_dims(k, kv_layout)
    D = k.shape[-1]
    if key.shape != value.shape:
        raise InputError(f"{who}: key and value must have the same shape (num_tokens, Hkv, D), got {key.shape} and "
                         f"{value.shape}")
    if key.shape[1:] != (Hkv, D):
        raise InputError(f"{who}: key has shape {key.shape} but the cache {k.shape} ({kv_layout} "
                         f"{LAYOUTS[kv_layout]}) holds Hkv={Hkv} heads of head_dim {D}")
    num_tokens = slots.shape[0]
    if key.shape[0] < num_tokens:
        raise InputError(f"{who}: slot_mapping names {num_tokens} tokens but key has {key.shape[0]} (key may be "
                         "longer, as when padded for a CUDA graph: its rows past slot_mapping's are not read)")
    if D not in _attention.HEAD_DIMS:
        raise InputError(f"{who}: head_dim {D} is not supported (supported: "
                         f"{', '.join(map(str, _attention.HEAD_DIMS))})")
    if block_size < 1 or block_size > MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise InputError(f"{who}: block_size {block_size} (k_cache {k.shape} as {kv_layout} {LAYOUTS[kv_layout]}) "
                         f"must be a power of two from 1 to {MAX_BLOCK_SIZE}")
    for name, info in (("key", key), ("value", value), ("k_cache", k), ("v_cache", v)):
        _attention._check_head_dim_stride(who, name, info)
    if slots.kind == "numpy" and num_tokens:
        import numpy as np
        bad = np.flatnonzero(slots.obj >= num_pages * block_size)
        if bad.size:
            t = int(bad[0])
            raise InputError(f"{who}: slot_mapping[{t}] = {int(slots.obj[t])} is past the cache's "
                             f"{num_pages} pages of {block_size} tokens (slots 0 to {num_pages * block_size - 1}; "
                             "negative ones are skipped)")
    kv_scale = _scale_granularity(who, k_scale, v_scale, (num_pages, Hkv, block_size)) if kv_dtype in FP8 else \
        "per_tensor"
    return key.dtype, kv_dtype, kv_scale, D, num_tokens, num_pages, block_size, Hkv


def cache_writer(dev, dtype, kv_dtype, kv_scale, D, block_size):
    """The `<set>_cache_write` kernel of a paged_decode kernel set of this dtype, cache format (and scale
    granularity), head_dim and block_size (any mask and features: the writer only copies or quantises); where the
    device's bundle has none, the set the named directive compiles on demand (_ondemand)."""
    call = Call(dtype, kv_dtype, D, 0, 1, 0, 0, block_size, 0, "NHD", CAUSAL, 1.0, -1, 0.0, False, 0, kv_scale)

    def find(bundle):
        for s in bundle.kernel_sets.values():
            a = s.attributes
            if (s.directive == "paged_decode" and a.get("dtype") == dtype and a.get("kv_dtype", dtype) == kv_dtype and
                    a.get("kv_scale", "per_tensor") == kv_scale and a.get("head_dim") == D and
                    a.get("block_size") == block_size and f"{s.name}_cache_write" in bundle.kernels):
                return bundle.kernels[f"{s.name}_cache_write"]
        names = [s.name for s in bundle.kernel_sets.values() if s.directive == "paged_decode"]
        raise KernelNotFoundError(f"bundle {bundle.directory} ({bundle.target}) has no paged_decode kernel set with "
                                  f"dtype={dtype}" +
                                  (f" kv_dtype={kv_dtype} kv_scale={kv_scale}" if kv_dtype in FP8 else "") +
                                  f" head_dim={D} block_size={block_size}, whose cache writer this call "
                                  f"needs (paged_decode kernel sets: {', '.join(names) or 'none'}); this directive "
                                  f"compiles one: {directive_for(call)}")
    return _ondemand.lookup(dev, ("paged_cache_write", dtype, kv_dtype, kv_scale, D, block_size), find,
                            directive_for(call))


def paged_cache_write(key, value, k_cache, v_cache, slot_mapping, *, kv_layout="NHD", k_scale=None, v_scale=None,
                      device=None):
    """Writes new tokens' keys and values into a paged KV cache (vLLM's reshape_and_cache_flash): for each token t
    < len(slot_mapping) whose slot s = slot_mapping[t] = page * block_size + offset is not negative, key[t] goes to
    k_cache's token `offset` of page `page` and value[t] to v_cache's; a negative slot (padding) writes nothing,
    and nothing else of the caches changes.

    key, value: (num_tokens, Hkv, D) float16 or bfloat16 in the caches' dtype (or for fp8 caches, with k_scale and
    v_scale as tessera.paged_decode takes them, quantised: key / k_scale in float32, saturated at the format's
    largest value, rounded to nearest even, as vLLM's writer does), any strides with unit stride on D
    (rows past len(slot_mapping) are not read, as when padded for a CUDA graph). k_cache, v_cache: as
    tessera.paged_decode takes them (kv_layout "NHD" or "HND"; they may be views of one buffer). slot_mapping:
    (num_tokens,) int64, unit stride; two tokens must not share a slot. The kernel is the `<set>_cache_write` of
    a paged_decode kernel set with the caches' dtype, head_dim and block_size. torch CUDA tensors run on torch's
    current stream (asynchronous, capturable); numpy arrays on device='sim:<target>' (caches updated in place,
    their slots checked first). Every check comes before any device work (InputError)."""
    who = "tessera.paged_cache_write"
    if _arrays.compiling():
        return _arrays.torch_ops.call_paged_cache_write(key, value, k_cache, v_cache, slot_mapping, kv_layout, k_scale,
                                                        v_scale)
    names = ("key", "value", "k_cache", "v_cache", "slot_mapping")
    infos = _attention._describe_all(who, zip(names, (key, value, k_cache, v_cache, slot_mapping)))
    dtype, kv_dtype, kv_scale, D, num_tokens, _, block_size, _ = _check_cache_write(who, infos, kv_layout, k_scale,
                                                                                  v_scale)
    scales = [(name, _arrays.describe(value, name)) for name, value in (("k_scale", k_scale), ("v_scale", v_scale))
              if value is not None and not isinstance(value, (int, float))]
    per_token = kv_scale == "per_token"     # the writer computes and stores each written slot's scales
    dev = _launch.runtime_device(who, list(infos.items()) + scales, device,
                                 outputs=("k_cache", "v_cache") + (("k_scale", "v_scale") if per_token else ()))
    kernel = cache_writer(dev, dtype, kv_dtype, kv_scale, D, block_size)
    if num_tokens == 0 or 0 in infos["k_cache"].shape:
        return
    if kv_dtype in FP8:
        _scale_arrays(infos, infos["key"], k_scale, v_scale)
    values = {"num_tokens": num_tokens, "Hkv": infos["key"].shape[1]}
    for name in ("key", "value"):
        values.update(zip((f"{name}_stride_t", f"{name}_stride_h"), infos[name].strides[:2]))
    for name, t in (("k_cache", "k"), ("v_cache", "v")):
        values.update(zip((f"{t}_stride_page", f"{t}_stride_token", f"{t}_stride_head"),
                          _cache_strides(infos[name], kv_layout)))
    if per_token:
        values.update(_scale_strides(infos["k_scale"]))
    if infos["key"].kind == "numpy":
        import numpy as np
        with _launch.SimMemory(dev) as mem:
            ptrs = {name: mem.put(infos[name]) for name in ("key", "value", "slot_mapping", "k_scale", "v_scale")
                    if name in infos}
            caches = [infos["k_cache"], infos["v_cache"]]
            if np.may_share_memory(k_cache, v_cache):
                ptrs["k_cache"], ptrs["v_cache"] = mem.put_together(caches)
            else:
                ptrs["k_cache"], ptrs["v_cache"] = (mem.put(info) for info in caches)
            kernel.launch(None, **values, **ptrs)
            dev.synchronize()
            for info in caches + ([infos["k_scale"], infos["v_scale"]] if per_token else []):
                mem.get(info)
        return
    kernel.launch(_launch.stream_of(infos["key"].obj.device), **values,
                  **{name: info.ptr for name, info in infos.items()})

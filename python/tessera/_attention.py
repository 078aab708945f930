"""tessera.flash_attn and tessera.flash_attn_varlen: attention forward with the flash_attn kernels (docs/flash_attn-abi.md),
on torch CUDA tensors or on numpy arrays through the simulator."""
import math
import operator
import sys
from typing import NamedTuple

from . import _arrays, _launch, _ondemand, _paths
from ._errors import InputError, KernelNotFoundError

SHORT_MASKS = {"none": "none", "causal_top_left": "tl", "causal_bottom_right": "br"}   # in default kernel names
SHORT_FEATURES = {"attention_chunk": "chunk", "paged_kv": "paged", "dropout": "drop"}   # in on-demand kernel names
# The ABI's pointers beyond q, k, v, o.
EXTRA_POINTERS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "sinks", "alibi_slopes", "block_table",
                  "rng_state")
HEAD_DIMS = (32, 64, 96, 128, 256)                          # the default bundle's kernels
MAX_HEAD_DIM = 256
DTYPES = ("f16", "bf16")
ALIGNS = {"bottom_right": "causal_bottom_right", "top_left": "causal_top_left"}
RUNTIME_FEATURES = ("sliding_window", "softcap", "return_lse")   # in every kernel directive_for compiles
FEATURES = RUNTIME_FEATURES + ("attention_chunk",)   # unit attributes a kernel may have beyond what a call needs


class Plan(NamedTuple):
    """A validated attention call: sizes, the kernel variant wanted, the runtime parameters."""
    who: str
    varlen: bool
    dtype: str
    D: int
    B: int            # batch (varlen: number of sequences, len(cu_seqlens) - 1)
    Sq: int           # varlen: max_seqlen_q
    Sk: int           # varlen: max_seqlen_k
    Hq: int
    Hkv: int
    mask: str         # none, causal_top_left, causal_bottom_right
    scale: float
    window: tuple
    softcap: float
    return_lse: bool
    out_shape: tuple
    lse_shape: tuple
    sinks: bool = False   # a sink logit per query head joins each row's softmax denominator
    alibi: bool = False   # ALiBi slopes ((Hq,) or (B, Hq)) bias the logits
    chunk: int = 0        # attention_chunk: chunked local attention (0: off)
    paged: bool = False   # varlen K and V in a paged cache, through a block table
    dropout_p: float = 0.0   # dropout on P (0: off), its seed and offset in infos["rng_state"]
    seqused: bool = False    # varlen: each sequence's used query and key counts (seqused_q/k) within its rows

    def empty(self):
        """True when there is nothing to compute (no query row or no head): no launch."""
        return self.B == 0 or self.Sq == 0 or self.Hq == 0 or self.out_shape[0] == 0


def _spelled(dtype):
    return _arrays.TORCH_NAMES.get(dtype, dtype)


def _non_overlapping(shape, strides):
    """True when no two elements share memory (a sufficient test: sorted by stride, each stride exceeds the
    extent of the smaller ones). Dimensions of size 1 do not matter; an empty array has no elements to share (numpy
    gives it zero strides)."""
    if 0 in shape:
        return True
    dims = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    extent = 0
    for stride, n in dims:
        if stride <= extent:
            return False
        extent += (n - 1) * stride
    return True


def _describe_all(who, named):
    return {name: (None if x is None else _arrays.describe(x, f"{who}: {name}")) for name, x in named}


def kernel_head_dim(D):
    """The head_dim of the kernels that serve head_dim D (1 to 256), the inputs zero-padded to it where it is larger
    (the padding adds nothing to q.k and the output's padding columns are dropped, as FlashAttention does): D itself
    where it is a multiple of 8 (the kernels widen their tiles to the matrix instructions' 16 inside), else the next
    multiple of 8."""
    return -(-D // 8) * 8


def head_dim_padding(q, k, v):
    """(Dqk, Dv, padded) when q and k share a head_dim Dqk and v has Dv (each 1 to 256) that run zero-padded to one
    kernel head_dim, padded = kernel_head_dim(max(Dqk, Dv)): a head_dim no kernel has, or V's differing from
    Q's and K's (DeepSeek's MLA prefill: 192 and 128; zero columns of q and k add nothing to q.k, and zero columns of
    V give zero columns of O, which are dropped); None otherwise (the checks then name any problem)."""
    dims = [x.shape[-1] if getattr(x, "shape", None) else None for x in (q, k, v)]
    if not all(isinstance(d, int) and 1 <= d <= MAX_HEAD_DIM for d in dims) or dims[0] != dims[1]:
        return None
    Dqk, Dv = dims[1:]
    if Dqk == Dv and kernel_head_dim(Dqk) == Dqk:
        return None
    return Dqk, Dv, kernel_head_dim(max(Dqk, Dv))


def check_unpadded_outputs(who, named, like):
    """Before a zero-padded call: each given output of `named` ((name, array, expected shape) triples) has that shape
    and like's dtype; the padded call checks the rest."""
    expected = _arrays.describe(like, "q").dtype
    for name, x, shape in named:
        if x is None:
            continue
        info = _arrays.describe(x, f"{who}: {name}")
        _check_shape_dtype(who, name, info, tuple(shape), expected)


def _check_tensor(who, name, info, ndim, layout):
    if len(info.shape) != ndim:
        raise InputError(f"{who}: {name} must be {ndim}-D {layout}, got shape {info.shape}")
    if info.strides is None:
        raise InputError(f"{who}: {name} has strides {info.obj.strides} (bytes) that are not whole elements")


def _check_head_dim_stride(who, name, info):
    if info.shape[-1] > 1 and info.strides[-1] != 1 and all(info.shape):
        raise InputError(f"{who}: {name} has stride {info.strides[-1]} on head_dim (its last dimension) and "
                         f"strides {info.strides} (elements); the head_dim stride must be 1 (any other strides are "
                         "fine, such as q, k, v sliced from one packed qkv tensor): use .contiguous() / "
                         "numpy.ascontiguousarray")


def _check_inputs(who, q, k, v, ndim, layout_q, layout_kv, kv_ndim=None):
    """dtype, ndim (k and v: kv_ndim, default ndim), head_dim and head-dim stride of q, k, v; returns (dtype, D)."""
    for name, info in (("q", q), ("k", k), ("v", v)):
        _check_tensor(who, name, info, ndim if name == "q" else kv_ndim or ndim, layout_q if name == "q" else layout_kv)
        if info.dtype not in DTYPES:
            raise InputError(f"{who}: {name} has dtype {_spelled(info.dtype)}; supported: float16, bfloat16")
    if not q.dtype == k.dtype == v.dtype:
        raise InputError(f"{who}: q, k and v must have the same dtype, got {_spelled(q.dtype)}, "
                         f"{_spelled(k.dtype)} and {_spelled(v.dtype)}")
    D = q.shape[-1]
    if k.shape[-1] != D:
        raise InputError(f"{who}: q and k must have the same head_dim (v's may differ), got {D} and {k.shape[-1]}")
    if not 1 <= D <= MAX_HEAD_DIM or kernel_head_dim(D) != D:
        raise InputError(f"{who}: head_dim {D} is not supported (1 to {MAX_HEAD_DIM})")
    if v.shape[-1] != D:   # v's own head_dim runs zero-padded (head_dim_padding); here it is out of range
        raise InputError(f"{who}: v's head_dim {v.shape[-1]} is not supported (1 to {MAX_HEAD_DIM})")
    if k.shape[:-1] != v.shape[:-1]:
        raise InputError(f"{who}: k and v must have the same shape {layout_kv} but for the head_dim, got {k.shape} "
                         f"and {v.shape}")
    for name, info in (("q", q), ("k", k), ("v", v)):
        _check_head_dim_stride(who, name, info)
    return q.dtype, D


def _check_heads(who, Hq, Hkv):
    if Hkv == 0 and Hq == 0:
        return
    if Hkv == 0 or Hq % Hkv:
        raise InputError(f"{who}: the number of query heads Hq = {Hq} must be a multiple of the number of "
                         f"key/value heads Hkv = {Hkv} (MHA: equal; GQA/MQA: Hq % Hkv == 0)")


def _options(who, D, causal, causal_align, scale, window, softcap, return_lse):
    """(mask, scale, window, softcap, return_lse), checked."""
    if causal_align not in ALIGNS:
        raise InputError(f"{who}: causal_align must be 'bottom_right' or 'top_left', got {causal_align!r}")
    mask = ALIGNS[causal_align] if causal else "none"
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise InputError(f"{who}: scale {scale!r} is not a number") from None
    if not math.isfinite(scale):
        raise InputError(f"{who}: scale must be finite, got {scale}")
    try:
        left, right = (operator.index(w) for w in window)
    except (TypeError, ValueError):
        raise InputError(f"{who}: window must be a pair of integers (left, right), -1 = unbounded; got "
                         f"{window!r}") from None
    if left < -1 or right < -1:
        raise InputError(f"{who}: window {(left, right)}: each side is >= 0, or -1 for unbounded")
    try:
        softcap = float(softcap)
    except (TypeError, ValueError):
        raise InputError(f"{who}: softcap {softcap!r} is not a number") from None
    if not (math.isfinite(softcap) and softcap >= 0):
        raise InputError(f"{who}: softcap must be finite and >= 0 (0 disables it), got {softcap}")
    return mask, scale, (left, right), softcap, bool(return_lse)


def _chunk(who, attention_chunk):
    """attention_chunk checked: an int >= 0 (0: off)."""
    try:
        chunk = operator.index(attention_chunk)
    except TypeError:
        raise InputError(f"{who}: attention_chunk must be an integer (0 = off), got {attention_chunk!r}") from None
    if chunk < 0:
        raise InputError(f"{who}: attention_chunk must be >= 0 (0 = off), got {chunk}")
    return chunk


def _check_shape_dtype(who, name, info, shape, dtype):
    if info.shape != shape:
        raise InputError(f"{who}: {name} has shape {info.shape}, expected {shape}")
    if info.dtype != dtype:
        raise InputError(f"{who}: {name} has dtype {_spelled(info.dtype)}, expected {_spelled(dtype)}")


def _check_output(who, name, info, shape, dtype, unit_last=True):
    _check_shape_dtype(who, name, info, shape, dtype)
    if info.strides is None or (unit_last and shape[-1] > 1 and info.strides[-1] != 1 and all(shape)) or \
            not _non_overlapping(info.shape, info.strides):
        raise InputError(f"{who}: {name} has shape {info.shape} and strides {info.strides} (elements); it needs "
                         "unit stride on the last dimension and elements that do not overlap")


def _check_outputs(who, p, out, lse):
    if out is not None:
        _check_output(who, "out", out, p.out_shape, p.dtype)
    if lse is not None:
        if not p.return_lse:
            raise InputError(f"{who}: lse is given but return_lse is False")
        _check_output(who, "lse", lse, p.lse_shape, "f32")


def _strides(info):
    """(stride_b, stride_s, stride_h) in elements; packed varlen tensors (total, H, D) have no batch stride, a paged
    cache's (num_pages, page_size, H, D) is its page stride."""
    return (0,) + info.strides[:2] if len(info.shape) == 3 else info.strides[:3]


# ---- Kernel choice ------------------------------------------------------------------------------
def _attribute(kernel, name, default):
    return kernel.attributes.get(name, default)


def _variant(p):
    return dict(dtype=p.dtype, head_dim=p.D, mask=p.mask, varlen=p.varlen, sinks=p.sinks, alibi=p.alibi,
                paged_kv=p.paged, dropout=p.dropout_p > 0, seqused=p.seqused)


def _serves(kernel, variant, needed):
    """True when `kernel` is a flash_attn kernel (not a portable twin: see with_tma_fallback) of this variant
    (_variant) with every feature `needed` asks for."""
    if kernel.directive != "flash_attn" or "twin_of" in kernel.info:
        return False
    have = dict(dtype=_attribute(kernel, "dtype", None), head_dim=_attribute(kernel, "head_dim", None),
                mask=_attribute(kernel, "mask", "none"), varlen=bool(_attribute(kernel, "varlen", False)),
                sinks=bool(_attribute(kernel, "sinks", False)), alibi=bool(_attribute(kernel, "alibi", False)),
                paged_kv=bool(_attribute(kernel, "paged_kv", False)), dropout=bool(_attribute(kernel, "dropout", False)),
                seqused=bool(_attribute(kernel, "seqused", False)))
    return have == variant and all(_attribute(kernel, f, False) for f, want in needed.items() if want)


def _needed(p):
    return {"sliding_window": p.window != (-1, -1), "softcap": p.softcap > 0, "return_lse": p.return_lse,
            "attention_chunk": p.chunk > 0}


def find_kernel(bundle, p, pack=1):
    """The flash_attn kernel of `bundle` for plan p: its dtype, head_dim, mask and varlen, pack_gqa `pack`, with
    every feature p uses (a kernel with more features is fine: unused ones get neutral values); the one with the
    fewest extra features wins. KernelNotFoundError names the variant otherwise."""
    variant, needed = _variant(p), _needed(p)
    fits = []
    for kernel in bundle.kernels.values():
        if _serves(kernel, variant, needed) and _attribute(kernel, "pack_gqa", 1) == pack:
            extra = sum(bool(_attribute(kernel, f, False)) for f in FEATURES)
            fits.append((extra, kernel.name, kernel))
    if not fits:
        wanted = " ".join(f"{k}={v}" for k, v in variant.items()
                          if k not in ("sinks", "alibi", "paged_kv", "dropout", "seqused") or v) + \
            "".join(f" {f}" for f, w in needed.items() if w)
        wanted += f" pack_gqa={pack}" if pack > 1 else ""
        names = [k.name for k in bundle.kernels.values() if k.directive == "flash_attn"]
        raise KernelNotFoundError(f"bundle {bundle.directory} ({bundle.target}) has no flash_attn kernel with "
                                  f"{wanted} (flash_attn kernels: {', '.join(names) or 'none'}); this directive "
                                  f"compiles one: {directive_for(p)}")
    return min(fits)[2]


PACK_TILE_ROWS = 128   # query rows of the tile of the kernels that pack GQA heads (sm_90a wgmma)


def _packings(bundle, p):
    """The pack_gqa values > 1 of the bundle's kernels for p's variant and features that really pack: not a
    portable fallback, which takes one query head per tile whatever its attribute says."""
    variant, needed = _variant(p), _needed(p)
    packs = set()
    for kernel in bundle.kernels.values():
        g = _attribute(kernel, "pack_gqa", 1)
        if g > 1 and "fallback" not in kernel.info and _serves(kernel, variant, needed):
            packs.add(g)
    return tuple(sorted(packs))


def pack_for(p, packs):
    """How many query heads of one KV head a tile takes (FlashAttention-3's rule): with few queries a tile's
    128 rows mostly go unused, and packing g heads (g dividing Hq / Hkv) fills them; pack when the unpacked
    fill is under 0.9 of the best packed one."""
    ratio = p.Hq // p.Hkv if p.Hkv else 1
    if p.varlen or ratio == 1 or p.Sq == 0:
        return 1

    def fill(g):
        rows = PACK_TILE_ROWS // g
        return p.Sq / (-(-p.Sq // rows) * rows)
    best = max((g for g in packs if ratio % g == 0), key=lambda g: (fill(g), -g), default=1)
    return best if best > 1 and fill(1) < 0.9 * fill(best) else 1


def directive_for(p):
    """The directive that compiles a kernel for p's variant, with every runtime feature (as the default bundle's
    `fa_<dtype>_d<D>_<mask>` kernels have)."""
    optional = [a for a, on in (("varlen", p.varlen), ("paged_kv", p.paged), ("seqused", p.seqused),
                                ("sinks", p.sinks), ("alibi", p.alibi),
                                ("attention_chunk", p.chunk > 0), ("dropout", p.dropout_p > 0)) if on]
    name = f"fa_{p.dtype}_d{p.D}_{SHORT_MASKS[p.mask]}" + "".join(f"_{SHORT_FEATURES.get(a, a)}" for a in optional)
    attributes = [f"dtype = {p.dtype}", f"head_dim = {p.D}", f"mask = #tessera.mask<{p.mask}>", *RUNTIME_FEATURES,
                  *optional]
    return f"tessera.flash_attn @{name} {{{', '.join(attributes)}}}"


def kernel_for(dev, p):
    """The device bundle's kernel for p (in_bundle), or where it has none the one directive_for(p) compiles on
    demand (_ondemand)."""
    return _ondemand.lookup(dev, None, lambda bundle: in_bundle(bundle, p), directive_for(p))


def in_bundle(bundle, p):
    """find_kernel(bundle, p, pack_for(...)), remembered per bundle and variant: a bundle's kernels never change,
    and scanning them costs more per call than a short kernel runs. A missing variant is not remembered (each call
    raises)."""
    variant, needed = _variant(p), _needed(p)
    packs = bundle.remember(("flash_attn_packings", *variant.values(), *needed.values()),
                            lambda: _packings(bundle, p))
    pack = pack_for(p, packs) if packs else 1
    key = ("flash_attn", *variant.values(), *needed.values(), pack)
    return bundle.remember(key, lambda: find_kernel(bundle, p, pack))


TMA_ALIGNMENT = 16   # bytes: TMA copies need 16-byte aligned bases and strides


def _tma_ready(p, infos):
    """True when every q/k/v/o tensor is one TMA can copy: each stride of a (batch, sequence, head) dimension
    longer than 1 is a positive multiple of 16 bytes (bases are checked to be 16-byte aligned already)."""
    for name in ("q", "k", "v", "o"):
        info = infos[name]
        for extent, stride in zip(info.shape[:-1], info.strides[:-1]):
            if extent > 1 and (stride <= 0 or stride * info.itemsize % TMA_ALIGNMENT):
                return False
    return True


def with_tma_fallback(bundle, kernel, p, infos):
    """`kernel`, or its portable twin when it copies with TMA (sm_90a) and these tensors' strides do not allow it."""
    twin = kernel.info.get("portable_twin")
    if twin and not _tma_ready(p, infos):
        return bundle.kernels[twin]
    return kernel


# ---- Launch -------------------------------------------------------------------------------------
def _stride_args(name):
    return tuple(f"{name}_stride_{axis}" for axis in "bsh")   # q_stride_b, q_stride_s, q_stride_h


def _values(p, ptrs, infos, lse_strides, kernel, tensors=("q", "k", "v", "o")):
    """Every argument of the ABI by name, restricted to those the kernel (or kernel set) takes; `tensors` name the
    arrays of infos with stride arguments."""
    values = dict(ptrs)
    values.update(B=p.B, Sq=p.Sq, Sk=p.Sk, Hq=p.Hq, Hkv=p.Hkv, scale=p.scale, window_left=p.window[0],
                  window_right=p.window[1], softcap=p.softcap, lse_stride_b=lse_strides[0],
                  lse_stride_h=lse_strides[1], attention_chunk=p.chunk, dropout_p=p.dropout_p)
    if "alibi_slopes" in infos:   # (Hq,): every batch item's slopes; (B, Hq): each item's row
        slopes = infos["alibi_slopes"]
        values.update(alibi_stride_b=slopes.strides[0] if len(slopes.shape) == 2 else 0)
    if "block_table" in infos:
        values.update(block_table_stride=infos["block_table"].strides[0], page_size=infos["k"].shape[1])
    for name in tensors:
        values.update(zip(_stride_args(name), _strides(infos[name])))
    if p.varlen:   # the packed row counts (a paged cache: its rows)
        values.update(total_q=infos["q"].shape[0], total_k=infos["k"].shape[0] * (infos["k"].shape[1] if p.paged else 1))
    return {name: value for name, value in values.items() if name in kernel.settable}


def _lse_strides(p, lse):
    """(lse_stride_b, lse_stride_h) of an LSE array, or of a packed scratch one when lse is None."""
    if lse is not None:
        return (0, lse.strides[0]) if p.varlen else lse.strides[:2]
    return (0, p.lse_shape[1]) if p.varlen else (p.Hq * p.Sq, p.Sq)


def _run(p, dev, kernel, infos, lse, signature=None):
    """Launches the kernel: torch on the current stream (asynchronous), numpy through simulator memory. A torch
    call's `signature` (_signature) remembers its launch for repeats."""
    q = infos["q"]
    lse_strides = _lse_strides(p, lse)
    writes_lse = "lse" in kernel.settable
    cu = [n for n in EXTRA_POINTERS if n in infos]   # pointers beyond q, k, v, o
    if q.kind == "numpy":
        with _launch.SimMemory(dev) as mem:
            ptrs = {name: mem.put(infos[name]) for name in ("q", "k", "v", "o", *cu)}
            if lse is not None:
                ptrs["lse"] = mem.put(lse)
            elif writes_lse:   # the kernel writes LSE anyway: a scratch buffer in simulator memory
                ptrs["lse"] = mem.alloc(4 * math.prod(p.lse_shape))
            kernel.launch(None, **_values(p, ptrs, infos, lse_strides, kernel))
            dev.synchronize()
            mem.get(infos["o"])
            if lse is not None:
                mem.get(lse)
        return
    # A call and its repeats launch through the same _CheckedCall.
    call = _CheckedCall(p, kernel, _values(p, {}, infos, lse_strides, kernel), writes_lse)
    call(*(infos[name].obj for name in ("q", "k", "v", "o")), None if lse is None else lse.obj,
         **{name: infos[name].ptr for name in cu})
    if signature is not None:   # launched: a repeat will launch too
        _remember(signature, call)


def _finish(p, dev, infos, out, lse, device_arrays, signature=None):
    """Common tail: kernel choice, outputs, empty sizes, launch. Returns O or (O, LSE)."""
    kernel = kernel_for(dev, p)
    q = infos["q"]
    if out is None:
        out = _arrays.empty(q, p.out_shape, p.dtype)
        infos["o"] = _arrays.describe(out, "out")
    else:
        infos["o"] = device_arrays["out"]
    kernel = with_tma_fallback(kernel.bundle, kernel, p, infos)
    lse_info = device_arrays.get("lse")
    if p.return_lse and lse is None:
        lse = _arrays.empty(q, p.lse_shape, "f32")
        lse_info = _arrays.describe(lse, "lse")
    if not p.empty():
        _run(p, dev, kernel, infos, lse_info, signature)
    return (out, lse) if p.return_lse else out


# ---- Repeated torch calls -----------------------------------------------------------------------
# A torch call with the tensor shapes, strides, dtypes and devices and the options of an earlier one passes the same
# checks and gets the same plan, kernel and size, stride and scale arguments: a repeat checks and sets only the data
# pointers. The checks and the kernel choice cost more host time than a short kernel runs (bench_attn's host line).
_REPEATS = {}            # _signature -> _CheckedCall
_REPEATS_MAX = 1024      # signatures kept; then all are forgotten at once
_OPTION_TYPES = (bool, int, float, str, type(None))


def _signature(tensors, options):
    """The key of a call whose arrays (None or not) are all torch tensors and whose options are plain values, with
    the bundle search path (a changed TESSERA_* variable finds another bundle); None for any other call."""
    torch = sys.modules.get("torch")
    if torch is None or not all(type(o) in _OPTION_TYPES or type(o) is tuple and all(type(w) is int for w in o)
                                for o in options):
        return None
    key = [options, _paths.search_path()]
    for x in tensors:
        if x is None:
            key.append(None)
        elif isinstance(x, torch.Tensor):
            key.append((x.shape, x.stride(), x.dtype, x.device))
        else:
            return None
    return tuple(key)


def _aligned(*tensors):
    """True when every given tensor's data pointer is _launch.ALIGNMENT-byte aligned (the full checks say which is
    not)."""
    return all(x is None or x.data_ptr() % _launch.ALIGNMENT == 0 for x in tensors)


def _remember(signature, repeat):
    if len(_REPEATS) >= _REPEATS_MAX:
        _REPEATS.clear()
    _REPEATS[signature] = repeat


class _CheckedCall(NamedTuple):
    """What a torch call's checks and kernel choice gave; calling it launches on (new) tensors of the same
    signature (_signature)."""
    p: Plan
    kernel: object
    sizes: dict          # every argument but the pointers
    writes_lse: bool

    def __call__(self, q, k, v, out, lse, **cu_seqlens):
        """Launches on these tensors (`cu_seqlens`: varlen's pointers), whose pointers are aligned (_aligned)."""
        p, torch = self.p, sys.modules["torch"]
        if out is None:
            out = torch.empty(p.out_shape, dtype=q.dtype, device=q.device)
        ptrs = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": out.data_ptr()}
        if p.return_lse and lse is None:
            lse = torch.empty(p.lse_shape, dtype=torch.float32, device=q.device)
        if lse is not None:
            ptrs["lse"] = lse.data_ptr()
        elif self.writes_lse:   # a scratch LSE for a kernel that writes one
            ptrs["lse"] = torch.empty(p.lse_shape, dtype=torch.float32, device=q.device).data_ptr()
        for name in ("k", "v"):   # an empty k/v (Sk = 0) may have a null data_ptr; the kernel never reads it
            ptrs[name] = ptrs[name] or ptrs["q"]
        self.kernel.launch(_launch.stream_of(q.device), **self.sizes, **ptrs, **cu_seqlens)
        return (out, lse) if p.return_lse else out


def records_grad(tensors):
    """True when autograd would record a call on these arrays: grad mode is on and a torch tensor requires grad."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


def dense_plan(who, infos, causal, causal_align, scale, window, softcap, return_lse, attention_chunk=0):
    """The Plan of a flash_attn call (or of its backward) on q, k, v of `infos`, checked."""
    dtype, D = _check_inputs(who, infos["q"], infos["k"], infos["v"], 4, "(B, Sq, Hq, D)", "(B, Sk, Hkv, D)")
    (B, Sq, Hq, _), (Bk, Sk, Hkv, _) = infos["q"].shape, infos["k"].shape
    if Bk != B:
        raise InputError(f"{who}: q has batch size {B} but k and v have {Bk}")
    _check_heads(who, Hq, Hkv)
    mask, scale, window, softcap, return_lse = _options(who, D, causal, causal_align, scale, window, softcap,
                                                        return_lse)
    return Plan(who, False, dtype, D, B, Sq, Sk, Hq, Hkv, mask, scale, window, softcap, return_lse,
                (B, Sq, Hq, D), (B, Hq, Sq), chunk=_chunk(who, attention_chunk))


def flash_attn(q, k, v, causal=False, causal_align="bottom_right", scale=None, window=(-1, -1), softcap=0.0,
               return_lse=False, *, sinks=None, alibi_slopes=None, attention_chunk=0, dropout_p=0.0, dropout_seed=None,
               deterministic=False, out=None, lse=None, device=None):
    """Attention forward: O = softmax(scale * Q K^T + mask) V, per query head h with key/value head
    h // (Hq // Hkv) (MHA, GQA, MQA).

    q: (B, Sq, Hq, D); k, v: (B, Sk, Hkv, D); float16 or bfloat16 (all the same); D from 1 to 256 (a multiple of 8
    runs as it is, any other zero-padded to a kernel's head_dim: kernel_head_dim); Hq % Hkv == 0. Any strides with
    unit stride on D (q, k, v may be slices of one packed qkv tensor).
    causal: mask key j from query i when j > i + off, with off = Sk - Sq for causal_align="bottom_right"
    (FlashAttention's convention) or 0 for "top_left" (torch SDPA's is_causal).
    scale: softmax scale (default 1/sqrt(D)). softcap > 0: logits s = scale * q.k become softcap * tanh(s / softcap).
    window (left, right): key j is visible from query i only when i + off - left <= j <= i + off + right (off as
    above; Sk - Sq without causal); -1 leaves that side unbounded. With causal the window combines with the causal
    mask (right is then at most 0 in effect).
    return_lse: also return LSE (B, Hq, Sq) float32, the natural-log log-sum-exp of each row's scaled logits.
    A row without any visible key (Sk = 0, or masked entirely) gives O = 0 and LSE = -inf.
    sinks: (Hq,) float32, unit stride, on q's device: query head h's logit sinks[h] joins each row's softmax
    denominator (gpt-oss's attention sinks): O = sum_j exp(s_j - LSE) v_j with LSE = log(exp(sinks[h]) +
    sum_j exp(s_j)); a row without a visible key gives O = 0 and LSE = sinks[h]. Differentiable in sinks too.
    alibi_slopes: (Hq,) or (B, Hq) float32 (unit stride along the heads): ALiBi, -slope * |i + off - j| added to each
    (capped) logit (off as for the mask); not differentiable (the slopes get no gradient).
    attention_chunk > 0: chunked local attention (Llama 4; FlashAttention-3's attention_chunk): key j is visible from
    query i only within the chunk of that many positions holding i + off, on top of the other rules.
    dropout_p in [0, 1): dropout on the attention probabilities (FlashAttention's): each is dropped with probability
    dropout_p, the kept ones scaled by 1 / (1 - dropout_p) (exactly: the rate is floor(dropout_p * 65536) / 65536, the
    kernels drawing 16-bit values from Philox4x32-10); the LSE is the undropped softmax's. The mask is a function of
    dropout_seed (an int seed, a (seed, offset) pair, or a (2,) int64 array holding them on q's device) and the
    position, so the backward regenerates it (docs/attention.md); None draws a seed on the GPU from torch's CUDA
    generator (repeatable under torch.manual_seed, a fresh draw on each CUDA graph replay); numpy inputs need one.
    out / lse: arrays to write instead of allocating (unit stride on the last dimension).
    torch CUDA tensors run on their GPU, on torch's current stream (asynchronously); numpy arrays run on
    device='sim:<target>'. Every check happens before any device work: errors are tessera.InputError.
    Differentiable: with torch tensors that require grad (grad mode on) autograd records the call and its backward
    runs tessera.flash_attn_bwd (deterministic: its deterministic kernels); the LSE output is not differentiable.
    """
    who = "tessera.flash_attn"
    if pad := head_dim_padding(q, k, v):
        Dqk, Dv, padded = pad
        check_unpadded_outputs(who, [("out", out, (*q.shape[:-1], Dv))], q)
        result = flash_attn(*(_arrays.pad_last(x, padded) for x in (q, k, v)), causal, causal_align,
                            Dqk ** -0.5 if scale is None else scale, window, softcap, return_lse, sinks=sinks,
                            alibi_slopes=alibi_slopes, attention_chunk=attention_chunk, dropout_p=dropout_p,
                            dropout_seed=dropout_seed, deterministic=deterministic, lse=lse, device=device)
        return _unpadded(result, out, Dv, return_lse)
    options = dict(causal=causal, causal_align=causal_align, scale=scale, window=window, softcap=softcap)
    if _arrays.compiling():
        features = dict(sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk, dropout_p=dropout_p,
                        dropout_seed=dropout_seed)
        return _arrays.torch_ops.call_flash_attn(who, q, k, v, (), options, features, return_lse, deterministic, out,
                                                 lse)
    options.update(attention_chunk=attention_chunk)
    dropout_p = dropout_rate(who, dropout_p)
    if records_grad((q, k, v, sinks)):   # before the repeat path: a remembered launch would bypass autograd
        from . import _attention_bwd
        return _attention_bwd.recorded(who, q, k, v, (), options, return_lse, deterministic, out, lse, device,
                                       sinks, alibi_slopes, dropout_p, dropout_seed)
    # (Dropout draws a new seed each call: no repeats.)
    signature = None if sinks is not None or alibi_slopes is not None or dropout_p else _signature(
        (q, k, v, out, lse), (*options.values(), return_lse, device))
    repeat = _REPEATS.get(signature) if signature is not None else None
    if repeat is not None and _aligned(q, k, v, out):
        return repeat(q, k, v, out, lse)
    infos = _describe_all(who, (("q", q), ("k", k), ("v", v)))
    outs = _describe_all(who, (("out", out), ("lse", lse)))
    p = dense_plan(who, infos, **options, return_lse=return_lse)
    _check_outputs(who, p, outs["out"], outs["lse"])
    p = _with_alibi(who, _with_sinks(who, p, infos, sinks), infos, alibi_slopes)
    p = with_dropout(who, p, infos, dropout_p, dropout_seed, q)
    arrays = [(n, i) for n, i in list(infos.items()) + list(outs.items()) if i is not None]
    dev = _launch.runtime_device(who, arrays, device, outputs=("out", "lse"), aligned=("q", "k", "v", "out"))
    return _finish(p, dev, infos, out, lse, dict(arrays), signature)


def _with_sinks(who, p, infos, sinks):
    """p for a call with `sinks` ((Hq,) float32, unit stride: infos["sinks"] added), or p as it is without."""
    if sinks is None:
        return p
    info = _arrays.describe(sinks, f"{who}: sinks")
    if info.shape != (p.Hq,) or info.dtype != "f32" or (p.Hq > 1 and info.strides != (1,)):
        raise InputError(f"{who}: sinks must be a float32 vector of one logit per query head, shape ({p.Hq},) with "
                         f"unit stride, got shape {info.shape}, dtype {_spelled(info.dtype)}, strides {info.strides}")
    infos["sinks"] = info
    return p._replace(sinks=True)


def _with_alibi(who, p, infos, alibi_slopes):
    """p for a call with ALiBi slopes ((Hq,) or (B, Hq) float32, unit stride along the heads: infos["alibi_slopes"]
    added), or p as it is without."""
    if alibi_slopes is None:
        return p
    info = _arrays.describe(alibi_slopes, f"{who}: alibi_slopes")
    if info.shape not in ((p.Hq,), (p.B, p.Hq)) or info.dtype != "f32" or info.strides is None or \
            (p.Hq > 1 and info.strides[-1] != 1) or any(s < 0 for s in info.strides):
        raise InputError(f"{who}: alibi_slopes must be float32 of shape ({p.Hq},) or ({p.B}, {p.Hq}) (a slope per "
                         f"query head, or per sequence and query head) with unit stride along the heads, got shape "
                         f"{info.shape}, dtype {_spelled(info.dtype)}, strides {info.strides}")
    infos["alibi_slopes"] = info
    return p._replace(alibi=True)


DROPOUT_LEVELS = 65536   # the kernels' dropout draws are 16-bit: a probability drops when its draw is below
#                          floor(dropout_p * DROPOUT_LEVELS) (in float32, as the kernels compute it)


def dropout_rate(who, dropout_p):
    """dropout_p checked: a real number in [0, 1), as a float."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p < 1:
        raise InputError(f"{who}: dropout_p must be a number in [0, 1), got {dropout_p!r}")
    return float(dropout_p)


def rng_state(who, q, dropout_seed):
    """The (2,) int64 (seed, offset) array the dropout kernels read, on q's device, for dropout_seed: an int seed
    (offset 0), a (seed, offset) pair of ints in [0, 2^64), or such an array itself; None draws one on the GPU from
    torch's CUDA generator (numpy inputs need a given seed: their backward has to regenerate the mask from it)."""
    torch = sys.modules.get("torch")
    on_torch = torch is not None and isinstance(q, torch.Tensor)
    if dropout_seed is None:
        if not on_torch:
            raise InputError(f"{who}: dropout on numpy arrays needs dropout_seed= (an int, or a (seed, offset) pair): "
                             "the backward regenerates the mask from it")
        return torch.randint(0, 1 << 62, (2,), dtype=torch.int64, device=q.device)
    pair = (dropout_seed, 0) if isinstance(dropout_seed, int) else dropout_seed
    if isinstance(pair, (tuple, list)):
        if len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 64
                                     for x in pair):
            raise InputError(f"{who}: dropout_seed must be an int seed, a (seed, offset) pair of ints in [0, 2**64) or "
                             f"a (2,) int64 array of them, got {dropout_seed!r}")
        words = [x - (1 << 64) if x >= 1 << 63 else x for x in pair]   # as int64
        if on_torch:
            return torch.tensor(words, dtype=torch.int64, device=q.device)
        import numpy as np
        return np.array(words, dtype=np.int64)
    info = _arrays.describe(dropout_seed, f"{who}: dropout_seed")
    if info.shape != (2,) or info.dtype != "int64" or info.strides != (1,):
        raise InputError(f"{who}: dropout_seed as an array must be int64 (seed, offset) of shape (2,) with unit "
                         f"stride, got shape {info.shape}, dtype {_spelled(info.dtype)}, strides {info.strides}")
    return dropout_seed


def with_dropout(who, p, infos, dropout_p, dropout_seed, q):
    """p for a call with dropout rate dropout_p (checked by dropout_rate; 0: p as it is), infos["rng_state"] added:
    the seed and offset as the kernels' four int32 words."""
    if not dropout_p:
        return p
    state = rng_state(who, q, dropout_seed)
    torch = sys.modules.get("torch")
    words = state.view(torch.int32) if torch is not None and isinstance(state, torch.Tensor) else state.view("int32")
    infos["rng_state"] = _arrays.describe(words, f"{who}: dropout_seed")
    return p._replace(dropout_p=dropout_p)


def dropout_keep_scale(dropout_p):
    """The factor a kept probability gets: DROPOUT_LEVELS / (DROPOUT_LEVELS - floor(dropout_p * DROPOUT_LEVELS)), the
    threshold from dropout_p in float32 (as the kernels have it)."""
    import numpy as np
    threshold = int(np.float32(dropout_p) * np.float32(DROPOUT_LEVELS))
    return DROPOUT_LEVELS / (DROPOUT_LEVELS - threshold)


def _unpadded(result, out, D, return_lse):
    """A zero-padded call's result with O cut back to head_dim D (into `out` when given, else a view)."""
    o = result[0] if return_lse else result
    o = o[..., :D] if out is None else _arrays.assign(out, o[..., :D])
    return (o, result[1]) if return_lse else o


def _check_cu_seqlens(who, infos, total_q, total_k, max_q, max_k):
    """cu_seqlens_q/k: int32, 1-D, the same length >= 1; numpy ones also by value (monotone, within the
    tensors, no length above its max_seqlen). Returns B."""
    cq, ck = infos["cu_seqlens_q"], infos["cu_seqlens_k"]
    for name, info in (("cu_seqlens_q", cq), ("cu_seqlens_k", ck)):
        if info.dtype != "int32":
            raise InputError(f"{who}: {name} has dtype {info.dtype}; it must be int32")
        if len(info.shape) != 1 or info.shape[0] < 1:
            raise InputError(f"{who}: {name} must be 1-D with B + 1 >= 1 entries, got shape {info.shape}")
    if cq.shape != ck.shape:
        raise InputError(f"{who}: cu_seqlens_q has {cq.shape[0]} entries and cu_seqlens_k {ck.shape[0]}; "
                         "both must have B + 1")
    if cq.kind == "numpy":
        import numpy as np
        for name, info, total, longest, max_name in (("cu_seqlens_q", cq, total_q, max_q, "max_seqlen_q"),
                                                     ("cu_seqlens_k", ck, total_k, max_k, "max_seqlen_k")):
            values = info.obj.astype(np.int64)
            lengths = np.diff(values)
            if values[0] < 0 or (lengths < 0).any() or (total is not None and values[-1] > total):
                bound = "" if total is None else \
                    f" to at most {total} (the rows of {'q' if name.endswith('q') else 'k and v'})"
                raise InputError(f"{who}: {name} must be non-decreasing offsets from >= 0{bound}, got "
                                 f"{values.tolist()}")
            if lengths.size and lengths.max() > longest:
                raise InputError(f"{who}: {name} has a sequence of length {int(lengths.max())} but {max_name} "
                                 f"is {longest}")
    return cq.shape[0] - 1


def varlen_plan(who, infos, cus, max_seqlen_q, max_seqlen_k, causal, causal_align, scale, window, softcap,
                return_lse, attention_chunk=0, paged=False, seqused_q=None, seqused_k=None):
    """The Plan of a flash_attn_varlen call (or of its backward) on q, k, v of `infos` and the cu_seqlens of `cus`,
    checked; a cu_seqlens without unit stride is replaced in `cus` by a contiguous copy. paged: k and v are a paged
    cache's pages (_add_block_table checks the block table). seqused_q/k: the used lengths (_with_seqused adds them
    to `cus`)."""
    kv_layout = PAGED_KV if paged else "(total_k, Hkv, D)"
    dtype, D = _check_inputs(who, infos["q"], infos["k"], infos["v"], 3, "(total_q, Hq, D)", kv_layout,
                             kv_ndim=4 if paged else 3)
    total_q, Hq, _ = infos["q"].shape
    total_k, Hkv = None if paged else infos["k"].shape[0], infos["k"].shape[-2]
    _check_heads(who, Hq, Hkv)
    try:
        max_q, max_k = operator.index(max_seqlen_q), operator.index(max_seqlen_k)
    except TypeError:
        raise InputError(f"{who}: max_seqlen_q and max_seqlen_k must be integers, got {max_seqlen_q!r} and "
                         f"{max_seqlen_k!r}") from None
    if max_q < 0 or max_k < 0:
        raise InputError(f"{who}: max_seqlen_q and max_seqlen_k must be >= 0, got {max_q} and {max_k}")
    B = _check_cu_seqlens(who, cus, total_q, total_k, max_q, max_k)
    mask, scale, window, softcap, return_lse = _options(who, D, causal, causal_align, scale, window, softcap,
                                                        return_lse)
    for name in ("cu_seqlens_q", "cu_seqlens_k"):   # the kernel reads cu_seqlens[b] and [b + 1]: unit stride
        info = cus[name]
        if info.shape[0] > 1 and info.strides != (1,):
            cus[name] = _arrays.describe(info.obj.contiguous() if info.kind == "torch" else
                                         __import__("numpy").ascontiguousarray(info.obj), f"{who}: {name}")
    p = Plan(who, True, dtype, D, B, max_q, max_k, Hq, Hkv, mask, scale, window, softcap, return_lse,
             (total_q, Hq, D), (Hq, total_q), chunk=_chunk(who, attention_chunk), paged=paged)
    return _with_seqused(who, p, cus, seqused_q, seqused_k)


def _with_seqused(who, p, cus, seqused_q, seqused_k):
    """p with FlashAttention-3's seqused_q / seqused_k: (B,) int32, unit stride, sequence b using only the first
    seqused[b] of its cu_seqlens rows (numpy ones checked by value against them); one not given is the cu_seqlens'
    differences. Both go into `cus`; neither given: p as it is."""
    if seqused_q is None and seqused_k is None:
        return p
    for name, given in (("seqused_q", seqused_q), ("seqused_k", seqused_k)):
        cu = cus["cu_seqlens_" + name[-1]]
        if given is None:
            lengths = cu.obj[1:] - cu.obj[:-1]
            cus[name] = _arrays.describe(_arrays.as_int32(lengths), name)
            continue
        info = _arrays.describe(given, f"{who}: {name}")
        if info.shape != (p.B,) or info.dtype != "int32" or (p.B > 1 and info.strides != (1,)):
            raise InputError(f"{who}: {name} must be int32 of shape ({p.B},) (a length per sequence) with unit "
                             f"stride, got shape {info.shape}, dtype {_spelled(info.dtype)}, strides {info.strides}")
        if info.kind == "numpy" and cu.kind == "numpy":
            import numpy as np
            rows = np.diff(cu.obj.astype(np.int64))
            bad = np.flatnonzero((info.obj < 0) | (info.obj > rows))
            if bad.size:
                b = int(bad[0])
                raise InputError(f"{who}: {name}[{b}] = {int(info.obj[b])} is not within sequence {b}'s "
                                 f"{int(rows[b])} rows (cu_seqlens_{name[-1]}[{b + 1}] - cu_seqlens_{name[-1]}[{b}])")
        cus[name] = info
    return p._replace(seqused=True)


PAGED_KV = "(num_pages, page_size, Hkv, D)"


def page_table_fault(lengths, table, page_size, num_pages, first=None):
    """A host page table against its sequences' key counts (lengths: numpy int64 (B,), table: numpy (B, max_pages)):
    ("length", b) for the first sequence whose count is negative or above its row's pages, else ("page", b, j) for
    the first entry a sequence uses (its first ceil(length / page_size); with first keys `first` (B,), from
    first // page_size) that is not one of num_pages pages, else None."""
    import numpy as np
    bad = np.flatnonzero((lengths < 0) | (lengths > table.shape[1] * page_size))
    if bad.size:
        return "length", int(bad[0])
    entry = np.arange(table.shape[1])[None, :]
    used = entry < -(-lengths // page_size)[:, None]
    if first is not None:
        used &= entry >= (np.minimum(first, lengths) // page_size)[:, None]
    bad = np.argwhere(used & ((table < 0) | (table >= num_pages)))
    return ("page", *(int(x) for x in bad[0])) if bad.size else None


def _add_block_table(who, p, infos, cus, block_table):
    """infos["block_table"] added for a paged plan p: (B, max_pages) int32 with unit stride along a row; numpy
    tables and cu_seqlens_k are checked by value (page_table_fault), torch ones are not (that would
    synchronise)."""
    info = _arrays.describe(block_table, f"{who}: block_table")
    if len(info.shape) != 2 or info.shape[0] != p.B or info.dtype != "int32" or info.strides is None or \
            (info.shape[1] > 1 and info.strides[1] != 1):
        raise InputError(f"{who}: block_table must be int32 ({p.B}, max_pages), a row of page indices per sequence "
                         f"with unit stride along it, got shape {info.shape}, dtype {_spelled(info.dtype)}, strides "
                         f"{info.strides}")
    num_pages, page_size = infos["k"].shape[:2]
    if page_size == 0:
        raise InputError(f"{who}: k and v are pages {PAGED_KV} with page_size 0")
    if info.kind == "numpy" and cus["cu_seqlens_k"].kind == "numpy":
        import numpy as np
        lengths = np.diff(cus["cu_seqlens_k"].obj.astype(np.int64))
        fault = page_table_fault(lengths, info.obj, page_size, num_pages)
        if fault and fault[0] == "length":
            b = fault[1]
            raise InputError(f"{who}: sequence {b} has {lengths[b]} keys but its block_table row holds "
                             f"{info.shape[1]} pages of {page_size} ({info.shape[1] * page_size} keys)")
        if fault:
            b = fault[1]
            used = info.obj[b, :-(-int(lengths[b]) // page_size)]
            raise InputError(f"{who}: block_table row {b} names pages {used.tolist()}; k and v have "
                             f"{num_pages} (0 to {num_pages - 1})")
    infos["block_table"] = info


def flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                      causal_align="bottom_right", scale=None, window=(-1, -1), softcap=0.0, return_lse=False, *,
                      sinks=None, alibi_slopes=None, attention_chunk=0, block_table=None, dropout_p=0.0,
                      dropout_seed=None, seqused_q=None, seqused_k=None, deterministic=False, out=None, lse=None,
                      device=None):
    """flash_attn over packed variable-length sequences: q (total_q, Hq, D), k and v (total_k, Hkv, D); sequence
    b is rows cu_seqlens_q[b]:cu_seqlens_q[b+1] of q against rows cu_seqlens_k[b]:cu_seqlens_k[b+1] of k and v.
    cu_seqlens_q/k: int32 (B + 1), on the same device as q; max_seqlen_q/k: the longest sequence of each (ints).
    Masks, window, softcap, sinks, ALiBi (alibi_slopes (B, Hq): per sequence), attention_chunk and dropout as in
    flash_attn, per sequence (off = its Sk - its Sq; dropout's positions within the sequence). Returns O (total_q, Hq, D),
    and with return_lse also LSE (Hq, total_q) float32. A zero-length key sequence gives O = 0, LSE = -inf for
    its queries. Rows of q outside every sequence are not written. numpy cu_seqlens are checked by value;
    torch ones are not (that would synchronise): max_seqlen_q/k must be at least every length.
    block_table (B, max_pages) int32: k and v are a paged cache (num_pages, page_size, Hkv, D) (any strides with unit
    stride on D), sequence b's key j at token j % page_size of page block_table[b, j // page_size], its length
    from cu_seqlens_k (FlashAttention's varlen call with a block_table: chunked prefill against vLLM's cache);
    not differentiable (FlashAttention has no such backward either).
    seqused_q / seqused_k (B,) int32 (FlashAttention-3's): sequence b uses only its first seqused_q[b] query rows and
    seqused_k[b] keys (off = seqused_k[b] - seqused_q[b]); its other rows are not read, and O and LSE there are not
    written. One not given is cu_seqlens' lengths.
    Differentiable as flash_attn is (its backward: tessera.flash_attn_varlen_bwd).
    """
    who = "tessera.flash_attn_varlen"
    if pad := head_dim_padding(q, k, v):
        Dqk, Dv, padded = pad
        check_unpadded_outputs(who, [("out", out, (*q.shape[:-1], Dv))], q)
        result = flash_attn_varlen(*(_arrays.pad_last(x, padded) for x in (q, k, v)), cu_seqlens_q, cu_seqlens_k,
                                   max_seqlen_q, max_seqlen_k, causal, causal_align,
                                   Dqk ** -0.5 if scale is None else scale, window, softcap, return_lse,
                                   sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk,
                                   block_table=block_table, dropout_p=dropout_p, dropout_seed=dropout_seed,
                                   seqused_q=seqused_q, seqused_k=seqused_k, deterministic=deterministic, lse=lse,
                                   device=device)
        return _unpadded(result, out, Dv, return_lse)
    options = dict(causal=causal, causal_align=causal_align, scale=scale, window=window, softcap=softcap)
    paged = block_table is not None
    if paged and records_grad((q, k, v, sinks)):
        raise InputError(f"{who}: a paged K/V cache (block_table) has no backward (FlashAttention has none either): "
                         "call it under torch.no_grad(), or on tensors that do not require grad")
    if _arrays.compiling():
        features = dict(sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk, dropout_p=dropout_p,
                        dropout_seed=dropout_seed, block_table=block_table, seqused_q=seqused_q,
                        seqused_k=seqused_k)
        return _arrays.torch_ops.call_flash_attn(who, q, k, v, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
                                                 options, features, return_lse, deterministic, out, lse)
    options.update(attention_chunk=attention_chunk)
    if seqused_q is not None or seqused_k is not None:
        options.update(seqused_q=seqused_q, seqused_k=seqused_k)
    dropout_p = dropout_rate(who, dropout_p)
    if records_grad((q, k, v, sinks)):
        from . import _attention_bwd
        return _attention_bwd.recorded(who, q, k, v, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
                                       options, return_lse, deterministic, out, lse, device, sinks, alibi_slopes,
                                       dropout_p, dropout_seed)
    infos = _describe_all(who, (("q", q), ("k", k), ("v", v)))
    cus = _describe_all(who, (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)))
    outs = _describe_all(who, (("out", out), ("lse", lse)))
    p = varlen_plan(who, infos, cus, max_seqlen_q, max_seqlen_k, **options, return_lse=return_lse, paged=paged)
    _check_outputs(who, p, outs["out"], outs["lse"])
    p = _with_alibi(who, _with_sinks(who, p, infos, sinks), infos, alibi_slopes)
    p = with_dropout(who, p, infos, dropout_p, dropout_seed, q)
    if paged:
        _add_block_table(who, p, infos, cus, block_table)
    arrays = [(n, i) for n, i in list(infos.items()) + list(cus.items()) + list(outs.items()) if i is not None]
    dev = _launch.runtime_device(who, arrays, device, outputs=("out", "lse"), aligned=("q", "k", "v", "out"))
    infos.update(cus)
    return _finish(p, dev, infos, out, lse, dict(arrays))

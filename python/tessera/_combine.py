"""tessera.attn_combine: the merge of attention results computed over parts of the keys (split-KV decoding, context
parallelism) with the attn_combine kernels (docs/decode.md), FlashAttention-3's flash_attn_combine, on torch CUDA
tensors or on numpy arrays through the simulator."""
from . import _arrays, _attention, _launch, _ondemand
from ._errors import InputError, KernelNotFoundError

OUT_DTYPES = ("f32", "f16", "bf16")
MAX_HEAD_DIM = 1024   # the directive's limit
_ARGS = ("out_partial", "lse_partial", "o", "lse")   # the caller's arrays, in the ABI's names


def directive_for(dtype, D):
    """The directive that compiles the attn_combine kernel for output dtype `dtype` and head_dim D."""
    return f"tessera.attn_combine @combine_{dtype}_d{D} {{dtype = {dtype}, head_dim = {D}}}"


def _find(bundle, dtype, D):
    kernel = bundle.find("attn_combine", dtype=dtype, head_dim=D)
    if kernel is None:
        names = [k.name for k in bundle.kernels.values() if k.directive == "attn_combine"]
        raise KernelNotFoundError(f"bundle {bundle.directory} ({bundle.target}) has no attn_combine kernel with "
                                  f"dtype={dtype} head_dim={D} (attn_combine kernels: {', '.join(names) or 'none'}); "
                                  f"this directive compiles one: {directive_for(dtype, D)}")
    return kernel


def _check(who, out_partial, lse_partial, out, out_dtype):
    """(infos with the caller's arrays as 5-D / 4-D (split, batch, token, head[, d]) views, the output dtype)."""
    infos = _attention._describe_all(who, (("out_partial", out_partial), ("lse_partial", lse_partial),
                                           ("out", out)))
    part, lse = infos["out_partial"], infos["lse_partial"]
    if len(part.shape) not in (4, 5):
        raise InputError(f"{who}: out_partial must be (num_splits, batch, seqlen, nheads, headdim) or (num_splits, "
                         f"total_q, nheads, headdim), got shape {part.shape}")
    if lse.shape != part.shape[:-1]:
        raise InputError(f"{who}: lse_partial must be out_partial's shape without headdim, "
                         f"{part.shape[:-1]}, got {lse.shape}")
    for name, info in (("out_partial", part), ("lse_partial", lse)):
        if info.dtype != "f32":
            raise InputError(f"{who}: {name} has dtype {_attention._spelled(info.dtype)}; it must be float32")
        if info.strides is None:
            raise InputError(f"{who}: {name} has strides {info.obj.strides} (bytes) that are not whole elements")
    _attention._check_head_dim_stride(who, "out_partial", part)
    D = part.shape[-1]
    if not 1 <= D <= MAX_HEAD_DIM:
        raise InputError(f"{who}: headdim {D} is not supported (1 to {MAX_HEAD_DIM})")
    given = infos["out"]
    dtype = _arrays.dtype_name(out_dtype) if out_dtype is not None else (given.dtype if given else "f32")
    if dtype not in OUT_DTYPES:
        raise InputError(f"{who}: out_dtype {out_dtype!r} is not supported (float32, float16, bfloat16)")
    if given is not None:
        _attention._check_output(who, "out", given, part.shape[1:], dtype)
    return infos, dtype


def attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, device=None):
    """Merges attention results computed over parts of the keys (FlashAttention-3's flash_attn_combine): part s of
    each row gives its output O_s normalised over its keys and its log-sum-exp LSE_s; the row's result is
    O = sum_s w_s O_s / sum_s w_s with w_s = exp(LSE_s - max LSE) and LSE = max LSE + ln sum_s w_s.

    out_partial: (num_splits, batch, seqlen, nheads, headdim) float32, or (num_splits, total_q, nheads, headdim)
    for packed sequences; any strides with unit stride on headdim. lse_partial: (num_splits, batch, seqlen, nheads)
    (or (num_splits, total_q, nheads)) float32, natural log, any strides (-inf: the part saw no key; its output is
    never read). out_dtype: float32 (default, or out's), float16 or bfloat16 (torch/numpy dtype or name); out: an
    array of out_partial's shape without num_splits to write. headdim 1 to 1024. Returns (out, lse): out
    (batch, seqlen, nheads, headdim), lse (batch, seqlen, nheads) float32 laid out (batch, nheads, seqlen) as
    FlashAttention-3's; a row whose every part is empty gives O = 0, LSE = -inf. torch CUDA tensors run on the
    current stream (asynchronous, capturable); numpy arrays on device='sim:<target>'. The kernel comes from the
    device's bundle, or from the directive the KernelNotFoundError names, compiled on demand."""
    who = "tessera.attn_combine"
    if _arrays.compiling():
        return _arrays.torch_ops.call_attn_combine(out_partial, lse_partial, out, out_dtype)
    _arrays.refuse_grad(who, (("out_partial", out_partial), ("lse_partial", lse_partial)))
    infos, dtype = _check(who, out_partial, lse_partial, out, out_dtype)
    part = infos["out_partial"]
    D = part.shape[-1]
    dev = _launch.runtime_device(who, [(n, i) for n, i in infos.items() if i is not None], device,
                                 outputs=("out",), aligned=())
    kernel = _ondemand.lookup(dev, ("attn_combine", dtype, D), lambda bundle: _find(bundle, dtype, D),
                              directive_for(dtype, D))
    rows = part.shape[1:-1]                  # (batch, seqlen, nheads) or (total_q, nheads)
    if out is None:
        out = _arrays.empty(part, rows + (D,), dtype)
    lse = _arrays.empty(part, rows[:-2] + (rows[-1], rows[-2]), "f32")   # (batch, nheads, seqlen) storage
    lse = lse.transpose(-1, -2) if part.kind == "torch" else lse.swapaxes(-1, -2)
    infos["o"], infos["lse"] = _arrays.describe(out, "out"), _arrays.describe(lse, "lse")
    del infos["out"]
    packed = len(part.shape) == 4            # (split, total_q, H, D): one batch item of total_q tokens
    B, S, H = ((1,) if packed else ()) + rows
    if 0 in (B, S, H, D):
        return out, lse
    values = dict(num_splits=part.shape[0], B=B, S=S, H=H)
    for name in _ARGS:
        axes = ("split", "b", "s", "h") if name.endswith("partial") else ("b", "s", "h")
        strides = list(infos[name].strides)
        if packed:                           # no batch stride
            strides.insert(1 if name.endswith("partial") else 0, 0)
        values.update({f"{name}_stride_{a}": s for a, s in zip(axes, strides)})
    if part.kind == "numpy":
        with _launch.SimMemory(dev) as mem:
            ptrs = {name: mem.put(infos[name], copy=name.endswith("partial")) for name in _ARGS}
            kernel.launch(None, **ptrs, **values)
            dev.synchronize()
            mem.get(infos["o"])
            mem.get(infos["lse"])
    else:
        kernel.launch(_launch.stream_of(part.obj.device), **{name: infos[name].ptr for name in _ARGS}, **values)
    return out, lse

"""tessera.flash_attn_bwd and tessera.flash_attn_varlen_bwd: attention backward with the flash_attn_bwd kernel sets
(docs/flash_attn-abi.md), on torch CUDA tensors or on numpy arrays through the simulator; and the
torch.autograd.Functions through which autograd records tessera.flash_attn / flash_attn_varlen."""
import functools
import sys

from . import _arrays, _attention, _launch, _ondemand
from ._errors import InputError, KernelNotFoundError

RUNTIME_FEATURES = ("sliding_window", "softcap")   # in every kernel set directive_for compiles
FEATURES = RUNTIME_FEATURES + ("attention_chunk",)   # unit attributes a kernel set may have beyond what a call needs
_SHORT = {"deterministic": "det", "attention_chunk": "chunk", "dropout": "drop"}   # in on-demand kernel set names
_ARGS = {"q": "q", "k": "k", "v": "v", "out": "o", "dout": "do", "lse": "lse"}   # the caller's names -> the ABI's
GRADIENTS = ("dq", "dk", "dv")
_STRIDED = ("q", "k", "v", "o", "do", "dq", "dk", "dv")        # the ABI's tensors with stride arguments
_ALIGNED = ("q", "k", "v", "out", "dout", "dq", "dk", "dv")    # read or written with vector accesses (not lse)


# ---- Kernel choice ------------------------------------------------------------------------------
def variant(p, deterministic):
    """What a kernel set must match exactly for plan p."""
    return dict(dtype=p.dtype, head_dim=p.D, mask=p.mask, varlen=p.varlen, deterministic=deterministic,
                alibi=p.alibi, dropout=p.dropout_p > 0, seqused=p.seqused)


def _needed(p):
    return {"sliding_window": p.window != (-1, -1), "softcap": p.softcap > 0, "attention_chunk": p.chunk > 0}


def directive_for(v, needed):
    """The directive that compiles a kernel set of variant v (a `variant` dict), with every runtime feature so that
    it serves any window and softcap, as the default forward kernels do, and the chunk where `needed` has it."""
    optional = [a for a in ("varlen", "seqused", "alibi", "dropout", "deterministic") if v[a]]
    optional += ["attention_chunk"] if needed["attention_chunk"] else []
    name = f"fa_bwd_{v['dtype']}_d{v['head_dim']}_{_attention.SHORT_MASKS[v['mask']]}"
    name += "".join(f"_{_SHORT.get(a, a)}" for a in optional)
    attributes = [f"dtype = {v['dtype']}", f"head_dim = {v['head_dim']}", f"mask = #tessera.mask<{v['mask']}>",
                  *RUNTIME_FEATURES, *optional]
    return f"tessera.flash_attn_bwd @{name} {{{', '.join(attributes)}}}"


def _serves(kernel_set, v, needed):
    a = kernel_set.attributes
    have = dict(dtype=a.get("dtype"), head_dim=a.get("head_dim"), mask=a.get("mask", "none"),
                varlen=bool(a.get("varlen", False)), deterministic=bool(a.get("deterministic", False)),
                alibi=bool(a.get("alibi", False)), dropout=bool(a.get("dropout", False)),
                seqused=bool(a.get("seqused", False)))
    return kernel_set.directive == "flash_attn_bwd" and have == v and \
        all(a.get(f, False) for f, want in needed.items() if want)


def find_kernel_set(bundle, p, deterministic):
    """The flash_attn_bwd kernel set of `bundle` for plan p: its dtype, head_dim, mask, varlen and deterministic,
    with every feature p uses (a set with more features is fine: unused ones get neutral values); the one with the
    fewest extra features wins. KernelNotFoundError names the variant and the directive that would add it."""
    v, needed = variant(p, deterministic), _needed(p)
    fits = [(sum(bool(s.attributes.get(f, False)) for f in FEATURES), s.name, s)
            for s in bundle.kernel_sets.values() if _serves(s, v, needed)]
    if not fits:
        wanted = " ".join(f"{k}={x}" for k, x in v.items() if k not in ("alibi", "dropout", "seqused") or x) + \
            "".join(f" {f}" for f, w in needed.items() if w)
        names = [s.name for s in bundle.kernel_sets.values() if s.directive == "flash_attn_bwd"]
        raise KernelNotFoundError(f"bundle {bundle.directory} ({bundle.target}) has no flash_attn_bwd kernel set "
                                  f"with {wanted} (flash_attn_bwd kernel sets: {', '.join(names) or 'none'}); "
                                  f"this directive compiles one: {directive_for(v, needed)}")
    return min(fits)[2]


def kernel_set_for(dev, p, deterministic):
    """find_kernel_set on the device's bundle, remembered per bundle and variant; where the bundle lacks it, the set
    directive_for compiles on demand (_ondemand)."""
    key = ("flash_attn_bwd", *variant(p, deterministic).values(), *_needed(p).values())
    return _ondemand.lookup(dev, key, lambda bundle: find_kernel_set(bundle, p, deterministic),
                            directive_for(variant(p, deterministic), _needed(p)))


# ---- Checks, empty sizes, launch ----------------------------------------------------------------
def _check_input(who, name, info, shape, dtype):
    """out, dout, lse: the shape and dtype the forward gives them, unit stride on the last dimension (head_dim; for
    lse the query rows), other strides free."""
    _attention._check_shape_dtype(who, name, info, shape, dtype)
    if info.strides is None:
        raise InputError(f"{who}: {name} has strides {info.obj.strides} (bytes) that are not whole elements")
    if name != "lse":
        _attention._check_head_dim_stride(who, name, info)
    elif shape[-1] > 1 and info.strides[-1] != 1 and all(shape):
        raise InputError(f"{who}: lse has strides {info.strides} (elements); it needs unit stride on its last "
                         "dimension (the query rows), as the forward writes it")


def _stride_divisors(kernel_set):
    """{ABI tensor name: element count} from the `divisible` rules of the set's kernels on stride arguments: a kernel
    that streams a tensor with asynchronous 16-byte copies (sm_90) needs each of its strides a multiple of 8."""
    divisors = {}
    for kernel in kernel_set.kernels:
        for rule in kernel.info.get("divisible", ()):
            tensor, _, axis = rule["arg"].rpartition("_stride_")
            if tensor and axis and isinstance(rule["by"], int):
                divisors[tensor] = max(divisors.get(tensor, 1), rule["by"])
    return divisors


def _rows_aligned(p, kernel_set, infos):
    """infos with a fresh contiguous copy of each input whose strides the kernel set cannot take (_stride_divisors):
    its strides are multiples of head_dim, itself a multiple of 8. (A fresh one: .contiguous() keeps a tensor whose
    odd strides are on dimensions of extent 1.)"""
    caller = {abi: name for name, abi in _ARGS.items()}
    out = dict(infos)
    for abi, by in _stride_divisors(kernel_set).items():
        name = caller.get(abi)
        info = out.get(name)
        if info is None or all(s % by == 0 for s in _attention._strides(info)):
            continue
        if info.kind == "torch":
            copy = info.obj.clone(memory_format=_arrays._torch().contiguous_format)
        else:
            copy = __import__("numpy").array(info.obj, order="C", copy=True)
        out[name] = _arrays.describe(copy, f"{p.who}: {name}")
    return out


def _no_gradient(p, kv_shape):
    """True when no query sees any key (no batch item, query row, key row or query head): every gradient is 0."""
    return 0 in (p.B, p.Sq, p.Sk, p.Hq, p.out_shape[0], kv_shape[0])


def _backward(p, infos, cus, grads, deterministic, device):
    """What flash_attn_bwd and flash_attn_varlen_bwd share once q, k, v (and cu_seqlens) gave plan p: the checks of
    out, dout, lse and the gradients, the kernel set, empty sizes, launch. Returns (dq, dk, dv)."""
    who, kv_shape = p.who, infos["k"].shape
    for name in ("out", "dout"):
        _check_input(who, name, infos[name], p.out_shape, p.dtype)
    _check_input(who, "lse", infos["lse"], p.lse_shape, "f32")
    shapes = {"dq": p.out_shape, "dk": kv_shape, "dv": kv_shape}
    for name, info in grads.items():
        if info is not None:
            _attention._check_output(who, name, info, shapes[name], p.dtype)
    arrays = [(n, i) for n, i in {**infos, **cus, **grads}.items() if i is not None]
    dev = _launch.runtime_device(who, arrays, device, outputs=GRADIENTS, aligned=_ALIGNED)
    kernel_set = kernel_set_for(dev, p, bool(deterministic))
    # Nothing visible: the gradients are zeros, filled here (the kernels would need every empty case right: dK, dV
    # for keys no query sees, dQ when Sk = 0). New varlen gradients start at zero too: rows outside every sequence
    # belong to no kernel, and their gradient is 0.
    nothing = _no_gradient(p, kv_shape)
    new = _arrays.zeros if nothing or p.varlen else _arrays.empty
    results = []
    for name in GRADIENTS:
        if grads[name] is None:
            results.append(new(infos["q"], shapes[name], p.dtype))
            grads[name] = _arrays.describe(results[-1], f"{who}: {name}")
        else:
            results.append(grads[name].obj)
            if nothing:
                _arrays.fill(grads[name], 0)
    if not nothing:
        infos = _rows_aligned(p, kernel_set, infos)
        _run(p, dev, kernel_set, {**{_ARGS[n]: infos[n] for n in _ARGS}, **cus, **grads})
    return tuple(results)


def _run(p, dev, kernel_set, arrays):
    """Launches the kernel set on `arrays` (by ABI name, none empty): torch on the current stream (asynchronous, no
    allocation but the runtime's per-stream workspaces), numpy through simulator memory."""
    lse_strides = _attention._lse_strides(p, arrays["lse"])
    q = arrays["q"]
    if q.kind == "numpy":
        with _launch.SimMemory(dev) as mem:
            ptrs = {name: mem.put(info) for name, info in arrays.items()}
            kernel_set.launch(None, **_attention._values(p, ptrs, arrays, lse_strides, kernel_set, _STRIDED))
            dev.synchronize()
            for name in GRADIENTS:
                mem.get(arrays[name])
        return
    ptrs = {name: info.ptr for name, info in arrays.items()}
    kernel_set.launch(_launch.stream_of(q.obj.device),
                      **_attention._values(p, ptrs, arrays, lse_strides, kernel_set, _STRIDED))


def _describe(who, q, k, v, out, dout, lse, dq, dk, dv):
    _arrays.refuse_grad(who, (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse)))
    infos = _attention._describe_all(who, (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse)))
    return infos, _attention._describe_all(who, (("dq", dq), ("dk", dk), ("dv", dv)))


def flash_attn_bwd(q, k, v, out, dout, lse, causal=False, causal_align="bottom_right", scale=None, window=(-1, -1),
                   softcap=0.0, deterministic=False, *, sinks=None, alibi_slopes=None, attention_chunk=0,
                   dropout_p=0.0, dropout_seed=None, dq=None, dk=None, dv=None, device=None):
    """Attention backward of tessera.flash_attn: (dq, dk, dv) from the forward's q, k, v, its output `out`
    (B, Sq, Hq, D), the upstream gradient `dout` (out's shape and dtype) and the forward's LSE (B, Hq, Sq) float32
    (return_lse=True), with the forward's causal, causal_align, scale, window, softcap, alibi_slopes and
    attention_chunk. dq is (B, Sq, Hq, D),
    dk and dv (B, Sk, Hkv, D), summed over the query heads of a GQA group. deterministic: the kernels without
    floating-point atomics (bitwise repeatable). dq / dk / dv: arrays to write instead of allocating.
    torch CUDA tensors run on torch's current stream (asynchronous, capturable in a CUDA graph after one call outside
    the capture); numpy arrays on device='sim:<target>'. Every check comes before any device work (InputError, or
    KernelNotFoundError naming the directive that would add the missing kernel set).
    sinks: the forward's (Hq,) float32 sink logits (its LSE includes them); returns (dq, dk, dv, dsinks) then, dsinks
    (Hq,) float32 = -sum over the rows of exp(sinks[h] - LSE) * rowsum(dout * out).
    dropout_p, dropout_seed: the forward's (its seed and offset given, never None): the kernels regenerate its mask.
    """
    who = "tessera.flash_attn_bwd"
    if pad := _padding(who, q, k, v, out, dout, dq, dk, dv):
        Dqk, Dv, padded = pad
        grads = flash_attn_bwd(*(_arrays.pad_last(x, padded) for x in (q, k, v, out, dout)), lse, causal,
                               causal_align, Dqk ** -0.5 if scale is None else scale, window, softcap, deterministic,
                               sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk,
                               dropout_p=dropout_p, dropout_seed=dropout_seed,
                               **_padded_grads((dq, dk, dv), padded), device=device)
        return _unpadded_grads(grads, (dq, dk, dv), (Dqk, Dqk, Dv))
    if _arrays.compiling():
        options = dict(causal=causal, causal_align=causal_align, scale=scale, window=window, softcap=softcap)
        features = dict(sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk, dropout_p=dropout_p,
                        dropout_seed=dropout_seed)
        return _arrays.torch_ops.call_flash_attn_bwd(who, q, k, v, out, dout, lse, (), options, features,
                                                     deterministic, (dq, dk, dv))
    infos, grads = _describe(who, q, k, v, out, dout, lse, dq, dk, dv)
    p = _attention.dense_plan(who, infos, causal, causal_align, scale, window, softcap, True,   # True: LSE given
                              attention_chunk)
    extras = {}
    p = _attention._with_alibi(who, _attention._with_sinks(who, p, {}, sinks), extras, alibi_slopes)
    p = _with_forward_dropout(who, p, extras, dropout_p, dropout_seed, q)
    return _with_sink_gradient(_backward(p, infos, extras, grads, deterministic, device), p, out, dout, lse, sinks)


def flash_attn_varlen_bwd(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          causal=False, causal_align="bottom_right", scale=None, window=(-1, -1), softcap=0.0,
                          deterministic=False, *, sinks=None, alibi_slopes=None, attention_chunk=0, dropout_p=0.0,
                          dropout_seed=None, seqused_q=None, seqused_k=None, dq=None, dk=None, dv=None,
                          device=None):
    """flash_attn_bwd for tessera.flash_attn_varlen: q, out, dout, dq (total_q, Hq, D); k, v, dk, dv
    (total_k, Hkv, D); lse (Hq, total_q); cu_seqlens, max_seqlen and seqused_q/k as the forward had them. New
    gradients start at zero (rows outside every sequence, or past its seqused, get 0); given ones keep those rows.
    """
    who = "tessera.flash_attn_varlen_bwd"
    if pad := _padding(who, q, k, v, out, dout, dq, dk, dv):
        Dqk, Dv, padded = pad
        grads = flash_attn_varlen_bwd(*(_arrays.pad_last(x, padded) for x in (q, k, v, out, dout)), lse,
                                      cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, causal_align,
                                      Dqk ** -0.5 if scale is None else scale, window, softcap, deterministic,
                                      sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk,
                                      dropout_p=dropout_p, dropout_seed=dropout_seed, seqused_q=seqused_q,
                                      seqused_k=seqused_k, **_padded_grads((dq, dk, dv), padded), device=device)
        return _unpadded_grads(grads, (dq, dk, dv), (Dqk, Dqk, Dv))
    if _arrays.compiling():
        options = dict(causal=causal, causal_align=causal_align, scale=scale, window=window, softcap=softcap)
        features = dict(sinks=sinks, alibi_slopes=alibi_slopes, attention_chunk=attention_chunk, dropout_p=dropout_p,
                        dropout_seed=dropout_seed, seqused_q=seqused_q, seqused_k=seqused_k)
        return _arrays.torch_ops.call_flash_attn_bwd(who, q, k, v, out, dout, lse, (cu_seqlens_q, cu_seqlens_k,
                                                     max_seqlen_q, max_seqlen_k), options, features, deterministic,
                                                     (dq, dk, dv))
    infos, grads = _describe(who, q, k, v, out, dout, lse, dq, dk, dv)
    cus = _attention._describe_all(who, (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)))
    p = _attention.varlen_plan(who, infos, cus, max_seqlen_q, max_seqlen_k, causal, causal_align, scale, window,
                               softcap, True, attention_chunk, seqused_q=seqused_q, seqused_k=seqused_k)
    p = _attention._with_alibi(who, _attention._with_sinks(who, p, {}, sinks), cus, alibi_slopes)
    p = _with_forward_dropout(who, p, cus, dropout_p, dropout_seed, q)
    return _with_sink_gradient(_backward(p, infos, cus, grads, deterministic, device), p, out, dout, lse, sinks,
                               cu_seqlens_q)


def _with_forward_dropout(who, p, extras, dropout_p, dropout_seed, q):
    """_attention.with_dropout for a backward (the rng_state into `extras`): the forward's seed must be given."""
    dropout_p = _attention.dropout_rate(who, dropout_p)
    check_forward_seed(who, dropout_p, dropout_seed)
    return _attention.with_dropout(who, p, extras, dropout_p, dropout_seed, q)


def check_forward_seed(who, dropout_p, dropout_seed):
    """A backward with dropout needs the forward's seed (None would draw a new mask)."""
    if dropout_p and dropout_seed is None:
        raise InputError(f"{who}: dropout_p = {dropout_p} needs the forward's dropout_seed (its seed and offset): the "
                         "backward regenerates the forward's mask from it")


def _with_sink_gradient(grads, p, out, dout, lse, sinks, cu_seqlens_q=None):
    """grads, and with sinks (dq, dk, dv, dsinks): dsinks[h] = -sum over the rows r of head h of
    exp(sinks[h] - LSE[r]) * rowsum(dout[r] * out[r]), in float32 (varlen: the rows inside a sequence)."""
    if sinks is None:
        return grads
    xp, f32 = _arrays.library(out), _arrays.as_float32
    delta = (f32(dout) * f32(out)).sum(-1)                                       # (B, Sq, Hq) or (total_q, Hq)
    if p.varlen:
        weights = xp.exp(f32(sinks)[:, None] - f32(lse)) * delta.T               # (Hq, total_q)
        inside = _arrays.arange(delta.shape[0], out) < cu_seqlens_q[-1]           # rows outside every sequence: 0
        dsinks = -xp.where(inside[None, :], weights, 0.0 * weights).sum(1)
    else:
        weights = xp.exp(f32(sinks)[None, :, None] - f32(lse)) * xp.moveaxis(delta, -1, 1)
        dsinks = -weights.sum((0, 2))
    return (*grads, dsinks)


def _padding(who, q, k, v, out, dout, dq, dk, dv):
    """_attention.head_dim_padding of q, k, v, with out and dout in V's head_dim and the given gradients in their
    inputs' shapes checked first (the padded call sees only padded arrays)."""
    pad = _attention.head_dim_padding(q, k, v)
    if pad:
        Dv = pad[1]
        like_o = (*q.shape[:-1], Dv)
        _attention.check_unpadded_outputs(who, [("out", out, like_o), ("dout", dout, like_o), ("dq", dq, q.shape),
                                                ("dk", dk, k.shape), ("dv", dv, v.shape)], q)
    return pad


def _padded_grads(given, size):
    """The given gradient arrays zero-padded to head_dim `size`, by name (the rows a varlen call leaves keep theirs)."""
    return {name: _arrays.pad_last(x, size) for name, x in zip(("dq", "dk", "dv"), given) if x is not None}


def _unpadded_grads(grads, given, dims):
    """A zero-padded backward's (dq, dk, dv) cut back to their head dims `dims`, into the given arrays where there are
    some; dsinks, when it follows them, as it is."""
    cut = tuple(g[..., :D] if into is None else _arrays.assign(into, g[..., :D])
                for g, into, D in zip(grads, given, dims))
    return cut + tuple(grads[3:])


# ---- Autograd -----------------------------------------------------------------------------------
_READY = set()        # signatures (_attention._signature) of recorded calls whose backward kernel set was found
_READY_MAX = 1024


def _check_backward_exists(who, q, k, v, varlen_args, options, deterministic, device, alibi, dropout_p):
    """KernelNotFoundError (or the forward's InputError) before the forward of a recorded call runs when the bundle
    has no kernel set for its backward: a training step would otherwise fail only after its forward. Once per call
    signature."""
    signature = _attention._signature((q, k, v, *varlen_args[:2]),
                                      (*options.values(), *varlen_args[2:], deterministic, device, alibi,
                                       dropout_p))
    if signature is not None and signature in _READY:
        return
    infos = _attention._describe_all(who, (("q", q), ("k", k), ("v", v)))
    cus = _attention._describe_all(who, zip(("cu_seqlens_q", "cu_seqlens_k"), varlen_args[:2]))
    if varlen_args:
        p = _attention.varlen_plan(who, infos, cus, *varlen_args[2:], **options, return_lse=True)
    else:
        p = _attention.dense_plan(who, infos, **options, return_lse=True)
    p = p._replace(alibi=alibi, dropout_p=dropout_p)   # (the forward checks the slopes and the seed)
    dev = _launch.runtime_device(who, list({**infos, **cus}.items()), device, aligned=("q", "k", "v"))
    kernel_set_for(dev, p, deterministic)
    if signature is not None:
        if len(_READY) >= _READY_MAX:
            _READY.clear()
        _READY.add(signature)


def recorded(who, q, k, v, varlen_args, options, return_lse, deterministic, out, lse, device, sinks=None,
             alibi_slopes=None, dropout_p=0.0, dropout_seed=None):
    """flash_attn (varlen_args empty) or flash_attn_varlen (varlen_args: cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    max_seqlen_k) as a torch.autograd.Function, for a call autograd records. With dropout (dropout_p > 0) the seed
    is drawn here, once (_attention.rng_state), and both directions read it."""
    if out is not None or lse is not None:
        torch = sys.modules["torch"]
        names = [n for n, x in (("q", q), ("k", k), ("v", v)) if isinstance(x, torch.Tensor) and x.requires_grad]
        raise InputError(f"{who}: out= and lse= are not supported when autograd records the call "
                         f"({', '.join(names)} {'requires' if len(names) == 1 else 'require'} grad): the backward "
                         "needs outputs of its own; leave them out, or call under torch.no_grad()")
    deterministic = bool(deterministic)
    _check_backward_exists(who, q, k, v, varlen_args, options, deterministic, device, alibi_slopes is not None,
                           dropout_p)
    dropout = dict(dropout_p=dropout_p, dropout_seed=_attention.rng_state(who, q, dropout_seed)) if dropout_p else {}
    o, lse = _functions()[bool(varlen_args)].apply(q, k, v, sinks, alibi_slopes, *varlen_args, options, dropout,
                                                    deterministic, device)
    return (o, lse) if return_lse else o


def _refuse_create_graph(who):
    """Inside a backward, grad mode is on only for backward(create_graph=True): the gradients would have to be
    differentiable, and flash_attn_bwd has no backward itself. Raise rather than return gradients detached from the
    graph (second-order terms silently lost)."""
    if sys.modules["torch"].is_grad_enabled():
        raise InputError(f"{who}: backward with create_graph=True is not supported: {who}'s gradients have no "
                         "backward of their own (no double backward), so second-order terms through it would be "
                         "lost")


def kernel_ready(dout, out):
    """The upstream gradient as the kernels read it: autograd may hand one the kernels cannot (o.sum() gives an
    expanded one, stride 0 on head_dim); a copy in out's layout then."""
    if dout.dtype == out.dtype and (dout.shape[-1] <= 1 or dout.stride(-1) == 1) and \
            dout.data_ptr() % _launch.ALIGNMENT == 0:
        return dout
    return sys.modules["torch"].empty_like(out).copy_(dout)


@functools.cache
def _functions():
    """(dense, varlen) autograd Functions, made on first use: torch is imported only by callers that use it. The
    forward runs the forward kernel with return_lse (grad mode is off inside it, so this is the plain call, repeat
    path included) and saves q, k, v, O and LSE; the backward runs the backward kernels on the current stream."""
    import torch

    class FlashAttn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sinks, alibi_slopes, options, dropout, deterministic, device):
            out, lse = _attention.flash_attn(q, k, v, **options, return_lse=True, sinks=sinks,
                                             alibi_slopes=alibi_slopes, **dropout, device=device)
            ctx.save_for_backward(q, k, v, out, lse, sinks, alibi_slopes)
            ctx.call = (options, dropout, deterministic, device)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _):
            _refuse_create_graph("tessera.flash_attn")
            q, k, v, out, lse, sinks, alibi_slopes = ctx.saved_tensors
            options, dropout, deterministic, device = ctx.call
            grads = flash_attn_bwd(q, k, v, out, kernel_ready(dout, out), lse, **options, sinks=sinks,
                                   alibi_slopes=alibi_slopes, **dropout, deterministic=deterministic, device=device)
            return (*grads[:3], grads[3] if sinks is not None else None, *[None] * 5)

    class FlashAttnVarlen(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sinks, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    options, dropout, deterministic, device):
            out, lse = _attention.flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                    **options, return_lse=True, sinks=sinks,
                                                    alibi_slopes=alibi_slopes, **dropout, device=device)
            ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sinks, alibi_slopes)
            ctx.call = (max_seqlen_q, max_seqlen_k, options, dropout, deterministic, device)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, _):
            _refuse_create_graph("tessera.flash_attn_varlen")
            q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, sinks, alibi_slopes = ctx.saved_tensors
            max_seqlen_q, max_seqlen_k, options, dropout, deterministic, device = ctx.call
            grads = flash_attn_varlen_bwd(q, k, v, out, kernel_ready(dout, out), lse, cu_seqlens_q, cu_seqlens_k,
                                          max_seqlen_q, max_seqlen_k, **options, sinks=sinks,
                                          alibi_slopes=alibi_slopes, **dropout, deterministic=deterministic,
                                          device=device)
            return (*grads[:3], grads[3] if sinks is not None else None, *[None] * 9)

    return FlashAttn, FlashAttnVarlen

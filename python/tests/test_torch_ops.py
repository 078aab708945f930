"""torch.ops.tessera.*: the custom operators' schemas and fake implementations (no GPU needed: shapes only, traced
with fake tensors), torch.export / torch.compile capturing tessera's entry points as single operators with no graph
break; and on a CUDA GPU torch.library.opcheck of every operator, a model trained under
torch.compile(fullgraph=True) (bit for bit the eager call with the deterministic backward, and a transformer block
within bf16 tolerance), the same under CUDA graphs (mode="reduce-overhead"), the optional features (sinks, ALiBi,
chunks, dropout, seqused, paged K/V; decode's sinks, ALiBi and cache_leftpad), attn_combine and FlashAttention's
kvcache call compiled, and a compiled decode step (cache write then paged decode) captured in a CUDA graph and replayed with new lengths.
Skipped without torch."""
import pytest

import support

torch = pytest.importorskip("torch")

OPS = ("flash_attn", "flash_attn_varlen", "flash_attn_bwd", "flash_attn_varlen_bwd", "paged_decode",
       "paged_cache_write", "attn_combine", "flash_attn_with_kvcache")


def test_every_operator_is_registered_on_import():
    import tessera  # noqa: F401  (importing tessera registers the operators)
    for name in OPS:
        assert hasattr(torch.ops.tessera, name), name


def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


def test_fake_shapes():
    """The fake implementations give the eager calls' shapes and dtypes: O like q, LSE (B, Hq, Sq) / (Hq, total_q)
    in float32 or empty, gradients like their inputs, decode O like q."""
    import tessera  # noqa: F401
    ops = torch.ops.tessera
    with fake_mode():
        q, k = torch.empty(2, 5, 6, 64, dtype=torch.bfloat16), torch.empty(2, 7, 2, 64, dtype=torch.bfloat16)
        o, lse = ops.flash_attn(q, k, k, True, "bottom_right", None, -1, -1, 0.0, True, False)
        assert (o.shape, o.dtype, lse.shape, lse.dtype) == (q.shape, q.dtype, (2, 6, 5), torch.float32)
        assert ops.flash_attn(q, k, k, True, "bottom_right", None, -1, -1, 0.0, False, False)[1].shape == (0,)
        dq, dk, dv, dsinks = ops.flash_attn_bwd(o, q, k, k, o, lse, True, "bottom_right", None, -1, -1, 0.0, False)
        assert (dq.shape, dk.shape, dv.shape, dsinks.shape) == (q.shape, k.shape, k.shape, (0,))
        sinks, seed = torch.empty(6), torch.empty(2, dtype=torch.int64)
        o, lse = ops.flash_attn(q, k, k, True, "bottom_right", None, -1, -1, 0.0, True, False, sinks, torch.empty(2, 6),
                                64, 0.25, seed)
        assert (o.shape, lse.shape) == (q.shape, (2, 6, 5))
        dsinks = ops.flash_attn_bwd(o, q, k, k, o, lse, True, "bottom_right", None, -1, -1, 0.0, False, sinks)[3]
        assert (dsinks.shape, dsinks.dtype) == ((6,), torch.float32)
        qv, kv, cu = torch.empty(9, 6, 64), torch.empty(11, 2, 64), torch.empty(3, dtype=torch.int32)
        o, lse = ops.flash_attn_varlen(qv, kv, kv, cu, cu, 5, 7, False, "bottom_right", None, -1, -1, 0.0, True,
                                       False)
        assert (o.shape, lse.shape) == (qv.shape, (6, 9))
        pages, lens = torch.empty(4, 16, 2, 64), torch.empty(2, dtype=torch.int32)
        o, lse = ops.flash_attn_varlen(qv, pages, pages, cu, cu, 5, 7, False, "bottom_right", None, -1, -1, 0.0, True,
                                       False, sinks, None, 0, 0.0, None, torch.empty(2, 2, dtype=torch.int32), lens,
                                       lens)
        assert (o.shape, lse.shape) == (qv.shape, (6, 9))
        grads = ops.flash_attn_varlen_bwd(o, qv, kv, kv, o, lse, cu, cu, 5, 7, False, "bottom_right", None, -1, -1,
                                          0.0, False, sinks, None, 0, 0.0, None, lens, lens)
        assert [g.shape for g in grads] == [qv.shape, kv.shape, kv.shape, (6,)]
        cache = torch.empty(8, 16, 2, 64, dtype=torch.bfloat16)
        table, lens = torch.empty(2, 4, dtype=torch.int32), torch.empty(2, dtype=torch.int32)
        o, lse = ops.paged_decode(q[:, :3], cache, cache, table, lens, "NHD", True, None, None, None, None, None, -1,
                                  0.0, 0, True)
        assert (o.shape, lse.shape) == ((2, 3, 6, 64), (2, 6, 3))
        o, lse = ops.paged_decode(q[:, :3], cache, cache, table, lens, "NHD", True, None, None, None, None, None, -1,
                                  0.0, 0, True, False, lens, sinks, torch.empty(6))
        assert (o.shape, lse.shape) == ((2, 3, 6, 64), (2, 6, 3))
        # attn_combine: out in the asked dtype, the LSE (B, S, H) stored (B, H, S) as FlashAttention-3's.
        o, lse = ops.attn_combine(torch.empty(3, 2, 5, 6, 64), torch.empty(3, 2, 5, 6), torch.bfloat16)
        assert (o.shape, o.dtype, lse.shape, lse.stride()) == ((2, 5, 6, 64), torch.bfloat16, (2, 5, 6), (30, 1, 5))
        o, lse = ops.attn_combine(torch.empty(3, 9, 6, 40), torch.empty(3, 9, 6), torch.float32)
        assert (o.shape, lse.shape, lse.stride()) == ((9, 6, 40), (9, 6), (1, 9))


def test_export_captures_one_operator_per_call():
    """torch.export traces tessera.flash_attn, flash_attn_bwd, paged_decode and paged_cache_write as their operators
    (fake tensors: nothing runs), so a model using them exports and compiles with no graph break."""
    import tessera

    class Block(torch.nn.Module):
        def forward(self, q, k, v, cache, table, lens, slots):
            o = tessera.flash_attn(q, k, v, causal=True)
            tessera.paged_cache_write(k[0], v[0], cache, cache, slots)
            d = tessera.paged_decode(q[:, -1:], cache, cache, table, lens)
            return o, d

    q, k = torch.randn(2, 5, 6, 64).bfloat16(), torch.randn(2, 5, 2, 64).bfloat16()
    cache = torch.zeros(8, 16, 2, 64, dtype=torch.bfloat16)
    args = (q, k, k, cache, torch.zeros(2, 4, dtype=torch.int32), torch.ones(2, dtype=torch.int32),
            torch.arange(5, dtype=torch.int64))
    graph = torch.export.export(Block(), args).graph
    targets = [str(node.target) for node in graph.nodes if node.op == "call_function"]
    assert sum("tessera.flash_attn.default" in t for t in targets) == 1, targets
    assert sum("tessera.paged_decode.default" in t for t in targets) == 1, targets
    assert sum("tessera.paged_cache_write.default" in t for t in targets) == 1, targets


class Calls(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the tessera operators dispatched under it, with their arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "tessera":
            self.calls.append((func.__name__.split(".")[0], args))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("varlen", (False, True))
def test_autograd_formula_passes_every_feature_to_the_backward(varlen):
    """Through the operators' autograd formula (fake tensors), the backward operator gets the forward's sinks, ALiBi
    slopes, chunk, dropout rate and RNG state (the same tensor: the mask is regenerated, not redrawn), varlen's seqused,
    and the sinks get their gradient from the backward's fourth output."""
    import tessera  # noqa: F401
    ops = torch.ops.tessera
    with fake_mode():
        q, k, v = (torch.empty(2, 5, h, 64, dtype=torch.bfloat16, requires_grad=True) for h in (6, 2, 2))
        sinks, slopes = torch.empty(6, requires_grad=True), torch.empty(2, 6)
        seed, lens = torch.empty(2, dtype=torch.int64), torch.empty(2, dtype=torch.int32)
        features = (sinks, slopes, 32, 0.125, seed)
        with Calls() as mode:
            if varlen:
                cu = torch.empty(3, dtype=torch.int32)
                o, _ = ops.flash_attn_varlen(*(x.flatten(0, 1) for x in (q, k, v)), cu, cu, 5, 5, True, "bottom_right",
                                             0.5, 8, -1, 0.0, True, True, *features, None, lens, lens)
            else:
                o, _ = ops.flash_attn(q, k, v, True, "bottom_right", 0.5, 8, -1, 0.0, True, True, *features)
            o.sum().backward()
        assert [name for name, _ in mode.calls] == (["flash_attn_varlen", "flash_attn_varlen_bwd"] if varlen else
                                                    ["flash_attn", "flash_attn_bwd"])
        backward = mode.calls[1][1]
        start = 10 if varlen else 6         # after dout, q, k, v, out, lse (and cu_seqlens_q/k, max_seqlen_q/k)
        assert backward[start:] == (True, "bottom_right", 0.5, 8, -1, 0.0, True, *features) + \
            ((lens, lens) if varlen else ())
        assert (q.grad.shape, k.grad.shape, sinks.grad.shape) == (q.shape, k.shape, (6,))


def test_export_captures_every_feature():
    """torch.export traces flash_attn with sinks, ALiBi, a chunk and dropout (a given seed), flash_attn_varlen over a
    paged cache with seqused, the explicit backward with sinks and dropout, and paged_decode with sinks and ALiBi, each
    as one operator that takes those tensors (no refusal, no graph break)."""
    import tessera

    class Model(torch.nn.Module):
        def forward(self, q, k, sinks, slopes, pages, cu, table, used, cache, lens):
            o, lse = tessera.flash_attn(q, k, k, causal=True, sinks=sinks, alibi_slopes=slopes, attention_chunk=32,
                                        dropout_p=0.1, dropout_seed=(7, 3), return_lse=True)
            grads = tessera.flash_attn_bwd(q, k, k, o, o, lse, causal=True, sinks=sinks, alibi_slopes=slopes,
                                           attention_chunk=32, dropout_p=0.1, dropout_seed=(7, 3))
            p = tessera.flash_attn_varlen(q[0], pages, pages, cu, cu, 5, 32, block_table=table, seqused_k=used,
                                          sinks=sinks)
            d = tessera.paged_decode(q[:, -1:], cache, cache, table, lens, sinks=sinks, alibi_slopes=slopes)
            return o, *grads, p, d

    q, k = torch.randn(2, 5, 6, 64).bfloat16(), torch.randn(2, 5, 2, 64).bfloat16()
    cache = torch.zeros(8, 16, 2, 64, dtype=torch.bfloat16)
    table, lens = torch.zeros(2, 4, dtype=torch.int32), torch.ones(2, dtype=torch.int32)
    args = (q, k, torch.zeros(6), torch.ones(2, 6), cache, torch.tensor([0, 2, 5], dtype=torch.int32), table,
            torch.tensor([1, 2], dtype=torch.int32), cache, lens)
    graph = torch.export.export(Model(), args).graph
    calls = {str(n.target).split(".")[1]: n for n in graph.nodes if str(n.target).startswith("tessera.")}
    assert sorted(calls) == ["flash_attn", "flash_attn_bwd", "flash_attn_varlen", "paged_decode"], calls
    inputs = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    sinks, slopes, table, used = (inputs[name] for name in ("sinks", "slopes", "table", "used"))
    assert calls["flash_attn"].args[11:15] == (sinks, slopes, 32, 0.1)
    assert calls["flash_attn_bwd"].args[13:17] == (sinks, slopes, 32, 0.1)
    assert calls["flash_attn_varlen"].args[15] == sinks
    assert calls["flash_attn_varlen"].args[20:23] == (table, None, used)
    assert calls["paged_decode"].args[-2:] == (sinks, slopes)


def test_export_captures_the_kvcache_call():
    """torch.export traces FlashAttention's flash_attn_with_kvcache (append, rotary, a contiguous cache with an int
    length; a paged one with a tensor of lengths and return_softmax_lse) as one operator each, which mutates the
    caches; its fake output has V's head_dim and the LSE (B, Hq, Sq)."""
    from tessera import flash_attn_interface as fa

    class Step(torch.nn.Module):
        def forward(self, q, k_cache, v_cache, k, v, cos, sin, pages, table, lens):
            a = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=5, causal=True)
            b, lse = fa.flash_attn_with_kvcache(q, pages, pages, cache_seqlens=lens, block_table=table,
                                                return_softmax_lse=True)
            return a, b, lse

    q, cache = torch.randn(2, 3, 4, 64).bfloat16(), torch.zeros(2, 64, 2, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 3, 2, 64).bfloat16()
    rotary = torch.randn(64, 16)
    args = (q, cache, cache.clone(), k, k.clone(), rotary, rotary.clone(), torch.zeros(8, 16, 2, 64).bfloat16(),
            torch.zeros(2, 4, dtype=torch.int32), torch.ones(2, dtype=torch.int32))
    program = torch.export.export(Step(), args)
    calls = [n for n in program.graph.nodes if str(n.target).startswith("tessera.")]
    assert [str(n.target) for n in calls] == ["tessera.flash_attn_with_kvcache.default"] * 2
    assert calls[0].args[8] == 5 and calls[1].args[7].name == "lens"
    with fake_mode():
        o, lse = torch.ops.tessera.flash_attn_with_kvcache(
            torch.empty(2, 3, 4, 64), torch.empty(2, 64, 2, 64), torch.empty(2, 64, 2, 32), None, None, None, None,
            None, 5, None, None, None, None, True, -1, -1, 0.0, True, None, 0, True)
        assert (o.shape, lse.shape) == ((2, 3, 4, 32), (2, 4, 3))


def test_traced_feature_errors():
    """Under tracing, the backward's dropout without the forward's seed and a recorded paged varlen call are
    InputErrors before any operator runs."""
    import tessera

    q, k = torch.randn(2, 5, 6, 64).bfloat16(), torch.randn(2, 5, 2, 64).bfloat16()

    class Backward(torch.nn.Module):
        def forward(self, q, k, lse):
            return tessera.flash_attn_bwd(q, k, k, q, q, lse, dropout_p=0.1)

    with pytest.raises(tessera.InputError, match="needs the forward's dropout_seed"):
        torch.export.export(Backward(), (q, k, torch.zeros(2, 6, 5)))

    class Paged(torch.nn.Module):
        def forward(self, q, pages, cu, table):
            return tessera.flash_attn_varlen(q.requires_grad_(), pages, pages, cu, cu, 5, 32, block_table=table)

    with torch.enable_grad(), pytest.raises(tessera.InputError, match="block_table.*has no backward"):
        torch.export.export(Paged(), (q[0], torch.zeros(8, 16, 2, 64).bfloat16(),
                                      torch.tensor([0, 2, 5], dtype=torch.int32), torch.zeros(2, 4, dtype=torch.int32)))


# ---- On the GPU -------------------------------------------------------------------------------------------------------
def cuda(*shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


@support.requires_cuda
@pytest.mark.parametrize("requires_grad", (False, True))
def test_opcheck_attention(requires_grad):
    """opcheck (schema, autograd registration, fake tensors, AOT dispatch with dynamic shapes) of the forward, varlen
    forward and both backwards, GQA with a causal window."""
    import tessera  # noqa: F401
    ops = torch.ops.tessera
    q, k, v = cuda(2, 37, 6, 64), cuda(2, 53, 2, 64), cuda(2, 53, 2, 64)
    options = [True, "bottom_right", None, 16, -1, 0.0]
    grad = [x.clone().requires_grad_(requires_grad) for x in (q, k, v)]
    torch.library.opcheck(ops.flash_attn.default, (*grad, *options, True, True))
    cu_q = torch.tensor([0, 30, 74], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 50, 106], dtype=torch.int32, device="cuda")
    flat = [x.reshape(-1, *x.shape[2:]).clone().requires_grad_(requires_grad) for x in (q, k, v)]
    torch.library.opcheck(ops.flash_attn_varlen.default, (*flat, cu_q, cu_k, 44, 56, *options, True, True))
    if requires_grad:
        return
    o, lse = ops.flash_attn(q, k, v, *options, True, True)
    torch.library.opcheck(ops.flash_attn_bwd.default, (cuda(*o.shape), q, k, v, o, lse, *options, True))
    o, lse = ops.flash_attn_varlen(*flat, cu_q, cu_k, 44, 56, *options, True, True)
    torch.library.opcheck(ops.flash_attn_varlen_bwd.default,
                          (cuda(*o.shape), *flat, o, lse, cu_q, cu_k, 44, 56, *options, True))


# opcheck's schema test compares inputs before and after with arithmetic torch lacks for float8 tensors
# ("mul_cuda" not implemented for 'Float8_e4m3fn'): fp8 calls run the other checks (the bf16 calls cover the schema).
FP8_CHECKS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def paged(B=3, pages=12, block_size=16, Hkv=2, D=128, dtype=torch.bfloat16):
    """Caches, a permuted block table and lengths for `B` sequences."""
    caches = [cuda(pages, block_size, Hkv, D, dtype=torch.bfloat16).to(dtype) for _ in range(2)]
    table = torch.randperm(pages, device="cuda").to(torch.int32).view(B, -1)
    lens = torch.tensor([1, 40, 64][:B], dtype=torch.int32, device="cuda")
    return caches, table, lens


@support.requires_cuda
def test_opcheck_decode_and_cache_write():
    """opcheck of paged_decode (bf16 cache; fp8 cache with tensor and number scales, LSE, splits) and of the cache
    writer, which mutates the caches it declares."""
    import tessera  # noqa: F401
    ops = torch.ops.tessera
    (k_cache, v_cache), table, lens = paged()
    q = cuda(3, 2, 8, 128)
    torch.library.opcheck(ops.paged_decode.default, (q, k_cache, v_cache, table, lens, "NHD", True, None, None, None,
                                                     None, None, -1, 0.0, 0, True))
    fp8 = [c.to(torch.float8_e4m3fn) for c in (k_cache, v_cache)]
    scale = torch.full((1,), 0.5, device="cuda")
    torch.library.opcheck(ops.paged_decode.default, (q, *fp8, table, lens, "NHD", True, None, scale, None, None, 2.0,
                                                     -1, 0.0, 3, False), test_utils=FP8_CHECKS)
    slots = torch.tensor([5, -1, 17, 100], dtype=torch.int64, device="cuda")
    key, value = cuda(4, 2, 128), cuda(4, 2, 128)
    torch.library.opcheck(ops.paged_cache_write.default, (key, value, k_cache, v_cache, slots, "NHD", None, None,
                                                          None, None))
    torch.library.opcheck(ops.paged_cache_write.default, (key, value, *fp8, slots, "NHD", scale, None, None, 2.0),
                          test_utils=FP8_CHECKS)


@support.requires_cuda
def test_combine_and_leftpad_compile():
    """opcheck of attn_combine and of paged_decode with cache_leftpad (a set of the test bundles or compiled on
    demand); both compiled with fullgraph=True equal the eager calls bit for bit."""
    import tessera
    ops = torch.ops.tessera
    parts, lse = cuda(3, 2, 5, 6, 64, dtype=torch.float32), cuda(3, 2, 5, 6, dtype=torch.float32)
    torch.library.opcheck(ops.attn_combine.default, (parts, lse, torch.bfloat16))
    torch._dynamo.reset()
    combine = torch.compile(lambda p, s: tessera.attn_combine(p, s, out_dtype=torch.bfloat16), fullgraph=True)
    for got, want in zip(combine(parts, lse), tessera.attn_combine(parts, lse, out_dtype=torch.bfloat16)):
        assert torch.equal(got, want)
    (k_cache, v_cache), table, lens = paged()
    q, pads = cuda(3, 1, 8, 128), torch.tensor([0, 17, 50], dtype=torch.int32, device="cuda")
    torch.library.opcheck(ops.paged_decode.default, (q, k_cache, v_cache, table, lens, "NHD", True, None, None, None,
                                                     None, None, -1, 0.0, 0, True, False, pads))
    decode = torch.compile(lambda *a: tessera.paged_decode(*a, cache_leftpad=pads), fullgraph=True)
    assert torch.equal(decode(q, k_cache, v_cache, table, lens),
                       tessera.paged_decode(q, k_cache, v_cache, table, lens, cache_leftpad=pads))


def feature_call(feature):
    """(call(q, k, v, sinks), sinks or None) of a causal deterministic flash_attn with one optional feature (bf16,
    D64, Hq 8, Hkv 2), for compiled-against-eager comparisons."""
    import tessera
    sinks = cuda(8, dtype=torch.float32).requires_grad_() if feature == "sinks" else None
    extra = {"sinks": {}, "alibi_chunk": dict(alibi_slopes=torch.rand(8, device="cuda"), attention_chunk=32),
             "dropout": dict(dropout_p=0.2, dropout_seed=(1234, 5))}[feature]

    def call(q, k, v, sinks):
        return tessera.flash_attn(q * 2, k, v, causal=True, deterministic=True, sinks=sinks, **extra)
    return call, sinks


def assert_trains_alike(call, inputs, upstream):
    """call compiled with fullgraph=True and eager on copies of the leaves: output and every leaf's gradient equal
    bit for bit."""
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True)
    eager = [x if x is None or not x.requires_grad else x.detach().clone().requires_grad_() for x in inputs]
    out, want = compiled(*inputs), call(*eager)
    assert torch.equal(out, want)
    out.backward(upstream)
    want.backward(upstream)
    for i, (x, y) in enumerate(zip(inputs, eager)):
        if isinstance(x, torch.Tensor) and x.requires_grad:
            assert torch.equal(x.grad, y.grad), i


@support.requires_cuda
@pytest.mark.parametrize("feature", ("sinks", "alibi_chunk", "dropout"))
def test_compiled_features_train_like_eager(feature):
    """flash_attn with sinks (trained: their gradient too), ALiBi with a chunk, or dropout with a given seed, compiled
    with fullgraph=True: the output and gradients (deterministic backward) equal the eager call's bit for bit; the
    forward and backward operators pass opcheck with the feature."""
    call, sinks = feature_call(feature)
    inputs = leaves((2, 77, 8, 64), (2, 77, 2, 64), (2, 77, 2, 64)) + [sinks]
    assert_trains_alike(call, inputs, cuda(2, 77, 8, 64))
    ops = torch.ops.tessera
    args = [x.detach() if x is not None else None for x in inputs[:3]]
    features = (sinks.detach(), None, 0, 0.0, None) if feature == "sinks" else \
        (None, torch.rand(8, device="cuda"), 32, 0.0, None) if feature == "alibi_chunk" else \
        (None, None, 0, 0.2, torch.tensor([1234, 5], device="cuda"))
    torch.library.opcheck(ops.flash_attn.default, (*args, True, "bottom_right", None, -1, -1, 0.0, True, True,
                                                   *features))
    o, lse = ops.flash_attn(*args, True, "bottom_right", None, -1, -1, 0.0, True, True, *features)
    torch.library.opcheck(ops.flash_attn_bwd.default, (cuda(*o.shape), *args, o, lse, True, "bottom_right", None, -1,
                                                       -1, 0.0, True, *features))


@support.requires_cuda
def test_compiled_varlen_features_train_like_eager():
    """flash_attn_varlen with trained sinks and seqused_k (sequence b using the first seqused_k[b] of its keys),
    compiled: bit for bit the eager call, gradients included; and a paged K/V cache (block_table, no grad)."""
    import tessera
    cu = torch.tensor([0, 30, 77], dtype=torch.int32, device="cuda")
    used = torch.tensor([25, 40], dtype=torch.int32, device="cuda")
    sinks = cuda(8, dtype=torch.float32).requires_grad_()

    def call(q, k, v, sinks):
        return tessera.flash_attn_varlen(q, k, v, cu, cu, 47, 47, causal=True, deterministic=True, sinks=sinks,
                                         seqused_k=used)
    assert_trains_alike(call, leaves((77, 8, 64), (77, 2, 64), (77, 2, 64)) + [sinks], cuda(77, 8, 64))
    pages, table = cuda(12, 16, 2, 128), torch.randperm(12, device="cuda").to(torch.int32).view(2, 6)
    cu_k = torch.tensor([0, 70, 90], dtype=torch.int32, device="cuda")
    q = cuda(77, 8, 128)
    torch._dynamo.reset()
    paged_call = torch.compile(lambda *a: tessera.flash_attn_varlen(*a, cu, cu_k, 47, 70, causal=True,
                                                                    block_table=table), fullgraph=True)
    assert torch.equal(paged_call(q, pages, pages),
                       tessera.flash_attn_varlen(q, pages, pages, cu, cu_k, 47, 70, causal=True, block_table=table))


@support.requires_cuda
def test_compiled_decode_with_sinks_and_alibi():
    """paged_decode with sinks and ALiBi slopes through its operator: opcheck, and compiled equals eager."""
    import tessera
    (k_cache, v_cache), table, lens = paged()
    q, sinks, slopes = cuda(3, 1, 8, 128), cuda(8, dtype=torch.float32), torch.rand(3, 8, device="cuda")
    torch.library.opcheck(torch.ops.tessera.paged_decode.default,
                          (q, k_cache, v_cache, table, lens, "NHD", True, None, None, None, None, None, -1, 0.0, 0,
                           True, False, None, sinks, slopes))
    torch._dynamo.reset()
    decode = torch.compile(lambda *a: tessera.paged_decode(*a, sinks=sinks, alibi_slopes=slopes), fullgraph=True)
    assert torch.equal(decode(q, k_cache, v_cache, table, lens),
                       tessera.paged_decode(q, k_cache, v_cache, table, lens, sinks=sinks, alibi_slopes=slopes))


def kvcache_step(q, k_cache, v_cache, k, v, cos, sin, lens):
    from tessera import flash_attn_interface as fa
    return fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=lens, causal=True,
                                      rotary_interleaved=False, return_softmax_lse=True)


@support.requires_cuda
def test_compiled_kvcache_step():
    """FlashAttention's decode step (append two tokens with GPT-NeoX rotary, then attend) over a contiguous bf16
    cache, compiled with fullgraph=True: output, LSE and the caches after it equal the eager step's bit for bit, for
    three steps with growing lengths; opcheck of its operator."""
    torch._dynamo.reset()
    step = torch.compile(kvcache_step, fullgraph=True)
    caches = [cuda(3, 128, 2, 128) for _ in range(2)]
    eager_caches = [c.clone() for c in caches]
    angles = torch.arange(128, device="cuda")[:, None] * 10000.0 ** (-torch.arange(32, device="cuda") / 32)
    cos, sin = angles.cos(), angles.sin()
    for lengths in ([5, 40, 64], [7, 42, 66], [9, 44, 68]):
        lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        q, k, v = cuda(3, 2, 8, 128), cuda(3, 2, 2, 128), cuda(3, 2, 2, 128)
        got, want = step(q, *caches, k, v, cos, sin, lens), kvcache_step(q, *eager_caches, k, v, cos, sin, lens)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), lengths
        assert all(torch.equal(a, b) for a, b in zip(caches, eager_caches)), lengths
    torch.library.opcheck(torch.ops.tessera.flash_attn_with_kvcache.default,
                          (cuda(3, 1, 8, 128), *caches, cuda(3, 1, 2, 128), cuda(3, 1, 2, 128), cos, sin, lens, None,
                           None, None, None, None, True, -1, -1, 0.0, False, None, 0, True))


def attention_step(q, k, v):
    """Attention with a step before it that is exact in bf16 (a power-of-two scale): compiled, its output and the
    gradients for a given upstream gradient must equal the eager computation's bit for bit."""
    import tessera
    return tessera.flash_attn(q * 2, k, v, causal=True, window=(24, -1), deterministic=True)


def leaves(*shapes):
    return [cuda(*s).requires_grad_() for s in shapes]


@support.requires_cuda
@pytest.mark.parametrize("mode", ("default", "reduce-overhead"))
def test_compiled_training_equals_eager(mode):
    """torch.compile(fullgraph=True) of a step through tessera.flash_attn: no graph break, and the output and the
    gradients through the backward operator (deterministic kernels) equal the eager call's bit for bit, for four
    steps with new inputs (mode="reduce-overhead": replayed from CUDA graphs after the warm-up steps)."""
    torch._dynamo.reset()
    step = torch.compile(attention_step, fullgraph=True, mode=mode)
    for _ in range(4):
        inputs = leaves((2, 77, 8, 64), (2, 77, 2, 64), (2, 77, 2, 64))
        eager = [x.detach().clone().requires_grad_() for x in inputs]
        upstream = cuda(2, 77, 8, 64)
        out, want = step(*inputs), attention_step(*eager)
        assert torch.equal(out, want)
        out.backward(upstream)
        want.backward(upstream)
        for name, x, y in zip("qkv", inputs, eager):
            assert torch.equal(x.grad, y.grad), name


class Block(torch.nn.Module):
    """A pre-norm attention block with GQA and rotary-free projections, its attention tessera's or SDPA's."""

    def __init__(self, width=256, heads=8, kv_heads=2, use_tessera=True):
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.use_tessera = heads, kv_heads, width // heads, use_tessera
        self.norm = torch.nn.RMSNorm(width)
        self.qkv = torch.nn.Linear(width, (heads + 2 * kv_heads) * self.dim, bias=False)
        self.out = torch.nn.Linear(heads * self.dim, width, bias=False)

    def forward(self, x):
        import tessera
        B, S, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(B, S, -1, self.dim).split((self.heads, self.kv_heads, self.kv_heads), 2)
        if self.use_tessera:
            o = tessera.flash_attn(q, k, v, causal=True)
        else:
            o = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                enable_gqa=True).transpose(1, 2)
        return x + self.out(o.reshape(B, S, -1))


@support.requires_cuda
def test_compiled_block_trains_like_sdpa():
    """A transformer block compiled with fullgraph=True (inductor) trains through tessera: its output and parameter
    gradients match the same block with SDPA (eager) within bf16 tolerance."""
    torch.manual_seed(0)
    ours = Block().cuda().bfloat16()
    theirs = Block(use_tessera=False).cuda().bfloat16()
    theirs.load_state_dict(ours.state_dict())
    torch._dynamo.reset()
    compiled = torch.compile(ours, fullgraph=True)
    x = cuda(2, 96, 256)
    y, want = compiled(x), theirs(x)
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2)
    y.float().square().mean().backward()
    want.float().square().mean().backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        scale = q.grad.abs().max().item()
        assert (p.grad - q.grad).abs().max().item() <= 2e-2 * scale, name


def decode_step(q, key, value, k_cache, v_cache, slots, table, lens):
    import tessera
    tessera.paged_cache_write(key, value, k_cache, v_cache, slots)
    return tessera.paged_decode(q, k_cache, v_cache, table, lens)


@support.requires_cuda
def test_compiled_decode_step_in_a_cuda_graph():
    """A decode step (write the new token's key and value, then attend over the paged cache) compiled with
    fullgraph=True and captured in a CUDA graph, replayed with new queries, tokens, slots and lengths: equal bit for
    bit to the eager step on copies of the caches."""
    torch._dynamo.reset()
    step = torch.compile(decode_step, fullgraph=True)
    (k_cache, v_cache), table, lens = paged(pages=48)
    static = [cuda(3, 1, 8, 128), cuda(3, 2, 128), cuda(3, 2, 128), k_cache, v_cache,
              torch.zeros(3, dtype=torch.int64, device="cuda"), table, lens]

    def refresh(lengths):
        static[0].copy_(cuda(3, 1, 8, 128))
        static[1].copy_(cuda(3, 2, 128))
        static[2].copy_(cuda(3, 2, 128))
        lens.copy_(torch.tensor(lengths, device="cuda"))
        pos = lens.long() - 1
        static[5].copy_(table.gather(1, (pos // 16)[:, None])[:, 0].long() * 16 + pos % 16)

    refresh([5, 60, 190])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(*static)
    for lengths in ([1, 17, 64], [33, 191, 2], [100, 100, 100]):
        refresh(lengths)
        caches = [c.clone() for c in static[3:5]]
        graph.replay()
        want = decode_step(*static[:3], *caches, *static[5:])
        torch.cuda.synchronize()
        assert torch.equal(out, want), lengths
        assert all(torch.equal(c, s) for c, s in zip(caches, static[3:5])), lengths

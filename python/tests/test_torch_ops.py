"""torch.ops.tessera.*: the custom operators' schemas and fake implementations (no GPU needed: shapes only, traced
with fake tensors), torch.export / torch.compile capturing tessera's entry points as single operators with no graph
break; and on a CUDA GPU torch.library.opcheck of every operator, a model trained under
torch.compile(fullgraph=True) (bit for bit the eager call with the deterministic backward, and a transformer block
within bf16 tolerance), the same under CUDA graphs (mode="reduce-overhead"), attn_combine and cache_leftpad compiled,
and a compiled decode step (cache write then paged decode) captured in a CUDA graph and replayed with new lengths.
Skipped without torch."""
import pytest

import support

torch = pytest.importorskip("torch")

OPS = ("flash_attn", "flash_attn_varlen", "flash_attn_bwd", "flash_attn_varlen_bwd", "paged_decode",
       "paged_cache_write", "attn_combine")


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
        dq, dk, dv = ops.flash_attn_bwd(o, q, k, k, o, lse, True, "bottom_right", None, -1, -1, 0.0, False)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, k.shape)
        qv, kv, cu = torch.empty(9, 6, 64), torch.empty(11, 2, 64), torch.empty(3, dtype=torch.int32)
        o, lse = ops.flash_attn_varlen(qv, kv, kv, cu, cu, 5, 7, False, "bottom_right", None, -1, -1, 0.0, True,
                                       False)
        assert (o.shape, lse.shape) == (qv.shape, (6, 9))
        cache = torch.empty(8, 16, 2, 64, dtype=torch.bfloat16)
        table, lens = torch.empty(2, 4, dtype=torch.int32), torch.empty(2, dtype=torch.int32)
        o, lse = ops.paged_decode(q[:, :3], cache, cache, table, lens, "NHD", True, None, None, None, None, None, -1,
                                  0.0, 0, True)
        assert (o.shape, lse.shape) == ((2, 3, 6, 64), (2, 6, 3))
        o, lse = ops.paged_decode(q[:, :3], cache, cache, table, lens, "NHD", True, None, None, None, None, None, -1,
                                  0.0, 0, True, False, lens)
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

"""flash_attn on the GPU (torch CUDA tensors) against a float64 reference computed on the GPU, with the tolerance rule
of CORRECTNESS.md and NaN-poisoned outputs: the shape grid (lengths 1, 17, 127, 257, 1000, 4097 with Sq > Sk and
Sq < Sk), GQA 1/3/8, q/k/v sliced from a packed qkv tensor, every mask, windows, softcap, LSE, varlen, and the
numerical contract (fully masked rows, Sk = 0, large and extreme logits). Skipped without a CUDA GPU."""
import random
from typing import NamedTuple

import pytest

import support
from support import torch
import tessera
from tessera import testing

pytestmark = [support.requires_cuda, pytest.mark.usefixtures("exact_fp32_matmul")]

LENGTHS = (1, 17, 127, 257, 1000, 4097)
MASKS = ("none", "tl", "br")


class Inputs:
    """Fresh random inputs with their seed (reported on failure)."""

    def __init__(self):
        self.seed = random.randrange(2**31)
        self.gen = torch.Generator(device="cuda").manual_seed(self.seed)

    def __call__(self, shape, dtype, scale=1.0):
        return (torch.randn(shape, generator=self.gen, device="cuda") * scale).to(support.torch_dtype(dtype))


class Case(NamedTuple):
    Sq: int
    Sk: int
    dtype: str = "bf16"
    D: int = 128
    mask: str = "none"
    group: int = 1              # GQA ratio Hq / Hkv
    Hkv: int = 2
    B: int = 1
    window: tuple = (-1, -1)
    softcap: float = 0.0
    packed: bool = True         # q, k, v sliced from one packed tensor (q from its own when Sq != Sk)
    input_scale: float = 1.0
    scale: float = None
    alibi: bool = False         # ALiBi slopes per batch item and head
    sinks: bool = False         # a sink logit per query head
    chunk: int = 0              # attention_chunk

    def options(self):
        return dict(causal=self.mask != "none", causal_align="top_left" if self.mask == "tl" else "bottom_right",
                    window=self.window, softcap=self.softcap, scale=self.scale, attention_chunk=self.chunk)

    def extras(self, rand):
        """The call's sinks and ALiBi slopes (None where the case has none)."""
        Hq = self.Hkv * self.group
        return dict(sinks=(rand((Hq,), "f32") * 3) if self.sinks else None,
                    alibi_slopes=(rand((self.B, Hq), "f32").abs() * 0.3 + 0.02) if self.alibi else None)

    def __str__(self):
        extra = (" alibi" if self.alibi else "") + (" sinks" if self.sinks else "") + \
            (f" chunk{self.chunk}" if self.chunk else "")
        return (f"B{self.B} Sq{self.Sq} Sk{self.Sk} Hq{self.Hkv * self.group} Hkv{self.Hkv} D{self.D} {self.dtype} "
                f"{self.mask} window{self.window} softcap{self.softcap}{' packed' if self.packed else ''}{extra}")


def grid_cases():
    """A sample of the grid: every (Sq, Sk) pair below with each mask, dtype, head_dim and GQA ratio in rotation."""
    pairs = [(1, 1), (1, 4097), (17, 17), (17, 1000), (127, 257), (257, 127), (257, 257), (1000, 17), (1000, 1000),
             (4097, 1), (1000, 4097), (4097, 1000), (4097, 4097), (127, 1), (1, 127)]
    dims, groups, cases = (64, 128, 32, 96, 256), (1, 3, 8), []
    n = 0
    for Sq, Sk in pairs:
        for mask in MASKS:
            for dtype in ("f16", "bf16"):
                big = max(Sq, Sk) >= 4097
                cases.append(Case(Sq, Sk, dtype, dims[n % 5], mask, groups[n % 3], B=1 if big else 2))
                n += 1
    return cases


GRID = grid_cases()
assert {c.Sq for c in GRID} | {c.Sk for c in GRID} == set(LENGTHS)
assert any(c.Sq > c.Sk for c in GRID) and any(c.Sq < c.Sk for c in GRID)

FEATURES = [
    Case(1000, 1000, "bf16", 128, "br", 3, window=(256, 0)),
    Case(1000, 4097, "f16", 64, "none", 8, window=(100, 50)),
    Case(4097, 1000, "bf16", 64, "none", 1, window=(0, 0)),                 # rows with no key in the window
    Case(257, 1000, "f16", 128, "tl", 3, window=(-1, 30)),
    Case(127, 257, "bf16", 128, "br", 1, window=(17, -1), softcap=30.0, input_scale=4.0),
    Case(1000, 1000, "f16", 64, "none", 8, softcap=50.0, input_scale=4.0),  # softcap inputs > 88
    Case(1000, 1000, "bf16", 128, "tl", 1, softcap=10.0),
    Case(257, 4097, "f16", 128, "none", 3, scale=1.0, input_scale=3.0),     # logits > 88
    Case(4097, 257, "bf16", 128, "br", 8),                                  # 3840 fully masked rows
    Case(1000, 1000, "f16", 256, "br", 3, packed=False),
    Case(17, 4097, "bf16", 32, "tl", 8, B=3, packed=False),
    # ALiBi, sinks and chunks: the sm_90a wgmma kernel at D64 and D128, the portable one at D96.
    Case(1000, 1000, "bf16", 128, "br", 3, alibi=True),
    Case(257, 1000, "f16", 64, "none", 8, alibi=True, sinks=True, chunk=100),
    Case(1000, 257, "bf16", 128, "tl", 1, window=(100, -1), sinks=True, chunk=64),
    Case(127, 257, "bf16", 128, "br", 1, window=(17, -1), softcap=30.0, input_scale=4.0, alibi=True),
    Case(1000, 1000, "f16", 96, "br", 3, alibi=True, sinks=True),
    # Head dims of 8 mod 16: tiles of the next multiple of 16, the last vector of each row masked on load.
    Case(1000, 1000, "bf16", 40, "br", 3),
    Case(257, 1000, "f16", 24, "none", 8, packed=False),
]


# Few queries per KV head (decode-like Sq): with an sm_90a bundle these run the kernels that pack GQA query heads into
# one tile (pack 8 for ratios 8 and 16, 4 for ratio 4), elsewhere the unpacked ones; Sq > Sk leaves rows masked.
PACKED_GQA = [Case(Sq, Sk, ("bf16", "f16")[n % 2], 128, mask, group, B=2)
              for n, (Sq, Sk, group) in enumerate([(1, 4097, 8), (5, 1000, 4), (16, 257, 8), (33, 1000, 4),
                                                   (100, 4097, 16), (40, 17, 8)])
              for mask in MASKS]


def make_qkv(rand, c):
    Hq, Hkv = c.Hkv * c.group, c.Hkv
    if c.packed and c.Sq == c.Sk:
        qkv = rand((c.B, c.Sq, Hq + 2 * Hkv, c.D), c.dtype)
        if c.input_scale != 1.0:
            qkv[:, :, :Hq + Hkv] *= c.input_scale
        return qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
    q = rand((c.B, c.Sq, Hq, c.D), c.dtype, c.input_scale)
    if c.packed:
        kv = rand((c.B, c.Sk, 2, Hkv, c.D), c.dtype)
        kv[:, :, 0] *= c.input_scale
        return q, kv[:, :, 0], kv[:, :, 1]
    return q, rand((c.B, c.Sk, Hkv, c.D), c.dtype, c.input_scale), rand((c.B, c.Sk, Hkv, c.D), c.dtype)


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=support.torch_dtype(dtype), device="cuda")


def check(out, lse, q, k, v, **options):
    ref = testing.attention_reference(q, k, v, **options)
    same = testing.attention_reference(q, k, v, **options, precision="same")
    return testing.check_attention(out, ref, same, lse), ref


def run_case(c):
    rand = Inputs()
    q, k, v = make_qkv(rand, c)
    out = poisoned(q.shape, c.dtype)
    lse = poisoned((c.B, q.shape[2], c.Sq), "f32")
    extras = c.extras(rand)
    got = tessera.flash_attn(q, k, v, **c.options(), **extras, return_lse=True, out=out, lse=lse)
    assert got[0] is out and got[1] is lse
    torch.cuda.synchronize()
    result, ref = check(out, lse, q, k, v, **c.options(), **extras)
    assert result.ok, f"{c} seed {rand.seed}: {result}"
    return ref


@pytest.mark.parametrize("case", GRID, ids=str)
def test_grid_matches_float64(case):
    run_case(case)


@pytest.mark.parametrize("case", FEATURES, ids=str)
def test_features_match_float64(case):
    ref = run_case(case)
    if case.window == (0, 0) or (case.mask == "br" and case.Sq > case.Sk):
        assert torch.isinf(ref.lse).any()


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", support.DTYPES)
def test_varlen_matches_float64(dtype, mask):
    rand = Inputs()
    lens_q = [1, 17, 0, 127, 257, 1000, 300, 4097]
    lens_k = [4097, 17, 5, 0, 127, 1000, 257, 1000]
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    Hq, Hkv, D = 6, 2, 128 if dtype == "bf16" else 64
    q = rand((int(cu_q[-1]), Hq, D), dtype)
    kv = rand((int(cu_k[-1]), 2, Hkv, D), dtype)
    k, v = kv[:, 0], kv[:, 1]
    out, lse = poisoned(q.shape, dtype), poisoned((Hq, q.shape[0]), "f32")
    options = dict(causal=mask != "none", causal_align="top_left" if mask == "tl" else "bottom_right",
                   window=(-1, -1) if mask == "none" else (512, -1))
    tessera.flash_attn_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **options, return_lse=True,
                              out=out, lse=lse)
    torch.cuda.synchronize()
    cq, ck = cu_q.tolist(), cu_k.tolist()
    ref = testing.attention_reference_varlen(q, k, v, cq, ck, **options)
    same = testing.attention_reference_varlen(q, k, v, cq, ck, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"varlen {dtype} {mask} seed {rand.seed}: {result}"
    assert torch.isinf(lse[:, cq[3]:cq[4]]).all() and (out[cq[3]:cq[4]] == 0).all()   # the empty key sequence


@pytest.mark.parametrize("page_size, dtype, D, mask", [(16, "bf16", 128, "br"), (256, "bf16", 128, "br"),
                                                    (64, "f16", 64, "none")])
def test_paged_kv_varlen_matches_float64(page_size, dtype, D, mask):
    """Chunked prefill against a paged cache (block_table over NHD pages, as vLLM keeps them): pages below
    and above a key tile, at random places among NaN pages, against the float64 reference on the packed keys."""
    rand = Inputs()
    lens_q = [1, 17, 0, 127, 300, 1000]
    lens_k = [4097, 17, 5, 1000, 300, 1500]
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    Hq, Hkv = 8, 2
    q = rand((int(cu_q[-1]), Hq, D), dtype)
    k, v = rand((int(cu_k[-1]), Hkv, D), dtype), rand((int(cu_k[-1]), Hkv, D), dtype)
    need = [-(-n // page_size) for n in lens_k]
    places = torch.randperm(2 * sum(need), generator=torch.Generator().manual_seed(rand.seed)).tolist()
    pages = torch.full((2, len(places), page_size, Hkv, D), float("nan"), dtype=q.dtype, device="cuda")
    table = torch.full((len(lens_k), max(need) + 3), -1, dtype=torch.int32)
    ck, used = cu_k.tolist(), 0
    for b, n in enumerate(lens_k):
        for j in range(need[b]):
            rows = range(ck[b] + j * page_size, min(ck[b] + (j + 1) * page_size, ck[b + 1]))
            table[b, j] = places[used]
            pages[0, places[used], :len(rows)], pages[1, places[used], :len(rows)] = k[rows.start:rows.stop], \
                v[rows.start:rows.stop]
            used += 1
    options = dict(causal=mask != "none", window=(-1, -1) if mask == "none" else (700, -1))
    out, lse = poisoned(q.shape, dtype), poisoned((Hq, q.shape[0]), "f32")
    tessera.flash_attn_varlen(q, pages[0], pages[1], cu_q, cu_k, max(lens_q), max(lens_k), **options,
                              return_lse=True, block_table=table.cuda(), out=out, lse=lse)
    torch.cuda.synchronize()
    cq = cu_q.tolist()
    ref = testing.attention_reference_varlen(q, k, v, cq, ck, **options)
    same = testing.attention_reference_varlen(q, k, v, cq, ck, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"paged {page_size} {dtype} {mask} seed {rand.seed}: {result}"


def test_new_outputs_without_lse_and_reuse():
    rand = Inputs()
    c = Case(257, 1000, "bf16", 128, "br", 3)
    out = poisoned((1, 257, 6, 128), "bf16")
    for _ in range(2):
        q, k, v = make_qkv(rand, c)
        fresh = tessera.flash_attn(q, k, v, causal=True)
        assert fresh.shape == q.shape and fresh.dtype == q.dtype and fresh.is_contiguous()
        o2, lse2 = tessera.flash_attn(q, k, v, causal=True, return_lse=True)
        assert lse2.shape == (1, 6, 257) and lse2.dtype == torch.float32
        tessera.flash_attn(q, k, v, causal=True, out=out)
        torch.cuda.synchronize()
        result, _ = check(out, lse2, q, k, v, causal=True)
        assert result.ok, f"seed {rand.seed}: {result}"
        assert torch.equal(fresh, out) and torch.equal(o2, out)


def test_strided_output_and_odd_strides():
    """An output with gaps (untouched), and inputs whose row strides are not multiples of 8 (the scalar path)."""
    rand = Inputs()
    B, S, H, D = 2, 1000, 4, 64

    def odd(shape):
        buf = rand((shape[0], shape[1], shape[2] * shape[3] + 3), "f16")
        return buf.as_strided(shape, (buf.stride(0), buf.stride(1), shape[3], 1))
    q, k, v = odd((B, S, H, D)), odd((B, 777, 2, D)), odd((B, 777, 2, D))
    wide = poisoned((B, S, H, D + 8), "f16")
    out = wide[..., :D]
    tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", out=out)
    torch.cuda.synchronize()
    result, _ = check(out, None, q, k, v, causal=True, causal_align="top_left")
    assert result.ok, f"seed {rand.seed}: {result}"
    assert wide[..., D:].isnan().all(), "the kernel wrote into the gaps"


def test_causal_partial_block_writes_only_its_rows():
    """Causal kernels put the partial query block first (rows before query 0, which TMA reads as zero and never
    stores): an output inside a larger buffer keeps the rows before and after it untouched, and LSE likewise."""
    rand = Inputs()
    for D, dtype in ((64, "bf16"), (128, "f16")):
        B, Sq, Sk, H = 2, 1000, 1500, 4
        q, k, v = rand((B, Sq, H, D), dtype), rand((B, Sk, H, D), dtype), rand((B, Sk, H, D), dtype)
        wide = poisoned((B, Sq + 400, H, D), dtype)
        out = wide[:, 200:200 + Sq]
        lse_wide = poisoned((B, H, Sq + 400), "f32")
        lse = lse_wide[..., 200:200 + Sq]
        tessera.flash_attn(q, k, v, causal=True, return_lse=True, out=out, lse=lse)
        torch.cuda.synchronize()
        result, _ = check(out, lse, q, k, v, causal=True)
        assert result.ok, f"seed {rand.seed} D{D}: {result}"
        for gap in (wide[:, :200], wide[:, 200 + Sq:], lse_wide[..., :200], lse_wide[..., 200 + Sq:]):
            assert gap.isnan().all(), f"D{D}: the kernel wrote outside the output"


def test_sk0_and_empty_sizes():
    rand = Inputs()
    q, k = rand((2, 17, 4, 64), "f16"), rand((2, 0, 2, 64), "f16")
    out, lse = tessera.flash_attn(q, k, k, return_lse=True)
    torch.cuda.synchronize()
    assert (out == 0).all() and torch.isneginf(lse).all()
    out = tessera.flash_attn(q[:0], rand((0, 5, 2, 64), "f16"), rand((0, 5, 2, 64), "f16"))
    assert out.shape == (0, 17, 4, 64)
    out, lse = tessera.flash_attn(q[:, :0], q[:, :, :2], q[:, :, :2], return_lse=True)
    assert out.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)


def test_extreme_logit_gives_v_exactly():
    """Raw logit -524288 (q = 64, k = -128 over D = 64, scale 1) with one visible key: O equals V bit for bit."""
    rand = Inputs()
    q = torch.full((1, 300, 2, 64), 64.0, dtype=torch.float16, device="cuda")
    k = torch.full((1, 1, 2, 64), -128.0, dtype=torch.float16, device="cuda")
    v = rand((1, 1, 2, 64), "f16")
    out, lse = tessera.flash_attn(q, k, v, scale=1.0, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, v.expand_as(out)), f"O != V: max error {(out - v).abs().max()}"
    assert torch.isfinite(lse).all() and (lse + 524288).abs().max() <= 1.0
    k = torch.full((1, 300, 2, 64), -128.0, dtype=torch.float16, device="cuda")
    v = rand((1, 300, 2, 64), "f16")
    out = tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", scale=1.0)
    torch.cuda.synchronize()
    assert torch.equal(out[:, 0], v[:, 0]) and not out.isnan().any()


def test_runs_on_the_current_stream():
    """On a side stream that is still busy, the kernel must wait for the copy queued before it."""
    rand = Inputs()
    q_new, k, v = rand((4, 1000, 8, 128), "bf16"), rand((4, 1000, 8, 128), "bf16"), rand((4, 1000, 8, 128), "bf16")
    q = rand((4, 1000, 8, 128), "bf16")
    out = poisoned(q.shape, "bf16")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        q.copy_(q_new)
        tessera.flash_attn(q, k, v, out=out)
    side.synchronize()
    result, _ = check(out, None, q_new, k, v)
    assert result.ok, "flash_attn did not run on torch's current stream"


def test_causal_tiles_claimed_per_stream():
    """Causal kernels that claim tiles from the runtime's per-stream counter (sm_90a) give, run many times on two
    busy streams at once, exactly the outputs of one call each on the current stream: launches on one stream leave
    the counter zero for the next, and concurrent streams do not share one (a shared counter would leave tiles
    unvisited: NaN from the poisoned outputs)."""
    rand = Inputs()
    shape = (4, 2048, 8, 128)
    inputs = [[rand(shape, "bf16") for _ in range(3)] for _ in range(2)]
    expected = [tessera.flash_attn(q, k, v, causal=True) for q, k, v in inputs]
    outs = [[poisoned(shape, "bf16") for _ in range(12)] for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in range(2)]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    for i in range(12):
        for (q, k, v), out, stream in zip(inputs, outs, streams):
            with torch.cuda.stream(stream):
                tessera.flash_attn(q, k, v, causal=True, out=out[i])
    torch.cuda.synchronize()
    for want, got in zip(expected, outs):
        for out in got:
            assert torch.equal(out, want)
    from tessera import _attention, _device
    bundle = _device.device("cuda:0").bundle()
    if bundle.target == "sm_90a":   # the test exercised the counter: the kernel has one
        p = _attention.Plan("t", False, "bf16", 128, 4, 2048, 2048, 8, 8, "causal_bottom_right", 128 ** -0.5,
                            (-1, -1), 0.0, False, shape, (4, 8, 2048))
        assert "tile_counter" in dict(_attention.in_bundle(bundle, p).args)


@pytest.mark.parametrize("D,causal,window", [(128, False, (-1, -1)), (128, True, (-1, -1)), (64, True, (-1, -1)),
                                             (128, True, (200, 0))])
def test_cuda_graph_replays_with_new_inputs(D, causal, window):
    """flash_attn captured in a CUDA graph after a warm-up on a side stream (torch's recipe) replays exactly what a
    direct call gives, for new inputs copied into the captured ones: the capture makes no driver call that capture
    forbids (a persistent kernel's first launch on the capture stream takes its tile counter from the device's
    pool), and each replay leaves the counter zero for the next."""
    rand = Inputs()
    shape, options = (2, 1000, 8, D), dict(causal=causal, window=window)
    q, k, v = (rand(shape, "bf16") for _ in range(3))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tessera.flash_attn(q, k, v, **options)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tessera.flash_attn(q, k, v, **options)
    for _ in range(3):
        new = [rand(shape, "bf16") for _ in range(3)]
        for captured, value in zip((q, k, v), new):
            captured.copy_(value)
        out.fill_(float("nan"))
        graph.replay()
        assert torch.equal(out, tessera.flash_attn(*new, **options)), f"seed {rand.seed}"


def test_repeated_calls_skip_the_checks_but_not_the_pointers(monkeypatch):
    """A call with the shapes, strides, dtypes and options of an earlier one repeats its plan without the checks
    (none is called) and is exact for new tensors, new outputs and LSE; a misaligned pointer still gets the full
    checks' error, and other options or shapes are their own calls."""
    from tessera import _attention
    rand = Inputs()
    shape = (2, 257, 4, 64)
    tessera.flash_attn(*(rand(shape, "f16") for _ in range(3)), causal=True)
    tessera.flash_attn(*(rand(shape, "f16") for _ in range(3)), causal=True, return_lse=True,
                       out=poisoned(shape, "f16"))

    def checked(*args):
        raise AssertionError("a repeated call ran the checks")
    with monkeypatch.context() as m:
        m.setattr(_attention, "_check_inputs", checked)
        for _ in range(2):
            q, k, v = (rand(shape, "f16") for _ in range(3))
            result, _ = check(tessera.flash_attn(q, k, v, causal=True), None, q, k, v, causal=True)
            assert result.ok, f"seed {rand.seed}: {result}"
            out = poisoned(shape, "f16")
            o, lse = tessera.flash_attn(q, k, v, causal=True, return_lse=True, out=out)
            assert o is out
            result, _ = check(out, lse, q, k, v, causal=True)
            assert result.ok, f"seed {rand.seed}: {result}"
    q, k, v = (rand(shape, "f16") for _ in range(3))
    result, _ = check(tessera.flash_attn(q, k, v), None, q, k, v)   # not causal: another call
    assert result.ok, f"seed {rand.seed}: {result}"
    flat = rand((q.numel() + 1,), "f16")
    shifted = flat[1:].view(shape)   # q's shape and strides, 2 bytes off
    with pytest.raises(tessera.InputError, match="q.data_ptr.*is not 16-byte aligned"):
        tessera.flash_attn(shifted, k, v, causal=True)


def test_rejected_on_the_gpu():
    rand = Inputs()
    q = rand((1, 64, 2, 65), "f16")
    with pytest.raises(tessera.InputError, match=r"q.data_ptr\(\) = 0x[0-9a-f]+ is not 16-byte aligned"):
        tessera.flash_attn(q[..., 1:], q[..., :64], q[..., :64])
    with pytest.raises(tessera.InputError, match="tensors are on cpu|tensors on different devices"):
        tessera.flash_attn(q[..., :64], q[..., :64].cpu(), q[..., :64])
    with pytest.raises(tessera.InputError, match=r"device='sim:gfx942' but the tensors are on cuda:0"):
        tessera.flash_attn(q[..., :64], q[..., :64], q[..., :64], device="sim:gfx942")
    with pytest.raises(tessera.InputError, match=r"cu_seqlens_q has dtype int64"):
        cu = torch.tensor([0, 64], device="cuda")
        tessera.flash_attn_varlen(q[0, ..., :64], q[0, ..., :64], q[0, ..., :64], cu, cu.int(), 64, 64)


@pytest.mark.parametrize("case", PACKED_GQA, ids=str)
def test_packed_gqa_matches_float64(case):
    run_case(case)


def test_hopper_lane_serves_head_dim_64_and_128():
    """On an sm_90 GPU with an sm_90a bundle, D 64/128 calls, varlen or not, run the wgmma/TMA kernel (tensor_maps
    in its manifest) and inputs with strides TMA cannot copy run its portable twin, both correct."""
    from tessera import _attention, _device
    dev = _device.device("cuda:0")
    bundle = dev.bundle()
    if dev.arch != "sm_90" or bundle.target != "sm_90a":
        pytest.skip(f"needs an sm_90 GPU and an sm_90a bundle (have {dev.arch}, bundle {bundle.target})")
    rand = Inputs()
    for D, dtype in ((64, "f16"), (128, "bf16")):
        c = Case(1000, 777, dtype, D, "br", 3, packed=False)
        p = _attention.Plan("t", False, dtype, D, 1, 1000, 777, 6, 2, "causal_bottom_right", D ** -0.5, (-1, -1),
                            0.0, True, (1, 1000, 6, D), (1, 6, 1000))
        kernel = _attention.find_kernel(bundle, p)
        assert kernel.info.get("tensor_maps") and kernel.info.get("portable_twin"), kernel.name
        run_case(c)
        packed = p._replace(varlen=True, B=3)   # varlen batches take it too (test_varlen_matches_float64 runs them)
        assert _attention.find_kernel(bundle, packed).info.get("tensor_maps"), kernel.name
    # Few queries per KV head: a kernel that packs 8 query heads per tile; many queries: none.
    for Sq, pack in ((1, 8), (16, 8), (1000, 1)):
        gqa = _attention.Plan("t", False, "bf16", 128, 1, Sq, 777, 16, 2, "causal_bottom_right", 0.088, (-1, -1),
                              0.0, True, (1, Sq, 16, 128), (1, 16, Sq))
        chosen = _attention.in_bundle(bundle, gqa)
        assert chosen.attributes.get("pack_gqa", 1) == pack and chosen.info.get("tensor_maps"), (Sq, chosen.name)
    q = rand((1, 300, 4, 64 + 4), "f16")[..., :64]      # a 136-byte head stride: not for TMA
    infos = {n: _arrays_describe(q, n) for n in "qkvo"}
    assert _attention.with_tma_fallback(bundle, kernel, p, infos).name.endswith("_portable")


def _arrays_describe(x, name):
    from tessera import _arrays
    return _arrays.describe(x, name)


def test_inputs_that_require_grad_are_recorded_not_detached():
    """A call autograd would record returns an output in the autograd graph (its backward, tessera.flash_attn_bwd, is
    test_attention_bwd_gpu.py's), for first calls and for repeats of an earlier plain call's signature alike (the
    repeat path must not bypass autograd); under torch.no_grad() the plain call runs. Outputs are the same."""
    rand = Inputs()
    q, k, v = (rand((1, 64, 2, 64), "bf16") for _ in range(3))
    cu = torch.tensor([0, 64], dtype=torch.int32, device="cuda")
    expected = tessera.flash_attn(q, k, v)                           # remembered as a repeat signature
    expected_varlen = tessera.flash_attn_varlen(q[0], k[0], v[0], cu, cu, 64, 64)
    for name in ("q", "k", "v"):
        inputs = dict(q=q, k=k, v=v)
        inputs[name] = inputs[name].clone().requires_grad_()
        out = tessera.flash_attn(**inputs)
        assert out.grad_fn is not None and torch.equal(out, expected), name
        out = tessera.flash_attn_varlen(*(inputs[n][0] for n in "qkv"), cu, cu, 64, 64)
        assert out.grad_fn is not None and torch.equal(out, expected_varlen), name
        with torch.no_grad():
            out = tessera.flash_attn(**inputs)
        assert not out.requires_grad and torch.equal(out, expected)

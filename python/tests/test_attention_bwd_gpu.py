"""flash_attn_bwd and autograd through flash_attn on the GPU (torch CUDA tensors) against float64 gradients computed on
the GPU, with the tolerance rule of CORRECTNESS.md (3x the same-precision error, dq, dk, dv judged separately) and
NaN-poisoned gradients: head_dim {32, 64, 96, 128, 256} x masks (none, causal top-left and bottom-right, window, window
+ causal) x {MHA, GQA 6:2, MQA 6:1} x deterministic x (Sq, Sk) in (1, 1), (239, 1), (799, 3), (113, 203), (1023, 1024),
(1024, 1023) (900 cases), a few at (4224, 4224), varlen with zero-length items per mask, mode and D, softcap, head dims
40 and 24, large logits (q x5, k and v x3), byte offsets past 2^31 (a packed batch of 8200 sequences), 100 deterministic
runs bitwise equal, dk/dv bitwise stable without determinism, non-contiguous dout, autograd (equal bit for bit to the
explicit call), a CUDA graph of forward + backward, and the default bundle (found as the forward tests find it) holding
every variant. Skipped without a CUDA GPU."""
import itertools
import random
from typing import NamedTuple

import pytest

import support
from support import torch
import tessera
from tessera import _attention, _attention_bwd, _paths, testing

pytestmark = [support.requires_cuda, pytest.mark.usefixtures("exact_fp32_matmul")]

DIMS = (32, 64, 96, 128, 256)
HEADS = {"mha": (6, 6), "gqa": (6, 2), "mqa": (6, 1)}   # (Hq, Hkv)
MASKS = ("none", "tl", "br", "window", "window-br")
PAIRS = [(1, 1), (239, 1), (799, 3), (113, 203), (1023, 1024), (1024, 1023)]


class Inputs:
    """Fresh random inputs with their seed (reported on failure)."""

    def __init__(self):
        self.seed = random.randrange(2**31)
        self.gen = torch.Generator(device="cuda").manual_seed(self.seed)

    def __call__(self, shape, dtype, scale=1.0):
        return (torch.randn(shape, generator=self.gen, device="cuda") * scale).to(support.torch_dtype(dtype))


def mask_options(mask, Sk):
    """flash_attn's options for a mask name: windows scale with Sk (at least one key wide)."""
    return {"none": {}, "tl": dict(causal=True, causal_align="top_left"), "br": dict(causal=True),
            "window": dict(window=(max(1, Sk // 3), max(0, Sk // 5))),
            "window-br": dict(causal=True, window=(max(1, Sk // 4), -1))}[mask]


class Case(NamedTuple):
    Sq: int
    Sk: int
    dtype: str = "bf16"
    D: int = 128
    mask: str = "none"
    heads: str = "mha"
    deterministic: bool = False
    B: int = 2
    softcap: float = 0.0
    scales: tuple = (1.0, 1.0, 1.0)   # q, k, v are standard normal times these
    factor: float = 3.0               # CORRECTNESS.md's backward rule; FA2 allows 5x for large logits

    def options(self):
        return dict(mask_options(self.mask, self.Sk), softcap=self.softcap)

    def __str__(self):
        Hq, Hkv = HEADS[self.heads]
        return (f"B{self.B} Sq{self.Sq} Sk{self.Sk} Hq{Hq} Hkv{Hkv} D{self.D} {self.dtype} {self.mask}"
                f"{' det' if self.deterministic else ''}{f' softcap{self.softcap}' if self.softcap else ''}"
                f"{f' scales{self.scales}' if self.scales != (1.0, 1.0, 1.0) else ''}")


def grid_cases():
    """The issue's grid: every (Sq, Sk) pair x D x mask x head layout x deterministic; the dtype alternates with the
    parity of the axes' indices, so each combination of two axes meets both dtypes."""
    axes = (PAIRS, DIMS, MASKS, list(HEADS), (False, True))
    cases = []
    for index in itertools.product(*(range(len(a)) for a in axes)):
        (Sq, Sk), D, mask, heads, det = (a[i] for a, i in zip(axes, index))
        cases.append(Case(Sq, Sk, ("f16", "bf16")[sum(index) % 2], D, mask, heads, det))
    return cases


GRID = grid_cases()
BIG = [Case(4224, 4224, "bf16", 128, "br", "gqa", B=1), Case(4224, 4224, "f16", 64, "none", "mha", True, B=1),
       Case(4224, 4224, "bf16", 256, "window-br", "mqa", B=1), Case(4224, 4224, "f16", 32, "tl", "gqa", True, B=1)]
FEATURES = [Case(1023, 1024, "bf16", 128, "br", "gqa", softcap=15.0, scales=(4.0, 1.0, 1.0)),
            Case(113, 203, "f16", 64, "none", "mqa", True, softcap=50.0),
            Case(799, 3, "bf16", 96, "window", "gqa", softcap=15.0),
            Case(1024, 1023, "f16", 256, "tl", "mha", softcap=30.0),
            # Head dims of 8 mod 16, on tiles of the next multiple of 16.
            Case(1023, 1024, "bf16", 40, "br", "gqa"),
            Case(113, 203, "f16", 24, "none", "mqa", softcap=10.0)]
LARGE_LOGITS = [Case(Sq, Sk, dtype, D, mask, "gqa", det, scales=(5.0, 3.0, 3.0), factor=5.0)
                for Sq, Sk, dtype, D, mask, det in ((1, 1, "f16", 64, "none", False), (5, 17, "bf16", 128, "br", True),
                                                    (17, 128, "f16", 128, "tl", False), (128, 128, "bf16", 64, "none",
                                                                                          True))]


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=support.torch_dtype(dtype), device="cuda")


def make_inputs(rand, c):
    """q (B, Sq, Hq, D); k and v sliced from one (B, Sk, 2, Hkv, D) tensor; dout."""
    Hq, Hkv = HEADS[c.heads]
    q = rand((c.B, c.Sq, Hq, c.D), c.dtype, c.scales[0])
    kv = rand((c.B, c.Sk, 2, Hkv, c.D), c.dtype)
    kv[:, :, 0] *= c.scales[1]
    kv[:, :, 1] *= c.scales[2]
    return q, kv[:, :, 0], kv[:, :, 1], rand(q.shape, c.dtype)


def backward(q, k, v, dout, c, **given):
    """tessera's forward (O, LSE), then its backward into `given` gradients or NaN-poisoned ones."""
    out, lse = tessera.flash_attn(q, k, v, **c.options(), return_lse=True)
    grads = {name: given.get(name, poisoned(x.shape, c.dtype)) for name, x in (("dq", q), ("dk", k), ("dv", k))}
    got = tessera.flash_attn_bwd(q, k, v, out, dout, lse, **c.options(), deterministic=c.deterministic, **grads)
    assert all(g is x for g, x in zip(got, grads.values()))
    return got


def check(grads, q, k, v, dout, c, options=None):
    options = c.options() if options is None else options
    ref = testing.attention_backward_reference(q, k, v, dout, **options)
    same = testing.attention_backward_reference(q, k, v, dout, **options, precision="same")
    return testing.check_attention_backward(grads, ref, same, factor=c.factor)


def run_case(c):
    rand = Inputs()
    q, k, v, dout = make_inputs(rand, c)
    grads = backward(q, k, v, dout, c)
    torch.cuda.synchronize()
    result = check(grads, q, k, v, dout, c)
    assert result.ok, f"{c} seed {rand.seed}: {result}"
    return grads


@pytest.mark.parametrize("case", GRID + BIG, ids=str)
def test_grid_matches_float64(case):
    dq, _, _ = run_case(case)
    if case.mask == "br" and case.Sq > case.Sk:   # rows above the diagonal see no key: dq exactly 0 there
        assert (dq[:, :case.Sq - case.Sk] == 0).all()


@pytest.mark.parametrize("case", FEATURES + LARGE_LOGITS, ids=str)
def test_softcap_and_large_logits_match_float64(case):
    grads = run_case(case)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("deterministic", (False, True))
@pytest.mark.parametrize("mask", MASKS)
def test_varlen_with_zero_length_items(mask, deterministic, D):
    rand = Inputs()
    n = MASKS.index(mask) + deterministic + DIMS.index(D)     # head layout and dtype in rotation
    heads, dtype = list(HEADS)[n % 3], ("f16", "bf16")[n % 2]
    Hq, Hkv = HEADS[heads]
    lens_q = [1, 239, 0, 799, 113, 1023, 1024, 3, 0]
    lens_k = [1, 1, 5, 3, 203, 1024, 1023, 0, 0]      # queries without keys, keys without queries, neither
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    q, dout = rand((int(cu_q[-1]), Hq, D), dtype), rand((int(cu_q[-1]), Hq, D), dtype)
    kv = rand((int(cu_k[-1]), 2, Hkv, D), dtype)
    k, v = kv[:, 0], kv[:, 1]
    options = mask_options(mask, 300)   # one window for every sequence
    sizes = (cu_q, cu_k, max(lens_q), max(lens_k))
    out, lse = tessera.flash_attn_varlen(q, k, v, *sizes, **options, return_lse=True)
    grads = [poisoned(x.shape, dtype) for x in (q, k, v)]
    tessera.flash_attn_varlen_bwd(q, k, v, out, dout, lse, *sizes, **options, deterministic=deterministic,
                                  dq=grads[0], dk=grads[1], dv=grads[2])
    torch.cuda.synchronize()
    cq, ck = cu_q.tolist(), cu_k.tolist()
    ref = testing.attention_backward_reference_varlen(q, k, v, dout, cq, ck, **options)
    same = testing.attention_backward_reference_varlen(q, k, v, dout, cq, ck, **options, precision="same")
    result = testing.check_attention_backward(grads, ref, same)
    assert result.ok, f"varlen {dtype} D{D} {heads} {mask} det={deterministic} seed {rand.seed}: {result}"
    assert (grads[0][cq[7]:cq[8]] == 0).all(), "queries of a zero-length key sequence: dq must be 0"
    assert (grads[1][ck[2]:ck[3]] == 0).all() and (grads[2][ck[2]:ck[3]] == 0).all(), \
        "keys of a zero-length query sequence: dk, dv must be 0"


@pytest.mark.parametrize("deterministic", (False, True))
def test_byte_offsets_past_2_gib(deterministic):
    """A packed batch of 8200 short sequences, 8 heads of 128: q, k, v, their gradients and dq's f32
    workspace all extend past 2^31 bytes, and the last sequences live beyond it (64-bit addressing)."""
    rand = Inputs()
    H, D, n, L = 8, 128, 8200, 128
    total = n * L
    assert total * H * D * 2 > 2**31
    cu = torch.arange(0, total + 1, L, device="cuda", dtype=torch.int32)
    q, dout = rand((total, H, D), "bf16"), rand((total, H, D), "bf16")
    k, v = rand((total, H, D), "bf16"), rand((total, H, D), "bf16")
    sizes = (cu, cu, L, L)
    out, lse = tessera.flash_attn_varlen(q, k, v, *sizes, causal=True, return_lse=True)
    grads = [poisoned(x.shape, "bf16") for x in (q, k, v)]
    tessera.flash_attn_varlen_bwd(q, k, v, out, dout, lse, *sizes, causal=True, deterministic=deterministic,
                                  dq=grads[0], dk=grads[1], dv=grads[2])
    torch.cuda.synchronize()
    first = (n - 3) * L   # the last three sequences, all past 2^31 bytes
    assert first * H * D * 2 > 2**31
    tail = [x[first:] for x in (q, k, v, dout)]
    local = [0, L, 2 * L, 3 * L]
    ref = testing.attention_backward_reference_varlen(*tail, local, local, causal=True)
    same = testing.attention_backward_reference_varlen(*tail, local, local, causal=True, precision="same")
    result = testing.check_attention_backward([g[first:] for g in grads], ref, same)
    assert result.ok, f"past 2 GiB det={deterministic} seed {rand.seed}: {result}"
    assert not any(torch.isnan(g).any() for g in grads), "every gradient written"


def test_deterministic_runs_are_bitwise_equal_100_times():
    rand = Inputs()
    c = Case(1023, 1024, "bf16", 128, "br", "gqa", True, B=4)
    q, k, v, dout = make_inputs(rand, c)
    first = backward(q, k, v, dout, c)
    for i in range(100):
        again = backward(q, k, v, dout, c)
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), f"run {i}: deterministic {name} differs (seed {rand.seed})"


def test_dk_dv_bitwise_stable_without_determinism():
    """Only dQ is accumulated with atomics: dK and dV are the same bits on every run (FA2's race test)."""
    rand = Inputs()
    c = Case(1024, 1023, "f16", 64, "none", "mqa", B=8)
    q, k, v, dout = make_inputs(rand, c)
    _, dk, dv = backward(q, k, v, dout, c)
    for i in range(20):
        _, dk2, dv2 = backward(q, k, v, dout, c)
        assert torch.equal(dk, dk2) and torch.equal(dv, dv2), f"run {i} (seed {rand.seed})"


def test_non_contiguous_dout_and_gradients_with_gaps():
    rand = Inputs()
    c = Case(799, 1023, "bf16", 128, "tl", "gqa", True)
    q, k, v, dout = make_inputs(rand, c)
    Hq = q.shape[2]
    head_major = dout.transpose(1, 2).contiguous().transpose(1, 2)          # (B, Sq, Hq, D) view of (B, Hq, Sq, D)
    wide = poisoned((c.B, c.Sq, Hq + 2, c.D), c.dtype)
    sliced = wide[:, :, 1:Hq + 1]
    sliced.copy_(dout)                                                     # a slice of a wider tensor
    dq_wide = poisoned((c.B, c.Sq, Hq, c.D + 8), c.dtype)
    expected = backward(q, k, v, dout, c)
    for strided in (head_major, sliced):
        got = backward(q, k, v, strided, c, dq=dq_wide[..., :c.D])
        assert all(torch.equal(a, b) for a, b in zip(expected, got))
        assert dq_wide[..., c.D:].isnan().all(), "the kernels wrote into dq's gaps"
    torch.cuda.synchronize()
    result = check(expected, q, k, v, dout, c)
    assert result.ok, f"seed {rand.seed}: {result}"


def test_empty_sizes():
    rand = Inputs()
    c = Case(17, 0, "f16", 64, "br", "gqa")
    q, k, v, dout = make_inputs(rand, c)
    dq, dk, dv = backward(q, k, v, dout, c)
    torch.cuda.synchronize()
    assert (dq == 0).all() and dk.shape == (2, 0, 2, 64)
    c = Case(0, 33, "f16", 64, "none", "gqa")
    q, k, v, dout = make_inputs(rand, c)
    dq, dk, dv = backward(q, k, v, dout, c)
    torch.cuda.synchronize()
    assert dq.shape == (2, 0, 6, 64) and (dk == 0).all() and (dv == 0).all()


# ---- Autograd ------------------------------------------------------------------------------------------------------
def leaves(*tensors):
    return [x.detach().clone().requires_grad_() for x in tensors]


@pytest.mark.parametrize("case", [Case(1023, 1024, "bf16", 128, "br", "gqa", True),
                                  Case(239, 113, "f16", 64, "window", "mqa", True),
                                  Case(113, 203, "bf16", 96, "tl", "mha", True, softcap=20.0)], ids=str)
def test_autograd_equals_the_explicit_backward(case):
    """loss.backward() through flash_attn gives, bit for bit, flash_attn_bwd's gradients (deterministic kernels) and
    matches float64; the LSE output is not differentiable; the repeat path of an earlier plain call with the same
    signature does not bypass autograd."""
    rand = Inputs()
    q0, k0, v0, dout = make_inputs(rand, case)
    tessera.flash_attn(q0, k0, v0, **case.options())                   # remembered as a repeat signature
    q, k, v = leaves(q0, k0, v0)
    out, lse = tessera.flash_attn(q, k, v, **case.options(), return_lse=True, deterministic=True)
    assert out.requires_grad and not lse.requires_grad and "FlashAttn" in type(out.grad_fn).__name__
    (out * dout).sum().backward()                                      # d loss / d out = dout exactly
    with torch.no_grad():
        out0, lse0 = tessera.flash_attn(q0, k0, v0, **case.options(), return_lse=True)
        expected = tessera.flash_attn_bwd(q0, k0, v0, out0, dout, lse0, **case.options(), deterministic=True)
    assert torch.equal(out, out0) and torch.equal(lse, lse0)
    for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), expected):
        assert torch.equal(got, want), f"{name}: autograd differs from flash_attn_bwd (seed {rand.seed})"
    result = check((q.grad, k.grad, v.grad), q0, k0, v0, dout, case)
    assert result.ok, f"{case} seed {rand.seed}: {result}"


def test_autograd_through_packed_qkv_and_an_expanded_gradient():
    """q, k, v sliced from one leaf: their gradients land in its slices; o.sum() hands the backward an expanded
    (stride 0) gradient, which the backward copies; the explicit call with dout = 1 agrees."""
    rand = Inputs()
    B, S, Hq, Hkv, D = 2, 257, 6, 2, 64
    qkv = rand((B, S, Hq + 2 * Hkv, D), "f16").requires_grad_()
    q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
    tessera.flash_attn(q, k, v, causal=True, deterministic=True).sum().backward()
    with torch.no_grad():
        out, lse = tessera.flash_attn(q, k, v, causal=True, return_lse=True)
        ones = torch.ones_like(out)
        dq, dk, dv = tessera.flash_attn_bwd(q, k, v, out, ones, lse, causal=True, deterministic=True)
    assert torch.equal(qkv.grad, torch.cat([dq, dk, dv], dim=2))


def test_autograd_varlen():
    rand = Inputs()
    lens_q, lens_k = [100, 0, 257, 3], [57, 20, 300, 0]
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    q0, dout = rand((int(cu_q[-1]), 6, 128), "bf16"), rand((int(cu_q[-1]), 6, 128), "bf16")
    k0, v0 = rand((int(cu_k[-1]), 2, 128), "bf16"), rand((int(cu_k[-1]), 2, 128), "bf16")
    sizes = (cu_q, cu_k, max(lens_q), max(lens_k))
    q, k, v = leaves(q0, k0, v0)
    out = tessera.flash_attn_varlen(q, k, v, *sizes, causal=True, deterministic=True)
    out.backward(dout)
    with torch.no_grad():
        out0, lse0 = tessera.flash_attn_varlen(q0, k0, v0, *sizes, causal=True, return_lse=True)
        expected = tessera.flash_attn_varlen_bwd(q0, k0, v0, out0, dout, lse0, *sizes, causal=True,
                                                 deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip((q.grad, k.grad, v.grad), expected))
    cq, ck = cu_q.tolist(), cu_k.tolist()
    ref = testing.attention_backward_reference_varlen(q0, k0, v0, dout, cq, ck, causal=True)
    same = testing.attention_backward_reference_varlen(q0, k0, v0, dout, cq, ck, causal=True, precision="same")
    result = testing.check_attention_backward(expected, ref, same)
    assert result.ok, f"seed {rand.seed}: {result}"


def test_double_backward_is_refused():
    """flash_attn_bwd has no backward: create_graph=True raises instead of dropping the second-order terms."""
    rand = Inputs()
    q = rand((1, 64, 2, 64), "f16").requires_grad_()
    out = tessera.flash_attn(q, q, q)
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn: backward with create_graph=True is not "
                                                 r"supported"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


def test_a_recorded_call_without_backward_kernels_fails_before_its_forward(monkeypatch, tmp_path):
    """A bundle without the flash_attn_bwd set a recorded call's backward needs: KernelNotFoundError at the forward
    (not after it, in loss.backward()), naming the directive. The bundle's forward kernel is an empty PTX entry:
    had the forward run, O would be the NaN-free garbage of an unwritten output, not an error. The stand-in bundle
    is the only one of its target searched (the later bundles of the path, dist's own, would hold the set)."""
    arch = tessera.device("cuda").arch
    if not arch.startswith("sm_"):
        pytest.skip(f"the stand-in bundle is PTX; this GPU is {arch}")
    target = arch + "a"                                  # found before any other bundle for this GPU
    kernel = support.flash_attn_kernel_entry("fa_bf16_d64_none", "bf16", 64, code_ext="ptx")
    support.write_bundle(tmp_path / target, target, [kernel])
    support.write_ptx(tmp_path / target, kernel)
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path))
    monkeypatch.setattr(_paths, "later_bundles", lambda bundle_dir: [])
    q = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(tessera.KernelNotFoundError, match=r"has no flash_attn_bwd kernel set with dtype=bf16 "
                                                          r"head_dim=64 mask=none varlen=False deterministic=True .*"
                                                          r"tessera.flash_attn_bwd @fa_bwd_bf16_d64_none_det "):
        tessera.flash_attn(q, q, q, deterministic=True)


def test_non_deterministic_autograd_matches_float64():
    rand = Inputs()
    c = Case(1000, 1000, "bf16", 128, "none", "gqa")
    q0, k0, v0, dout = make_inputs(rand, c)
    q, k, v = leaves(q0, k0, v0)
    tessera.flash_attn(q, k, v).backward(dout)
    torch.cuda.synchronize()
    result = check((q.grad, k.grad, v.grad), q0, k0, v0, dout, c)
    assert result.ok, f"seed {rand.seed}: {result}"


@pytest.mark.parametrize("causal", (False, True))
def test_cuda_graph_of_forward_and_backward(causal):
    """Forward + loss.backward() captured after warm-up on a side stream (torch's recipe for whole-network capture)
    replays, for new inputs copied into the captured ones, exactly the gradients of direct calls: the backward
    allocates only through torch's caching allocator and never synchronises."""
    rand = Inputs()
    shape = (2, 1000, 6, 128)
    q, k, v = leaves(*(rand(shape, "bf16") for _ in range(3)))
    dout = rand(shape, "bf16")

    def step():
        for x in (q, k, v):
            x.grad = None
        tessera.flash_attn(q, k, v, causal=causal, deterministic=True).backward(dout)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for x in (q, k, v):
        x.grad = None
    with torch.cuda.graph(graph):
        tessera.flash_attn(q, k, v, causal=causal, deterministic=True).backward(dout)
    for _ in range(3):
        new = [rand(shape, "bf16") for _ in range(4)]
        with torch.no_grad():
            for captured, value in zip((q, k, v, dout), new):
                captured.copy_(value)
        graph.replay()
        with torch.no_grad():
            out, lse = tessera.flash_attn(*new[:3], causal=causal, return_lse=True)
            expected = tessera.flash_attn_bwd(*new[:3], out, new[3], lse, causal=causal, deterministic=True)
        for name, got, want in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), expected):
            assert torch.equal(got, want), f"{name} after replay (seed {rand.seed})"


def test_runs_on_the_current_stream():
    """On a side stream that is still busy, the backward must wait for the copy queued before it."""
    rand = Inputs()
    c = Case(1000, 1000, "bf16", 128, "br", "mha", True)
    q, k, v, dout_new = make_inputs(rand, c)
    dout = rand(q.shape, "bf16")
    expected = backward(q, k, v, dout_new, c)
    out, lse = tessera.flash_attn(q, k, v, causal=True, return_lse=True)
    grads = [poisoned(x.shape, "bf16") for x in (q, k, v)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        dout.copy_(dout_new)
        tessera.flash_attn_bwd(q, k, v, out, dout, lse, causal=True, deterministic=True, dq=grads[0], dk=grads[1],
                               dv=grads[2])
    side.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(expected, grads)), "flash_attn_bwd did not run on the current stream"


# ---- The default bundle ----------------------------------------------------------------------------------------------
ALL_VARIANTS = {(d, D, m, varlen, det) for d in support.DTYPES for D in DIMS
                for m in ("none", "causal_top_left", "causal_bottom_right") for varlen in (False, True)
                for det in (False, True)}


def test_the_default_bundle_serves_every_variant():
    """The calls above run on the bundle found for this GPU as the forward tests find it (tessera.find_bundle: dist/
    or a build tree): it holds a flash_attn_bwd kernel set with every runtime feature for each variant, its kernels
    in launch order."""
    dev = tessera.device("cuda")
    bundle = dev.bundle()
    assert bundle.directory == tessera.find_bundle(dev.arch)
    full = {}
    for s in bundle.kernel_sets.values():
        a = s.attributes
        if s.directive != "flash_attn_bwd" or not all(a.get(f) for f in _attention_bwd.RUNTIME_FEATURES):
            continue
        det = bool(a.get("deterministic"))
        assert [k.name for k in s.kernels] == [f"{s.name}_pre", f"{s.name}_main",
                                               f"{s.name}_dq" if det else f"{s.name}_dq_convert"]
        assert ("dq_accum" in s.roles) != det and s.roles.get("bwd_stats") == "workspace"
        full[(a["dtype"], a["head_dim"], a.get("mask", "none"), bool(a.get("varlen")), det)] = s
    assert set(full) >= ALL_VARIANTS, f"{bundle.directory}: missing {sorted(ALL_VARIANTS - set(full))}"
    p = _attention.Plan("t", False, "bf16", 128, 1, 10, 10, 6, 2, "causal_bottom_right", 0.1, (-1, -1), 0.0, True,
                        (1, 10, 6, 128), (1, 6, 10))
    assert _attention_bwd.kernel_set_for(dev, p, True) in bundle.kernel_sets.values()


def _bf16_inputs(gen, B, Sq, Sk, Hq, Hkv, D, Dv=None):
    """Standard normal bf16 q (B, Sq, Hq, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv) and dout (B, Sq, Hq, Dv) on the
    GPU, drawn in that order from `gen` (Dv defaults to D)."""
    Dv = Dv or D
    shapes = ((B, Sq, Hq, D), (B, Sk, Hkv, D), (B, Sk, Hkv, Dv), (B, Sq, Hq, Dv))
    return tuple(torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for shape in shapes)


@pytest.mark.parametrize("varlen", [False, True])
def test_sinks_through_autograd(varlen):
    """A sink logit per query head (GQA 6:2, causal with Sq > Sk: rows without a visible key) through autograd:
    dq, dk, dv within the contract against float64 and dsinks against the float64 sink gradient; the varlen form
    over two sequences."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    B, Sq, Sk, Hq, Hkv, D = 2, 300, 200, 6, 2, 64
    q, k, v, dout = _bf16_inputs(gen, B, Sq, Sk, Hq, Hkv, D)
    sinks = (torch.randn(Hq, device="cuda", generator=gen) * 3).requires_grad_()
    leaves_ = [x.clone().requires_grad_() for x in (q, k, v)]
    if varlen:
        cu_q = torch.tensor([0, Sq, 2 * Sq], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, Sk, 2 * Sk], dtype=torch.int32, device="cuda")
        packed = [x.reshape(-1, *x.shape[2:]) for x in leaves_]
        out = tessera.flash_attn_varlen(*packed, cu_q, cu_k, Sq, Sk, causal=True, sinks=sinks)
        out = out.reshape(B, Sq, Hq, D)
    else:
        out = tessera.flash_attn(*leaves_, causal=True, sinks=sinks)
    grads = torch.autograd.grad(out, (*leaves_, sinks), dout)
    ref = testing.attention_backward_reference(q, k, v, dout, causal=True, sinks=sinks.detach())
    same = testing.attention_backward_reference(q, k, v, dout, causal=True, sinks=sinks.detach(), precision="same")
    result = testing.check_attention_backward(grads[:3], ref, same)
    assert result.ok, str(result)
    error = (grads[3].double() - ref.dsinks).abs()
    allowed = testing.sink_gradient_tolerance(q, k, v, dout, ref, same, causal=True, sinks=sinks.detach())
    assert (error <= allowed).all(), f"dsinks {grads[3]}, float64 {ref.dsinks}"


@pytest.mark.parametrize("varlen", [False, True])
def test_alibi_and_chunk_through_autograd(varlen):
    """ALiBi slopes per batch item and head with a chunk (GQA 6:2, causal with Sq > Sk) through autograd: dq, dk, dv
    within the contract against float64; the varlen form over two sequences (a row of slopes each)."""
    gen = torch.Generator(device="cuda").manual_seed(12)
    B, Sq, Sk, Hq, Hkv, D, chunk = 2, 300, 200, 6, 2, 64, 64
    q, k, v, dout = _bf16_inputs(gen, B, Sq, Sk, Hq, Hkv, D)
    slopes = torch.rand(B, Hq, device="cuda", generator=gen) * 0.5 + 0.05
    options = dict(causal=True, alibi_slopes=slopes, attention_chunk=chunk)
    leaves_ = [x.clone().requires_grad_() for x in (q, k, v)]
    if varlen:
        cu_q = torch.tensor([0, Sq, 2 * Sq], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, Sk, 2 * Sk], dtype=torch.int32, device="cuda")
        packed = [x.reshape(-1, *x.shape[2:]) for x in leaves_]
        out = tessera.flash_attn_varlen(*packed, cu_q, cu_k, Sq, Sk, **options).reshape(B, Sq, Hq, D)
    else:
        out = tessera.flash_attn(*leaves_, **options)
    grads = torch.autograd.grad(out, leaves_, dout)
    ref = testing.attention_backward_reference(q, k, v, dout, **options)
    same = testing.attention_backward_reference(q, k, v, dout, **options, precision="same")
    result = testing.check_attention_backward(grads, ref, same)
    assert result.ok, str(result)


@pytest.mark.parametrize("deterministic", [False, True])
def test_mla_head_dims_through_autograd(deterministic):
    """DeepSeek's MLA prefill head dims, Q and K 192 and V 128 (every array zero-padded to the head_dim 192 kernels),
    causal, GQA 4:1, through autograd: O (B, S, Hq, 128) and dq, dk, dv within the contract against float64."""
    gen = torch.Generator(device="cuda").manual_seed(13)
    B, Sq, Sk, Hq, Hkv, Dqk, Dv = 2, 300, 500, 8, 2, 192, 128
    q, k, v, dout = _bf16_inputs(gen, B, Sq, Sk, Hq, Hkv, Dqk, Dv)
    leaves_ = [x.clone().requires_grad_() for x in (q, k, v)]
    out = tessera.flash_attn(*leaves_, causal=True, deterministic=deterministic)
    assert out.shape == (B, Sq, Hq, Dv)
    ref_o = testing.attention_reference(q, k, v, causal=True)
    same_o = testing.attention_reference(q, k, v, causal=True, precision="same")
    forward = testing.check_attention(out.detach(), ref_o, same_o)
    assert forward.ok, str(forward)
    grads = torch.autograd.grad(out, leaves_, dout)
    assert [g.shape for g in grads] == [x.shape for x in (q, k, v)]
    ref = testing.attention_backward_reference(q, k, v, dout, causal=True)
    same = testing.attention_backward_reference(q, k, v, dout, causal=True, precision="same")
    result = testing.check_attention_backward(grads, ref, same)
    assert result.ok, str(result)


@pytest.mark.parametrize("varlen", [False, True])
def test_dropout_through_autograd(varlen):
    """Dropout (p 0.17, a given seed) through autograd, GQA 6:2, causal with Sq > Sk: O and dq, dk, dv within the
    contract against float64 with testing.dropout_keep's mask (varlen: each sequence its own, deterministic). The
    explicit backward with the same seed gives the same gradients bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(14)
    B, Sq, Sk, Hq, Hkv, D = 2, 300, 200, 6, 2, 64
    q, k, v, dout = _bf16_inputs(gen, B, Sq, Sk, Hq, Hkv, D)
    seed = (0x9E3779B97F4A7C15, 12345)
    options = dict(causal=True, dropout_p=0.17, dropout_seed=seed)
    leaves_ = [x.clone().requires_grad_() for x in (q, k, v)]
    if varlen:
        cu_q = torch.tensor([0, Sq, 2 * Sq], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, Sk, 2 * Sk], dtype=torch.int32, device="cuda")
        packed = [x.reshape(-1, *x.shape[2:]) for x in leaves_]
        out = tessera.flash_attn_varlen(*packed, cu_q, cu_k, Sq, Sk, **options, deterministic=True)
        out = out.reshape(B, Sq, Hq, D)
    else:
        out = tessera.flash_attn(*leaves_, **options)
    reference = dict(causal=True, dropout=(seed, 0.17))
    forward = testing.check_attention(out.detach(), testing.attention_reference(q, k, v, **reference),
                                      testing.attention_reference(q, k, v, **reference, precision="same"))
    assert forward.ok, str(forward)
    grads = torch.autograd.grad(out, leaves_, dout)
    ref = testing.attention_backward_reference(q, k, v, dout, **reference)
    same = testing.attention_backward_reference(q, k, v, dout, **reference, precision="same")
    result = testing.check_attention_backward(grads, ref, same)
    assert result.ok, str(result)
    if not varlen:
        o, lse = tessera.flash_attn(q, k, v, **options, return_lse=True)
        explicit = tessera.flash_attn_bwd(q, k, v, o, dout, lse, causal=True, dropout_p=0.17, dropout_seed=seed)
        assert all(torch.equal(a, b) for a, b in zip(grads, explicit))


def test_dropout_draws_a_seed_per_call_and_per_graph_replay():
    """Without a seed each call draws one on the GPU (torch's generator): two calls differ, torch.manual_seed
    repeats them, and a CUDA graph's replays draw afresh."""
    gen = torch.Generator(device="cuda").manual_seed(15)
    q, k, v, _ = _bf16_inputs(gen, 1, 128, 128, 2, 2, 64)

    def call():
        return tessera.flash_attn(q, k, v, causal=True, dropout_p=0.3)
    torch.manual_seed(3)
    first, second = call(), call()
    torch.manual_seed(3)
    assert not torch.equal(first, second) and torch.equal(call(), first)
    call()   # found and launched once outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    graph.replay()
    one = captured.clone()
    graph.replay()
    assert not torch.equal(one, captured) and torch.isfinite(captured).all()

"""paged_decode on the GPU (torch CUDA tensors) with the default bundle against the float64 paged reference computed on
the GPU, with the tolerance rule of CORRECTNESS.md and NaN-poisoned outputs: NHD and HND caches, block sizes 16 and
64, Sq 1 and 3, GQA 32:8 and 8:1, f16/bf16, D 64/128/256, windows (starting mid-page), softcap, LSE, num_splits 1, 3,
the heuristic's and more splits than key tiles, lengths 0 and 1 in every batch; block tables that are random
permutations over three times the pages needed, with -1 and INT32_MAX past each sequence; unused slots and
unreferenced pages NaN / inf (bitwise the zero-filled run); stale split partials of an earlier call never leaking;
page ids past 65535 and element offsets past 2^32; the current stream; CUDA graph capture (with a plan, and after a
warm-up) replayed with new lengths, tables and values; the default bundle holding every variant; cache_leftpad (padded
slots poisoned); attn_combine merging two halves of the keys into the whole decode. Skipped without a CUDA GPU."""
import random
from typing import NamedTuple

import pytest

import support
from support import torch
import tessera
from tessera import _decode, testing

pytestmark = [support.requires_cuda, pytest.mark.usefixtures("exact_fp32_matmul")]

INT32_MAX = 2**31 - 1


class Inputs:
    """Fresh random inputs with their seed (reported on failure)."""

    def __init__(self):
        self.seed = random.randrange(2**31)
        self.gen = torch.Generator(device="cuda").manual_seed(self.seed)
        self.cpu = torch.Generator().manual_seed(self.seed)

    def __call__(self, shape, dtype, scale=1.0):
        return (torch.randn(shape, generator=self.gen, device="cuda") * scale).to(support.torch_dtype(dtype))

    def permutation(self, n):
        return torch.randperm(n, generator=self.cpu).to("cuda")


class Case(NamedTuple):
    lengths: tuple = (0, 1, 1000, 4097)   # cache_seqlens, the new tokens included
    Sq: int = 1
    Hq: int = 32
    Hkv: int = 8
    D: int = 128
    dtype: str = "bf16"
    block_size: int = 16
    layout: str = "NHD"
    causal: bool = True
    window_left: int = -1
    softcap: float = 0.0
    num_splits: int = 0
    return_lse: bool = True
    packed_q: bool = False     # q sliced from a (B, Sq, Hq + 2 Hkv, D) projection
    fp8: bool = False          # OCP e4m3 caches holding N(0, 1) / FP8_SCALES, per-tensor scales
    products: bool = False     # fp8_products: QK and PV on the e4m3 mma.sync

    def options(self):
        return dict(kv_layout=self.layout, causal=self.causal, window_left=self.window_left, softcap=self.softcap)

    def __str__(self):
        return (f"B{len(self.lengths)} lens{self.lengths} Sq{self.Sq} Hq{self.Hq} Hkv{self.Hkv} D{self.D} {self.dtype} "
                f"{self.layout} b{self.block_size} {'causal' if self.causal else 'full'} window{self.window_left} "
                f"softcap{self.softcap} splits{self.num_splits}{' lse' if self.return_lse else ''}"
                f"{' packed' if self.packed_q else ''}{' fp8' if self.fp8 else ''}"
                f"{' products' if self.products else ''}")


def grid_cases():
    """Every layout x block size x Sq x GQA shape, with dtype, head_dim, split count, mask and LSE in rotation
    (non-causal only with Sq = 1: the default sets are bottom-right causal, which one token does not notice)."""
    cases, n = [], 0
    for layout in ("NHD", "HND"):
        for block in (16, 64):
            for Sq in (1, 3):
                for Hq, Hkv in ((32, 8), (8, 1)):
                    cases.append(Case(Sq=Sq, Hq=Hq, Hkv=Hkv, D=(128, 64, 256)[n % 3], dtype=("bf16", "f16")[n % 2],
                                      block_size=block, layout=layout, causal=Sq > 1 or n // 3 % 2 == 0,
                                      num_splits=(0, 1, 3, 64)[n % 4], return_lse=n % 5 != 2,
                                      packed_q=n // 2 % 2 == 1))
                    n += 1
    return cases


GRID = grid_cases()
FEATURES = [
    Case(window_left=100, num_splits=3),                               # the window starts mid-page
    Case(lengths=(0, 1, 17, 300), Sq=3, window_left=0, block_size=64),  # only the diagonal key
    Case(Sq=3, softcap=30.0, num_splits=1, dtype="f16", D=64),
    Case(Hq=8, Hkv=1, window_left=33, softcap=5.0, layout="HND", block_size=64),
    Case(lengths=(0, 1, 2, 3, 70, 1500), Sq=3, Hq=8, Hkv=1, num_splits=128),   # splits past every sequence's tiles
    Case(lengths=(1, 0), num_splits=5),                                # nothing but empty splits and one key
    Case(lengths=(0, 0, 0)),                                           # graph padding: every row O = 0, LSE = -inf
    Case(lengths=(8192,) * 2, Sq=1, Hq=32, Hkv=8, num_splits=0),       # the heuristic splits these
]


FP8_SCALES = (0.02, 0.03)   # k_scale, v_scale: N(0, 1) / scale stays under e4m3's 448


def paged_cache(rand, c, fill=0.0, pad=2):
    """(q, k_cache, v_cache, block_table, cache_seqlens, valid) for case c: each sequence's keys and values in the
    pages of a random permutation of 3x the pages needed; `fill` in every other slot (unused slots of a sequence's
    last page, unreferenced pages); `pad` block-table columns past the longest sequence; entries past a sequence's
    pages alternately -1 and INT32_MAX. `valid` (pages, block_size) marks the slots holding a key."""
    B, bs = len(c.lengths), c.block_size
    need = [-(-n // bs) for n in c.lengths]
    pages = 3 * max(sum(need), 1)
    order = rand.permutation(pages).int()
    junk = torch.tensor([-1, INT32_MAX], dtype=torch.int32, device="cuda")
    table = junk[torch.arange(max(need) + pad, device="cuda") % 2].repeat(B, 1)
    caches = [torch.full((pages, bs, c.Hkv, c.D), fill, dtype=support.torch_dtype(c.dtype), device="cuda")
              for _ in range(2)]
    valid = torch.zeros((pages, bs), dtype=torch.bool, device="cuda")
    used = 0
    for b, n in enumerate(c.lengths):
        table[b, :need[b]] = order[used:used + need[b]]
        used += need[b]
        t = torch.arange(n, device="cuda")
        page, slot = table[b, t // bs].long(), t % bs
        for cache in caches:
            cache[page, slot] = rand((n, c.Hkv, c.D), c.dtype)
        valid[page, slot] = True
    if c.layout == "HND":
        caches = [x.transpose(1, 2).contiguous() for x in caches]
    if c.fp8:
        caches = [(x.float() / scale).to(torch.float8_e4m3fn) for x, scale in zip(caches, FP8_SCALES)]
    if c.packed_q:
        q = rand((B, c.Sq, c.Hq + 2 * c.Hkv, c.D), c.dtype)[:, :, :c.Hq]
    else:
        q = rand((B, c.Sq, c.Hq, c.D), c.dtype)
    lengths = torch.tensor(c.lengths, dtype=torch.int32, device="cuda")
    return q, *caches, table, lengths, valid


def poisoned_copy(cache, valid, layout, value):
    """The cache with `value` in every slot that holds no key."""
    out = cache.clone()
    if out.dtype == torch.float8_e4m3fn:   # torch indexes no fp8 tensor: the bytes, NaN 0x7F or inf-less max
        out = out.view(torch.uint8)
        value = 0x7F if value != value else 0x7E
    if layout == "HND":
        out.transpose(1, 2)[~valid] = value
    else:
        out[~valid] = value
    return out.view(cache.dtype)


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=support.torch_dtype(dtype), device="cuda")


def scales(c):
    """paged_decode's k_scale and v_scale for case c: a number and a device tensor (both spellings)."""
    if not c.fp8:
        return {}
    return dict(k_scale=FP8_SCALES[0], v_scale=torch.full((1,), FP8_SCALES[1], device="cuda"))


def check(out, lse, q, k_cache, v_cache, table, lengths, c):
    options = dict(c.options(), scale=None, **scales(c))
    ref = testing.paged_decode_reference(q, k_cache, v_cache, table, lengths, **options)
    same = testing.paged_decode_reference(q, k_cache, v_cache, table, lengths, **options, precision="same",
                                          fp8_products=c.products)
    return testing.check_attention(out, ref, same, lse), ref


def run(q, k_cache, v_cache, table, lengths, c, **extra):
    """paged_decode into a NaN-poisoned output; (out, lse or None)."""
    out = poisoned(q.shape, c.dtype)
    got = tessera.paged_decode(q, k_cache, v_cache, table, lengths, **c.options(), num_splits=c.num_splits,
                               return_lse=c.return_lse, out=out, fp8_products=c.products, **scales(c), **extra)
    if c.return_lse:
        assert got[0] is out and got[1].shape == (q.shape[0], c.Hq, c.Sq) and got[1].dtype == torch.float32
        return got
    assert got is out
    return out, None


def run_case(c):
    rand = Inputs()
    q, k_cache, v_cache, table, lengths, valid = paged_cache(rand, c)
    out, lse = run(q, k_cache, v_cache, table, lengths, c)
    torch.cuda.synchronize()
    result, ref = check(out, lse, q, k_cache, v_cache, table, lengths, c)
    assert result.ok, f"{c} seed {rand.seed}: {result}"
    # NaN in unused K slots and +inf in unused V slots (0 x inf is NaN too): never read, so bitwise the same.
    bad_k, bad_v = (poisoned_copy(x, valid, c.layout, value) for x, value in ((k_cache, float("nan")),
                                                                                (v_cache, float("inf"))))
    out2, lse2 = run(q, bad_k, bad_v, table, lengths, c)
    torch.cuda.synchronize()
    assert torch.equal(out2, out), f"{c} seed {rand.seed}: unused cache slots changed the output"
    assert lse is None or torch.equal(lse2, lse), f"{c} seed {rand.seed}: unused cache slots changed the LSE"
    return ref


@pytest.mark.parametrize("case", GRID, ids=str)
def test_grid_matches_float64(case):
    run_case(case)


@pytest.mark.parametrize("case", FEATURES, ids=str)
def test_features_match_float64(case):
    ref = run_case(case)
    if 0 in case.lengths:
        assert torch.isneginf(ref.lse[list(case.lengths).index(0)]).all()


@pytest.mark.parametrize("block_size", [16, 64])
def test_cache_leftpad_matches_float64(block_size):
    """cache_leftpad on torch tensors (a set compiled on demand): first keys inside a page, on a page's edge, the only
    key padded away and none; NaN in every slot before a sequence's first key is never read (bitwise the same)."""
    c = Case(lengths=(0, 1, 1000, 4097), block_size=block_size)
    rand = Inputs()
    q, k_cache, v_cache, table, lengths, valid = paged_cache(rand, c)
    pads = torch.tensor([0, 1, 333, 4032], dtype=torch.int32, device="cuda")
    out, lse = run(q, k_cache, v_cache, table, lengths, c, cache_leftpad=pads)
    torch.cuda.synchronize()
    options = dict(c.options(), cache_leftpad=pads)
    ref = testing.paged_decode_reference(q, k_cache, v_cache, table, lengths, **options)
    same = testing.paged_decode_reference(q, k_cache, v_cache, table, lengths, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"{c} seed {rand.seed}: {result}"
    assert (out[:2] == 0).all() and torch.isneginf(lse[:2]).all(), "a sequence without keys gives O = 0, LSE = -inf"
    for b, pad in enumerate(pads.tolist()):
        t = torch.arange(pad, device="cuda")
        valid[table[b, t // block_size].long(), t % block_size] = False
    bad_k, bad_v = (poisoned_copy(x, valid, c.layout, float("nan")) for x in (k_cache, v_cache))
    out2, lse2 = run(q, bad_k, bad_v, table, lengths, c, cache_leftpad=pads)
    torch.cuda.synchronize()
    assert torch.equal(out2, out) and torch.equal(lse2, lse), f"seed {rand.seed}: a padded slot was read"


def test_split_counts_agree():
    """1, 3, the heuristic's and more splits than key tiles give the same result within the rule (CORRECTNESS.md:
    empty partitions change nothing)."""
    rand = Inputs()
    c = Case(lengths=(0, 1, 200, 3000), Sq=3, Hq=8, Hkv=1)
    q, k_cache, v_cache, table, lengths, _ = paged_cache(rand, c)
    for splits in (1, 3, 0, 100):
        out, lse = run(q, k_cache, v_cache, table, lengths, c._replace(num_splits=splits))
        torch.cuda.synchronize()
        result, _ = check(out, lse, q, k_cache, v_cache, table, lengths, c)
        assert result.ok, f"num_splits {splits} seed {rand.seed}: {result}"


def test_stale_partials_never_leak():
    """The split partials are a workspace the runtime reuses, not zeroed: a call whose partials are all NaN (q NaN)
    followed, on the same stream, by a call whose splits are mostly empty gives that call's own result bit for bit
    (every split writes every row, empty ones included)."""
    rand = Inputs()
    c = Case(lengths=(4097, 4097, 4097), Sq=3, num_splits=32)
    q, k_cache, v_cache, table, lengths, _ = paged_cache(rand, c)
    short = torch.tensor([1, 0, 70], dtype=torch.int32, device="cuda")
    clean = [x.clone() for x in run(q, k_cache, v_cache, table, short, c)]
    run(torch.full_like(q, float("nan")), k_cache, v_cache, table, lengths, c)
    again = run(q, k_cache, v_cache, table, short, c)
    torch.cuda.synchronize()
    assert not again[0].isnan().any() and torch.equal(again[0], clean[0]) and torch.equal(again[1], clean[1]), \
        f"seed {rand.seed}"


def test_page_ids_past_65535_and_offsets_past_2_to_the_32():
    """Pages are 64-bit element offsets: a cache of 2^22 + 8 pages (2^32 + 8192 elements, 8 GiB a cache) holding a
    sequence in pages 65535, 65536, 70000 and the last ones reads those pages, not their 16- or 32-bit wraps."""
    free, _ = torch.cuda.mem_get_info()
    if free < 20 * 2**30:
        pytest.skip(f"needs 20 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    rand = Inputs()
    bs, Hkv, D = 16, 1, 64
    pages = 2**32 // (bs * Hkv * D) + 8
    k_cache, v_cache = (torch.empty((pages, bs, Hkv, D), dtype=torch.bfloat16, device="cuda") for _ in range(2))
    ids = [65535, 65536, 70000, pages - 8, pages - 1]
    table = torch.tensor([ids], dtype=torch.int32, device="cuda")
    lengths = torch.tensor([len(ids) * bs - 3], dtype=torch.int32, device="cuda")
    for cache in (k_cache, v_cache):
        cache[ids] = rand((len(ids), bs, Hkv, D), "bf16")
    c = Case(lengths=(int(lengths[0]),), Sq=3, Hq=4, Hkv=Hkv, D=D, block_size=bs, num_splits=2)
    q = rand((1, 3, 4, D), "bf16")
    out, lse = run(q, k_cache, v_cache, table, lengths, c)
    torch.cuda.synchronize()
    result, _ = check(out, lse, q, k_cache, v_cache, table, lengths, c)
    assert result.ok, f"seed {rand.seed}: {result}"
    del k_cache, v_cache
    torch.cuda.empty_cache()


def test_runs_on_the_current_stream():
    """On a side stream that is still busy, the kernels must wait for the copy queued before them."""
    rand = Inputs()
    c = Case(lengths=(3000, 17, 0, 1), num_splits=4)
    q, k_cache, v_cache, table, lengths, _ = paged_cache(rand, c)
    expected = run(q, k_cache, v_cache, table, lengths, c)
    q_new = q.clone()
    q.normal_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        q.copy_(q_new)
        got = run(q, k_cache, v_cache, table, lengths, c)
    side.synchronize()
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), "not on torch's current stream"


@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
def test_attn_combine_merges_a_decode_split_by_hand(out_dtype):
    """tessera.attn_combine on torch tensors: a decode's keys cut into two halves by hand (cache_seqlens for the first,
    cache_leftpad for the second), each half's O (float32) and LSE merged, equal the decode over every key within
    the rule; on a busy side stream, the combine waits for the work queued before it."""
    rand = Inputs()
    c = Case(lengths=(0, 1, 1000, 4097), num_splits=1)
    q, k_cache, v_cache, table, lengths, _ = paged_cache(rand, c)
    whole, whole_lse = run(q, k_cache, v_cache, table, lengths, c)
    half = lengths // 2
    first = run(q, k_cache, v_cache, table, half, c)
    second = run(q, k_cache, v_cache, table, lengths, c, cache_leftpad=half)
    o = torch.stack([first[0], second[0]]).float()
    lse = torch.stack([first[1], second[1]]).transpose(-1, -2)          # (2, B, Sq, Hq): a view
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        got, got_lse = tessera.attn_combine(o, lse, out_dtype=support.torch_dtype(out_dtype))
    side.synchronize()
    assert got.dtype == support.torch_dtype(out_dtype) and got_lse.shape == (4, 1, c.Hq)
    ref = testing.paged_decode_reference(q, k_cache, v_cache, table, lengths, **c.options())
    same = testing.paged_decode_reference(q, k_cache, v_cache, table, lengths, **c.options(), precision="same")
    result = testing.check_attention(got.to(whole.dtype), ref, same, got_lse.transpose(1, 2))
    assert result.ok, f"seed {rand.seed}: {result}"
    assert torch.allclose(got_lse.transpose(1, 2), whole_lse, atol=1e-5, equal_nan=True)


def new_inputs(rand, c, captured):
    """Fresh values, lengths (0 and 1, then random up to the captured table's capacity) and a fresh permutation of
    pages, copied into the captured tensors (q, k_cache, v_cache, block_table, cache_seqlens; NaN in every slot
    without a key); returns copies of them for a direct call."""
    q, k_cache, v_cache, table, lengths = captured
    capacity = table.shape[1] * c.block_size
    lens = (0, 1) + tuple(random.randrange(capacity + 1) for _ in range(len(c.lengths) - 2))
    fresh = paged_cache(rand, c._replace(lengths=lens), fill=float("nan"), pad=0)
    q.copy_(fresh[0])
    for cache, new in zip((k_cache, v_cache), fresh[1:3]):
        cache.fill_(float("nan"))
        cache[:new.shape[0]] = new
    table.fill_(-1)
    table[:, :fresh[3].shape[1]] = fresh[3]
    lengths.copy_(fresh[4])
    return tuple(x.clone() for x in captured)


@pytest.mark.parametrize("planned", (True, False))
def test_cuda_graph_replays_with_new_inputs(planned):
    """A call captured in a CUDA graph, with a plan made beforehand (no warm-up: the plan reserved the workspace) or
    after one call outside the capture on a side stream (torch's recipe, the heuristic's split count), replays for new
    values, lengths and block tables copied into the captured tensors exactly what a direct call with the same options
    gives, and within the rule of float64: lengths are never read on the host, so the captured grid serves them all."""
    rand = Inputs()
    c = Case(lengths=(0,) * 6, Sq=3, Hq=8, Hkv=1, D=128)
    B, columns = len(c.lengths), 4000 // c.block_size + 2
    captured = (rand((B, c.Sq, c.Hq, c.D), c.dtype),
                *(poisoned((3 * B * columns, c.block_size, c.Hkv, c.D), c.dtype) for _ in range(2)),
                torch.full((B, columns), -1, dtype=torch.int32, device="cuda"),
                torch.zeros(B, dtype=torch.int32, device="cuda"))
    new_inputs(rand, c, captured)
    options = dict(c.options(), return_lse=True)
    if planned:
        options["plan"] = tessera.paged_decode_plan(*captured, **options)
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            tessera.paged_decode(*captured, **options)
        torch.cuda.current_stream().wait_stream(side)
    out = poisoned(captured[0].shape, c.dtype)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = tessera.paged_decode(*captured, **options, out=out)
    for _ in range(3):
        inputs = new_inputs(rand, c, captured)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        want_out, want_lse = tessera.paged_decode(*inputs, **options)
        torch.cuda.synchronize()
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse), f"replay != direct call (seed {rand.seed})"
        result, _ = check(out, lse, *inputs, c)
        assert result.ok, f"lengths {inputs[4].tolist()} seed {rand.seed}: {result}"


# ---- The default bundle ----------------------------------------------------------------------------------------------
def test_the_default_bundle_serves_every_variant():
    """The bundle found for this GPU holds, for f16/bf16 x D 64/128/256 x block 16/64, a bottom-right causal
    paged_decode set with every runtime feature, its kernels `_decode` then `_combine`, sharing the workspace
    decode_partials; the default sets serve one-token non-causal calls, and two tokens without the mask raise
    KernelNotFoundError naming the directive that would add a set."""
    dev = tessera.device("cuda")
    bundle = dev.bundle()
    full = {}
    for s in bundle.kernel_sets.values():
        a = s.attributes
        if s.directive == "paged_decode" and all(a.get(f) for f in _decode.FEATURES):
            assert [k.name for k in s.kernels] == [f"{s.name}_decode", f"{s.name}_combine"]
            assert s.roles.get("decode_partials") == "workspace"
            full[(a["dtype"], a["head_dim"], a["block_size"], a.get("mask", "none"))] = s
    wanted = {(d, D, b, "causal_bottom_right") for d in support.DTYPES for D in (64, 128, 256) for b in (16, 64)}
    assert set(full) >= wanted, f"{bundle.directory}: missing {sorted(wanted - set(full))}"
    rand = Inputs()
    c = Case(lengths=(5, 0), Sq=2, causal=False, Hq=8, Hkv=1, D=64)
    q, k_cache, v_cache, table, lengths, _ = paged_cache(rand, c)
    with pytest.raises(tessera.KernelNotFoundError, match=r"mask=none split_kv .*this directive compiles one: "
                                                          r"tessera.paged_decode @pd_bf16_d64_b16_none \{.*mask = "
                                                          r"#tessera.mask<none>"):
        tessera.paged_decode(q, k_cache, v_cache, table, lengths, causal=False)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_cache_write_then_decode_sees_the_new_tokens(layout):
    """paged_cache_write puts each token's rows in its slot, bit for bit (packed-qkv views, a -1 padding slot, a
    K/V cache of one buffer, every other slot unchanged), and a decode over the written cache matches the reference
    on the same cache written by torch indexing."""
    make = Inputs()
    B, Hq, Hkv, D, block, pages = 3, 16, 4, 128, 16, 12
    page_shape = (block, Hkv, D) if layout == "NHD" else (Hkv, block, D)
    kv = make((pages, 2, *page_shape), "bf16")
    k_cache, v_cache = kv[:, 0], kv[:, 1]
    lens = torch.tensor([5, 33, 17], dtype=torch.int32, device="cuda")
    table = make.permutation(pages)[:B * 3].reshape(B, 3).to(torch.int32)
    # One new token per sequence at position len - 1, and a padding token.
    qkv = make((B + 1, Hq + 2 * Hkv, D), "bf16")
    key, value = qkv[:, Hq:Hq + Hkv], qkv[:, Hq + Hkv:]
    pos = (lens - 1).long()
    slots = table[torch.arange(B, device="cuda"), pos // block].long() * block + pos % block
    slots = torch.cat([slots, torch.tensor([-1], device="cuda")])
    expected = kv.clone()
    for t in range(B):
        page, offset = divmod(int(slots[t]), block)
        for i, rows in enumerate((key, value)):
            if layout == "NHD":
                expected[page, i, offset] = rows[t]
            else:
                expected[page, i, :, offset] = rows[t]
    tessera.paged_cache_write(key, value, k_cache, v_cache, slots, kv_layout=layout)
    torch.cuda.synchronize()
    assert torch.equal(kv.view(torch.int16), expected.view(torch.int16)), f"seed {make.seed}"
    q = qkv[:B, None, :Hq]
    o = tessera.paged_decode(q, k_cache, v_cache, table, lens, kv_layout=layout)
    ref = testing.paged_decode_reference(q, k_cache, v_cache, table, lens, kv_layout=layout)
    same = testing.paged_decode_reference(q, k_cache, v_cache, table, lens, kv_layout=layout, precision="same")
    result = testing.check_attention(o, ref, same)
    assert result.ok, f"seed {make.seed}: {result}"


FP8_CASES = [Case(dtype=d, D=D, block_size=b, layout=layout, Sq=sq, num_splits=splits, fp8=True,
                  window_left=window)
             for d, D, b, layout, sq, splits, window in [
                 ("bf16", 128, 16, "NHD", 1, 0, -1), ("bf16", 128, 64, "HND", 3, 3, -1),
                 ("f16", 64, 16, "HND", 1, 1, 100), ("f16", 128, 64, "NHD", 3, 0, -1),
                 ("bf16", 64, 64, "NHD", 1, 40, -1), ("f16", 64, 16, "NHD", 3, 1, 700)]]


@pytest.mark.parametrize("case", FP8_CASES, ids=str)
def test_fp8_caches_match_float64(case):
    """OCP e4m3 caches with per-tensor scales (a number and a device tensor) against the float64 reference on the
    dequantised cache, with CORRECTNESS.md's rule against dequantise-to-the-query-dtype attention; unused slots
    NaN (0x7F) or 448 change nothing."""
    run_case(case)


PRODUCT_CASES = [Case(dtype=d, D=128, block_size=b, layout=layout, Sq=sq, num_splits=splits, fp8=True, products=True,
                      window_left=window, softcap=cap)
                 for d, b, layout, sq, splits, window, cap in [
                     ("bf16", 16, "NHD", 1, 0, -1, 0.0), ("f16", 64, "HND", 3, 3, -1, 0.0),
                     ("bf16", 64, "NHD", 1, 40, 700, 0.0), ("f16", 16, "NHD", 3, 1, 100, 30.0)]]


@pytest.mark.parametrize("case", PRODUCT_CASES, ids=str)
def test_fp8_products_match_float64(case):
    """fp8_products on the e4m3 mma.sync (V^T transposed in LDS, its columns reordered for P): the float64
    reference on the dequantised cache, with CORRECTNESS.md's rule against the same products in the cache's e4m3
    (queries rounded per row, P stretched and rounded); unused slots change nothing."""
    run_case(case)


def test_fp8_cache_write_quantises_and_decode_reads_it():
    """paged_cache_write into OCP e4m3 caches: key / k_scale in float32, saturated at 448, rounded to nearest even,
    bit for bit torch's conversion; a decode of the written cache matches the reference."""
    make = Inputs()
    B, Hq, Hkv, D, block, pages = 3, 16, 4, 128, 16, 12
    k_scale, v_scale = 0.05, torch.full((1,), 0.04, device="cuda")
    caches = [torch.zeros((pages, block, Hkv, D), device="cuda").to(torch.float8_e4m3fn) for _ in range(2)]
    lens = torch.tensor([1, 16, 17], dtype=torch.int32, device="cuda")
    table = make.permutation(pages)[:B * 2].reshape(B, 2).to(torch.int32)
    qkv = make((48, Hq + 2 * Hkv, D), "bf16")
    qkv[0, Hq, :2] = torch.tensor([1e5, -1e5])   # saturated
    key, value = qkv[:, Hq:Hq + Hkv], qkv[:, Hq + Hkv:]
    # Every token of every sequence written at once: slot of token t of sequence b.
    seq = torch.cat([torch.full((int(n),), b) for b, n in enumerate(lens.tolist())]).cuda()
    pos = torch.cat([torch.arange(int(n)) for n in lens.tolist()]).cuda()
    slots = table[seq, pos // block].long() * block + pos % block
    T = slots.numel()
    tessera.paged_cache_write(key, value, *caches, slots, k_scale=k_scale, v_scale=v_scale)
    torch.cuda.synchronize()
    for cache, rows, scale in ((caches[0], key, k_scale), (caches[1], value, float(v_scale))):
        want = (rows[:T].float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        got = cache.view(torch.uint8)[slots // block, slots % block]   # torch indexes no fp8 tensor
        assert torch.equal(got, want.view(torch.uint8)), f"seed {make.seed}"
    q = make((B, 1, Hq, D), "bf16")
    o = tessera.paged_decode(q, *caches, table, lens, k_scale=k_scale, v_scale=v_scale)
    options = dict(k_scale=k_scale, v_scale=v_scale)
    ref = testing.paged_decode_reference(q, *caches, table, lens, **options)
    same = testing.paged_decode_reference(q, *caches, table, lens, **options, precision="same")
    result = testing.check_attention(o, ref, same)
    assert result.ok, f"seed {make.seed}: {result}"


@pytest.mark.parametrize("dtype, block_size, Sq, splits", [("bf16", 16, 1, 0), ("f16", 64, 3, 3)])
def test_per_token_fp8_cache_written_then_decoded(dtype, block_size, Sq, splits):
    """The serving flow with per-token scales: paged_cache_write quantises every token's K and V rows (magnitudes
    varying by e^±3 across rows) into OCP e4m3 pages, NaN (0x7F) everywhere else, and stores each row's scale in
    (num_pages, Hkv, block_size) tensors, NaN everywhere else; paged_decode of that cache matches the float64
    reference on the dequantised cache by CORRECTNESS.md's rule (any NaN it read would fail it), and the scales are
    each row's absmax / 448."""
    make = Inputs()
    c = Case(lengths=(0, 1, 1000, 4097), Sq=Sq, dtype=dtype, block_size=block_size, num_splits=splits)
    q, rows_k, rows_v, table, lengths, valid = paged_cache(make, c)
    pages, bs, Hkv, D = rows_k.shape
    # Every token's slot, and its rows from the random cache, each scaled by its own magnitude.
    page, slot = valid.nonzero(as_tuple=True)
    slots = page * bs + slot
    key, value = ((x[page, slot].float() * torch.exp(make((len(slots), Hkv, 1), "f32"))).to(x.dtype)
                  for x in (rows_k, rows_v))
    caches = [torch.full((pages, bs, Hkv, D), 0x7F, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
              for _ in range(2)]
    both = torch.full((2, pages, Hkv, bs), float("nan"), device="cuda")
    scales = dict(k_scale=both[0], v_scale=both[1])
    tessera.paged_cache_write(key, value, *caches, slots, **scales)
    torch.cuda.synchronize()
    for scale, rows in zip(both, (key, value)):
        # The writer divides correctly rounded; torch divides a CUDA tensor by a Python number through its
        # reciprocal (an ulp off at times), so the quotient is taken in float64 (exact once rounded to float32).
        want = (rows.float().abs().amax(-1).double() / 448).float()
        assert torch.equal(scale[page, :, slot], torch.where(want == 0, 1.0, want)), f"seed {make.seed}"
    out = poisoned(q.shape, c.dtype)
    _, lse = tessera.paged_decode(q, *caches, table, lengths, **c.options(), num_splits=splits, return_lse=True,
                                  out=out, **scales)
    torch.cuda.synchronize()
    options = dict(c.options(), **scales)
    ref = testing.paged_decode_reference(q, *caches, table, lengths, **options)
    same = testing.paged_decode_reference(q, *caches, table, lengths, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"seed {make.seed}: {result}"


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_contiguous_caches_match_float64(layout):
    """block_table=None: (B, capacity, Hkv, D) caches (HND (B, Hkv, capacity, D)) sliced from a larger capacity, NaN
    past each length, against the float64 reference on an explicit paged copy of the same rows."""
    make = Inputs()
    B, cap, Hq, Hkv, D = 4, 4096, 32, 8, 128
    lens = torch.tensor([4096, 0, 1, 2500], dtype=torch.int32, device="cuda")
    rows = [make((B, cap + 64, Hkv, D), "bf16")[:, :cap] for _ in range(2)]   # NHD rows, batch stride 4160 tokens
    for x in rows:
        for b, n in enumerate(lens.tolist()):
            x[b, n:] = float("nan")
    caches = rows
    if layout == "HND":   # views of (B, Hkv, cap + 64, D) buffers
        caches = [torch.full((B, Hkv, cap + 64, D), float("nan"), dtype=torch.bfloat16, device="cuda")
                  for _ in rows]
        for c, x in zip(caches, rows):
            c[:, :, :cap] = x.transpose(1, 2)
        caches = [c[:, :, :cap] for c in caches]
    q = make((B, 1, Hq, D), "bf16")
    o, lse = tessera.paged_decode(q, *caches, None, lens, kv_layout=layout, return_lse=True)
    pages = cap // 16
    table = make.permutation(B * pages).to(torch.int32).view(B, pages)
    paged = [torch.empty(B * pages, 16, Hkv, D, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    for p, x in zip(paged, rows):
        p[table.flatten().long()] = x.reshape(B * pages, 16, Hkv, D)
    ref = testing.paged_decode_reference(q, *paged, table, lens)
    same = testing.paged_decode_reference(q, *paged, table, lens, precision="same")
    result = testing.check_attention(o, ref, same, lse)
    assert result.ok, f"{layout} seed {make.seed}: {result}"

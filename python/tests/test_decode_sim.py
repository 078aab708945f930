"""tessera.paged_decode on the simulator (numpy arrays, device='sim:<target>') against the float64 reference with
CORRECTNESS.md's rule (2x the same-precision error, NaN never passes): small caches on gfx942, gfx950, gfx1100 and
sm_90 with block sizes 1, 16 and 64, NHD and HND, 1, 3 and 8 query tokens (bottom-right causal), GQA 4:1 and 8:1 and
MQA, head_dim 32, 64, 96, 128 and 256, a window, a soft cap, 1, 3, 37 and more splits than key tiles, zero and one-token
sequences; fp8 caches with per-tensor scales; contiguous caches; cache_leftpad (first keys in and on the edge of a page, a
sequence padded to its end; slots and block-table entries before the first key poisoned). Poison: unused page slots and
unreferenced pages hold NaN and block-table entries past each sequence -1 or INT32_MAX, and the output must equal,
bit for bit, the run on a clean cache. The bundles are compiled by the build's tessera-compile from directives
written here; skipped without one, without the sim plugin, or for a target without the generator. bf16 cases need
ml_dtypes."""
from typing import NamedTuple

import pytest

import support
from support import np
import tessera
from tessera import testing

INT32_MAX = 2**31 - 1


class Case(NamedTuple):
    id: str
    dtype: str
    D: int
    block_size: int
    lens: tuple                 # cache_seqlens per sequence (the new tokens included)
    Sq: int = 1
    Hq: int = 8
    Hkv: int = 2
    layout: str = "NHD"
    window_left: int = -1
    softcap: float = 0.0
    num_splits: int = 1
    fp8: bool = False           # caches in the target's fp8 format (fp8_format), per-tensor scales
    per_token: bool = False     # fp8 with per-token scales (num_pages, Hkv, block_size)
    wide_queries: bool = False  # query rows scaled by 2^-60 .. 2^60 (past f16's range both ways), one all zero
    products: bool = False      # fp8_products: QK and PV on the fp8 matrix instructions (gfx942, gfx950, sm_90)
    sink: bool = False          # every query scores 6 against its sequence's first key and 0 against the others
    sink_logits: bool = False   # sinks: a logit per query head (standard normal times 3) in every row's denominator
    alibi: str = ""             # ALiBi slopes: "h" (Hq,), "bh" (B, Hq)
    leftpad: tuple = ()         # cache_leftpad per sequence: its first key (the slots before hold NaN when poisoned)

    def directive(self, target):
        granularity = "per_token" if self.per_token else "per_tensor"
        kv = (f"kv_dtype = {fp8_format(target)}, kv_scale = #tessera.kv_scale<{granularity}>, " if self.fp8 else "")
        suffix = ("_fp8" if self.fp8 else "") + ("_pt" if self.per_token else "") + \
            ("_products" if self.products else "") + ("_sinks" if self.sink_logits else "") + \
            ("_alibi" if self.alibi else "") + ("_leftpad" if self.leftpad else "")
        return (f"tessera.paged_decode @pd_{self.dtype}_d{self.D}_b{self.block_size}{suffix} "
                f"{{dtype = {self.dtype}, {kv}head_dim = {self.D}, block_size = {self.block_size}, "
                "mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv" +
                (", fp8_products" if self.products else "") + (", sinks" if self.sink_logits else "") +
                (", alibi" if self.alibi else "") + (", cache_leftpad" if self.leftpad else "") + "}")

    def runs_on(self, target):
        """fp8_products needs fp8 matrix instructions: gfx942's and gfx950's MFMA, sm_90's mma.sync (not gfx11's
        WMMA)."""
        return not self.products or target in ("gfx942", "gfx950", "sm_90")


def fp8_format(target):
    """The fp8 KV format of a target: gfx942's FNUZ e4m3, OCP e4m3 elsewhere."""
    return "f8E4M3FNUZ" if target == "gfx942" else "f8E4M3FN"


def fp8_dtype(target):
    return {"f8E4M3FNUZ": support.ml_dtypes.float8_e4m3fnuz, "f8E4M3FN": support.ml_dtypes.float8_e4m3fn}[
        fp8_format(target)]


CASES = [
    Case("b16-gqa4-split3", "bf16", 128, 16, (37, 1, 80), num_splits=3),
    Case("b1-sq3-gqa8", "f16", 64, 1, (9, 20), Sq=3, Hkv=1),
    Case("b64-hnd-window-softcap", "bf16", 64, 64, (130, 64, 3), layout="HND", window_left=40, softcap=6.0),
    Case("b16-empty-and-more-splits-than-tiles", "f16", 64, 16, (0, 5, 70), Sq=3, num_splits=9),
    # 37 splits: every combine wave takes several turns, the last one past the splits, most splits empty.
    Case("b16-37-splits", "f16", 64, 16, (0, 2400, 45), num_splits=37),
    Case("d256-sq3-split2", "f16", 256, 16, (33, 48), Sq=3, Hq=4, Hkv=2, num_splits=2),
    Case("d96-b16-gqa4-split2", "f16", 96, 16, (50, 17), num_splits=2),
    Case("d32-b64-sq8-mqa", "f16", 32, 64, (70, 8), Sq=8, Hq=4, Hkv=1),
    Case("fp8-b16-gqa4-split3", "bf16", 64, 16, (37, 1, 80), num_splits=3, fp8=True),
    Case("fp8-b1-sq3-hnd-window", "f16", 64, 1, (9, 20), Sq=3, Hkv=1, layout="HND", window_left=6, fp8=True),
    Case("fp8-per-token-b16-gqa4-split3-window", "bf16", 128, 16, (37, 1, 80), num_splits=3, window_left=50, fp8=True,
         per_token=True),
    Case("fp8-per-token-d96-b1-sq3-hnd-softcap", "f16", 96, 1, (9, 20), Sq=3, Hkv=1, layout="HND", softcap=5.0,
         fp8=True, per_token=True),
    Case("fp8-per-token-b64-gqa8-split2", "f16", 64, 64, (130, 3), Hkv=1, num_splits=2, fp8=True, per_token=True),
    Case("fp8-bf16-query-rows-of-any-magnitude", "bf16", 128, 16, (20, 37), num_splits=2, fp8=True, wide_queries=True),
    Case("fp8-per-token-bf16-query-rows-of-any-magnitude", "bf16", 64, 16, (33,), Sq=3, fp8=True, per_token=True,
         wide_queries=True),
    # fp8_products: the rows of P span many key tiles of both split halves, a window edge and a soft cap, queries of
    # every magnitude, several query tokens, GQA 8, pages of 1.
    Case("fp8-products-b16-gqa4-split3", "bf16", 128, 16, (37, 1, 80), num_splits=3, fp8=True, products=True),
    Case("fp8-products-b1-sq3-gqa8-hnd-window-softcap", "f16", 64, 1, (9, 40), Sq=3, Hkv=1, layout="HND",
         window_left=20, softcap=5.0, fp8=True, products=True),
    Case("fp8-products-query-rows-of-any-magnitude", "bf16", 64, 64, (100, 37), num_splits=2, fp8=True,
         wide_queries=True, products=True),
    # An attention sink: P is 1 at the first key and e^-6 (below fp8's normal range unless stretched into it,
    # AttnPlan::pStretch) at the 299 others, which carry 43% of the row's weight.
    # An empty sequence (O = 0, LSE = -inf) and a single key (P = 1 stretched: exactly V) beside a long one.
    Case("fp8-products-empty-and-one-key", "bf16", 128, 16, (0, 1, 300), num_splits=2, fp8=True, products=True),
    Case("fp8-products-attention-sink", "f16", 64, 16, (300,), Hq=2, Hkv=1, fp8=True, products=True, sink=True),
    # Sink logits: once per row, split (the combine adds it) or not; an empty cache gives LSE = the sink.
    Case("sinks-b16-gqa4-split3-empty", "bf16", 64, 16, (0, 37, 80), num_splits=3, sink_logits=True),
    Case("sinks-sq3-gqa8-window", "f16", 64, 16, (9, 40), Sq=3, Hkv=1, window_left=12, sink_logits=True),
    # ALiBi: each (head, token) row its own head's slope and position; split or not, per sequence or not.
    Case("alibi-bh-sq3-gqa4-split2", "f16", 64, 16, (0, 37, 90), Sq=3, alibi="bh", num_splits=2),
    Case("alibi-h-softcap-window-sinks", "bf16", 64, 64, (70, 5), Hq=4, Hkv=1, window_left=40, softcap=8.0,
         alibi="h", sink_logits=True),
    # cache_leftpad: first keys inside a page and on its edge, one sequence padded to its end (no key); pages of 16
    # (each key's page looked up) and of 64 (a tile from an unaligned first key spans two pages), split or not.
    Case("leftpad-b16-gqa4-split3-empty", "bf16", 128, 16, (37, 9, 80), num_splits=3, leftpad=(5, 9, 32)),
    Case("leftpad-b64-sq3-hnd-window-alibi", "f16", 64, 64, (130, 70), Sq=3, layout="HND", window_left=40, alibi="bh",
         leftpad=(61, 0)),
    Case("leftpad-fp8-per-token-b16-split2", "f16", 64, 16, (50, 21), num_splits=2, fp8=True, per_token=True,
         leftpad=(17, 3)),
]
K_SCALE, V_SCALE = 0.02, 0.03    # fp8 caches hold N(0, 1) / scale, saturated at the format's largest value


def usable(c):
    return (c.dtype != "bf16" and not c.fp8) or support.ml_dtypes is not None


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A temporary bundle per target, searched first (TESSERA_BUNDLE_PATH). Yields {target: compile error}."""
    def text(target):
        return "\n".join(sorted({c.directive(target) for c in CASES if usable(c) and c.runs_on(target)})) + "\n"
    yield from support.sim_bundles(tmp_path_factory, "decode-bundles", {t: text(t) for t in support.SIM_TARGETS})


def quantized(rows, scale, fp8):
    """vLLM's fp8 cache write: rows / scale in float32, saturated at the format's largest value, rounded to nearest
    even (scale: a number or an array broadcasting against rows)."""
    largest = float(support.ml_dtypes.finfo(fp8).max)
    return np.clip(rows.astype(np.float32) / np.float32(scale), -largest, largest).astype(fp8)


def token_scales(rows, fp8):
    """Per-token scales of rows (..., D) as the writer makes them: absmax (NaN ignored) / the format's largest value
    in float32 (1 for an all-zero row)."""
    amax = np.fmax.reduce(np.abs(rows.astype(np.float32)), axis=-1)     # NaN ignored
    return np.where(amax == 0, np.float32(1), amax / np.float32(support.ml_dtypes.finfo(fp8).max)).astype(np.float32)


def cache_of(c, rng, max_blocks, pages, target):
    """(k_cache, v_cache, block_table, scales): random caches of `pages` pages in c's layout (fp8: N(0, 1) quantised
    with K_SCALE and V_SCALE as vLLM's writer does; per-token: rows of random magnitudes quantised with their own
    scales, given as views (pages, Hkv, block_size) of one (2, pages, block_size, Hkv) array), each sequence's pages
    a random choice of distinct ones. scales: paged_decode's k_scale and v_scale (empty without fp8)."""
    shape = (pages, c.block_size, c.Hkv, c.D) if c.layout == "NHD" else (pages, c.Hkv, c.block_size, c.D)
    scales = {}
    if c.per_token:
        fp8 = fp8_dtype(target)
        rows = [rng.standard_normal(shape) * np.exp(rng.standard_normal(shape[:3] + (1,))) for _ in range(2)]
        tokens = [token_scales(x, fp8) for x in rows]        # shape[:3]: the cache layout's (pages, ., .)
        both = np.empty((2, pages, c.block_size, c.Hkv), np.float32).transpose(0, 1, 3, 2)   # (2, pages, Hkv, bs)
        for i, token in enumerate(tokens):
            both[i] = token if c.layout == "HND" else token.transpose(0, 2, 1)
        k, v = (quantized(x, token[..., None], fp8) for x, token in zip(rows, tokens))
        scales = dict(k_scale=both[0], v_scale=both[1])
    elif c.fp8:
        k, v = (quantized(rng.standard_normal(shape), s, fp8_dtype(target)) for s in (K_SCALE, V_SCALE))
        # v_scale as a device array, k_scale as a number: both spellings
        scales = dict(k_scale=K_SCALE, v_scale=np.full(1, V_SCALE, np.float32))
    else:
        k, v = (rng.standard_normal(shape).astype(support.numpy_dtype(c.dtype)) for _ in range(2))
    table = rng.permutation(pages)[:len(c.lens) * max_blocks].reshape(len(c.lens), max_blocks).astype(np.int32)
    return k, v, table, scales


def poison(c, k, v, table, scales):
    """Copies with NaN (of the cache's format) in every cache slot no sequence reads (and in its per-token scales)
    and -1 / INT32_MAX past each sequence's pages. Returns (k, v, table, scales)."""
    k, v, table = k.copy(), v.copy(), table.copy()
    used = np.zeros(k.shape[0] * c.block_size, bool)
    for b, length in enumerate(c.lens):
        first = c.leftpad[b] if c.leftpad else 0
        used_pages = -(-length // c.block_size)
        for j in range(first, length):
            used[table[b, j // c.block_size] * c.block_size + j % c.block_size] = True
        table[b, used_pages:] = -1 if b % 2 else INT32_MAX
        table[b, :first // c.block_size] = INT32_MAX if b % 2 else -1     # pages wholly before the first key
    for cache in (k, v):
        slots = cache if c.layout == "NHD" else cache.transpose(0, 2, 1, 3)   # (pages, bs, Hkv, D) view
        slots.reshape(-1, c.Hkv, c.D)[~used] = np.nan
    if c.per_token:
        both = np.stack([scales["k_scale"], scales["v_scale"]]).transpose(0, 1, 3, 2).copy()   # (2, pages, bs, Hkv)
        both.reshape(2, -1, c.Hkv)[:, ~used] = np.nan
        scales = dict(k_scale=both[0].transpose(0, 2, 1), v_scale=both[1].transpose(0, 2, 1))
    return k, v, table, scales


@pytest.mark.parametrize("target, case", [pytest.param(t, c, id=f"{t}-{c.id}") for t in support.SIM_TARGETS
                                          for c in CASES])
def test_paged_decode_matches_float64_and_ignores_poison(bundles, target, case):
    c = case
    if not usable(c):
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")
    if not c.runs_on(target):
        pytest.skip(f"fp8_products is not generated for {target} (no fp8 matrix instruction Tessera emits there)")
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    max_blocks = max(1, -(-max(c.lens) // c.block_size)) + 1
    k, v, table, scales = cache_of(c, rng, max_blocks, pages=3 * len(c.lens) * max_blocks, target=target)
    lens = np.array(c.lens, np.int32)
    q = rng.standard_normal((len(c.lens), c.Sq, c.Hq, c.D))
    if c.wide_queries:
        q *= 2.0 ** rng.choice([-60, -30, -14, 0, 14, 20, 60], size=q.shape[:3])[..., None]
        q[0, 0, 0] = 0
    if c.sink:   # K's first dimension 0 but 4 at each sequence's first key (NHD); q = 12 e_0: scores 6 and 0 (scale 1/8)
        k[..., 0] = 0
        k[table[:, 0], 0, :, 0] = 4 / K_SCALE
        q[:] = 0
        q[..., 0] = 12
    q = q.astype(support.numpy_dtype(c.dtype))
    sinks = (rng.standard_normal(c.Hq) * 3).astype(np.float32) if c.sink_logits else None
    shape = {"": None, "h": (c.Hq,), "bh": (len(c.lens), c.Hq)}[c.alibi]
    slopes = None if shape is None else rng.uniform(0.05, 1.0, shape).astype(np.float32)
    leftpad = np.array(c.leftpad, np.int32) if c.leftpad else None
    options = dict(kv_layout=c.layout, window_left=c.window_left, softcap=c.softcap, sinks=sinks,
                   alibi_slopes=slopes, cache_leftpad=leftpad, **scales)

    def run(k, v, table, **poisoned):
        out = np.full(q.shape, np.nan, q.dtype)
        got, lse = tessera.paged_decode(q, k, v, table, lens, **{**options, **poisoned}, num_splits=c.num_splits,
                                        out=out, return_lse=True, fp8_products=c.products, device=dev)
        assert got is out
        return out, lse
    out, lse = run(k, v, table)
    ref = testing.paged_decode_reference(q, k, v, table, lens, **options)
    same = testing.paged_decode_reference(q, k, v, table, lens, **options, precision="same",
                                          fp8_products=c.products)
    result = testing.check_attention(out, ref, same, lse=lse)
    assert result.ok, f"{target} {c} seed {seed}: {result}"
    for b, length in enumerate(c.lens):
        if length == (c.leftpad[b] if c.leftpad else 0):
            empty_lse = np.broadcast_to(sinks[:, None], lse[b].shape) if c.sink_logits else -np.inf
            assert (out[b] == 0).all() and (lse[b] == empty_lse).all(), \
                "an empty cache gives O = 0, LSE = -inf (with sinks: the sink)"
    *poisoned, poisoned_scales = poison(c, k, v, table, scales)
    poisoned_out, poisoned_lse = run(*poisoned, **poisoned_scales)
    assert (poisoned_out.view(np.uint16) == out.view(np.uint16)).all(), \
        f"{target} {c.id}: NaN in unused slots or poisoned table entries changed the output (seed {seed})"
    assert np.array_equal(poisoned_lse, lse, equal_nan=True)


class WriteCase(NamedTuple):
    id: str
    dtype: str
    D: int
    block_size: int
    layout: str
    shared: bool      # k_cache and v_cache are the halves of one (pages, 2, ...) buffer
    head_pad: int     # key and value rows of Hkv * (D + head_pad): a head stride off 16-byte vectors when not 0
    fp8: bool = False   # caches in the target's fp8 format: the writer quantises
    per_token: bool = False     # fp8 with per-token scales: the writer computes and stores each row's scale


WRITE_CASES = [
    WriteCase("nhd-packed-qkv", "f16", 64, 16, "NHD", False, 0),
    WriteCase("hnd-shared-unaligned-heads", "f16", 64, 1, "HND", True, 3),
    WriteCase("bf16-d128-shared-nhd", "bf16", 128, 16, "NHD", True, 0),
    WriteCase("fp8-bf16-nhd-packed-qkv", "bf16", 64, 16, "NHD", False, 0, fp8=True),
    WriteCase("fp8-f16-hnd-shared-unaligned-heads", "f16", 64, 1, "HND", True, 3, fp8=True),
    WriteCase("fp8-per-token-bf16-d128-nhd", "bf16", 128, 16, "NHD", False, 0, fp8=True, per_token=True),
    WriteCase("fp8-per-token-f16-d96-hnd-unaligned-heads", "f16", 96, 1, "HND", True, 3, fp8=True, per_token=True),
]


@pytest.mark.parametrize("target, case", [pytest.param(t, c, id=f"{t}-{c.id}") for t in support.SIM_TARGETS
                                          for c in WRITE_CASES])
def test_paged_cache_write_scatters_tokens_into_their_slots(bundles, target, case):
    """tessera.paged_cache_write (the sets' `_cache_write` kernel): each token's key and value rows land in the slot
    slot_mapping names, bit for bit; padding slots (-1) and the rows of key past slot_mapping write nothing, and
    every other byte of the caches keeps its value."""
    c = case
    if not usable(c):
        pytest.skip("bf16 and fp8 numpy arrays need ml_dtypes (not installed)")
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    rng = np.random.default_rng(7)
    dt = fp8_dtype(target) if c.fp8 else support.numpy_dtype(c.dtype)
    Hkv, T = 2, 11
    pages = max(5, -(-(T + 2) // c.block_size))
    page_shape = (c.block_size, Hkv, c.D) if c.layout == "NHD" else (Hkv, c.block_size, c.D)
    if c.shared:
        kv = rng.standard_normal((pages, 2, *page_shape)).astype(dt)
        k_cache, v_cache = kv[:, 0], kv[:, 1]
    else:
        k_cache, v_cache = (rng.standard_normal((pages, *page_shape)).astype(dt) for _ in range(2))
    # key and value: views of one packed (T + 2, 3, Hkv, D + pad) tensor, as from a fused qkv projection.
    qkv = rng.standard_normal((T + 2, 3, Hkv, c.D + c.head_pad)).astype(support.numpy_dtype(c.dtype))
    key, value = qkv[:, 1, :, :c.D], qkv[:, 2, :, :c.D]
    scales = dict(k_scale=K_SCALE, v_scale=np.full(1, V_SCALE, np.float32)) if c.fp8 else {}
    if c.fp8 and not c.per_token:
        qkv[3, 1, 0, :4] = [1e4, -1e4, 3e-7, -0.0]   # saturated, saturated, subnormal, negative zero
    stored = {id(key): quantized(key, K_SCALE, dt), id(value): quantized(value, V_SCALE, dt)} if c.fp8 else {}
    if c.per_token:
        qkv[3, 1, 0] = 0                               # an all-zero row: scale 1
        qkv[4, 2, 1, :3] = [np.nan, 1e4, -2.0]         # NaN stays NaN, the rest scaled by the largest finite
        qkv[5, 1] *= np.exp(4 * rng.standard_normal((Hkv, 1)))   # rows of different magnitudes
        # Scales (pages, Hkv, block_size) as views of one (2, pages, block_size, Hkv) array, poisoned: written
        # slots change, no other.
        both = np.full((2, pages, c.block_size, Hkv), np.nan, np.float32).transpose(0, 1, 3, 2)
        scales = dict(k_scale=both[0], v_scale=both[1])
        row_scales = {id(rows): token_scales(rows, dt) for rows in (key, value)}    # (T + 2, Hkv)
        stored = {id(rows): quantized(rows, row_scales[id(rows)][..., None], dt) for rows in (key, value)}
        expected_scales = [x.copy() for x in (both[0], both[1])]
    slots = rng.permutation(pages * c.block_size)[:T].astype(np.int64)
    slots[[2, 7]] = -1
    slots[0] = pages * c.block_size - 1            # the cache's last slot
    expected_k, expected_v = k_cache.copy(), v_cache.copy()
    for t, s in enumerate(slots):
        if s >= 0:
            for expected, rows in ((expected_k, key), (expected_v, value)):
                rows = stored.get(id(rows), rows)
                page, offset = divmod(int(s), c.block_size)
                if c.layout == "NHD":
                    expected[page, offset] = rows[t]
                else:
                    expected[page, :, offset] = rows[t]
            if c.per_token:
                for expected, rows in zip(expected_scales, (key, value)):
                    expected[page, :, offset] = row_scales[id(rows)][t]
    tessera.paged_cache_write(key, value, k_cache, v_cache, slots, kv_layout=c.layout, **scales, device=dev)
    bits = np.uint8 if c.fp8 else np.uint16
    for name, got, expected in (("k_cache", k_cache, expected_k), ("v_cache", v_cache, expected_v)):
        nan = np.isnan(expected.astype(np.float32))     # NaN stays NaN (of whichever sign)
        assert (got.view(bits)[~nan] == expected.view(bits)[~nan]).all(), f"{target} {c.id}: {name} differs"
        assert np.isnan(got[nan].astype(np.float32)).all(), f"{target} {c.id}: {name} lost a NaN"
    if c.per_token:
        for name, got, expected in zip(("k_scale", "v_scale"), (scales["k_scale"], scales["v_scale"]),
                                       expected_scales):
            assert (got.view(np.uint32) == expected.view(np.uint32)).all(), f"{target} {c.id}: {name} differs"


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_contiguous_cache_takes_the_block_size_of_the_feature_sets(bundles, target):
    """A contiguous cache with sinks runs as pages of the block size of the bundle's sets with sinks (f16 head_dim 64:
    16), not of the largest plain one (64, which has no sinks set: a KernelNotFoundError with kernels on demand off):
    bit for bit the call on those pages through a block table."""
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    rng = np.random.default_rng(8)
    B, cap, Hq, Hkv, D = 2, 64, 8, 1, 64
    k, v = rng.standard_normal((2, B, cap, Hkv, D)).astype(np.float16)
    q = rng.standard_normal((B, 1, Hq, D)).astype(np.float16)
    sinks, lens = rng.standard_normal(Hq).astype(np.float32), np.array([40, 64], np.int32)
    out = tessera.paged_decode(q, k, v, None, lens, sinks=sinks, num_splits=1, device=dev)
    table = np.arange(B * cap // 16, dtype=np.int32).reshape(B, -1)
    want = tessera.paged_decode(q, k.reshape(-1, 16, Hkv, D), v.reshape(-1, 16, Hkv, D), table, lens, sinks=sinks,
                                num_splits=1, device=dev)
    assert (out.view(np.uint16) == want.view(np.uint16)).all()


@pytest.mark.parametrize("target", support.SIM_TARGETS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_contiguous_caches_run_as_pages(bundles, target, layout):
    """block_table=None: (B, capacity, Hkv, D) caches (HND (B, Hkv, capacity, D)), sliced from a larger capacity so the
    batch stride is not capacity's, against the float64 reference on an independent paged copy (a random
    permuted table) of the same rows, NaN past each length harmless; and a capacity no set's block size divides is
    a KernelNotFoundError naming a directive that serves it."""
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    rng = np.random.default_rng(3)
    B, cap, Hq, Hkv, D, Sq = 3, 80, 8, 2, 64, 3
    lens = np.array([37, 0, 80], np.int32)
    nhd = rng.standard_normal((2, B, cap + 16, Hkv, D)).astype(np.float16)[:, :, :cap]   # batch stride 96 tokens
    for b, n in enumerate(lens):
        nhd[:, b, n:] = np.nan                         # never read
    k, v = (x if layout == "NHD" else np.ascontiguousarray(x.transpose(0, 2, 1, 3))[:, :, :cap]
            for x in (nhd[0], nhd[1]))
    if layout == "HND":   # the same batch-stride padding in HND
        pad = np.full((2, B, Hkv, cap + 16, D), np.nan, np.float16)
        pad[0, :, :, :cap], pad[1, :, :, :cap] = k, v
        k, v = pad[0][:, :, :cap], pad[1][:, :, :cap]
    q = rng.standard_normal((B, Sq, Hq, D)).astype(np.float16)
    out, lse = tessera.paged_decode(q, k, v, None, lens, kv_layout=layout, return_lse=True, num_splits=1, device=dev)
    # The reference: the rows copied into pages of 16 at random places.
    per_seq = cap // 16
    table = rng.permutation(B * per_seq * 2)[:B * per_seq].reshape(B, per_seq).astype(np.int32)
    pages = [np.zeros((B * per_seq * 2, 16, Hkv, D), np.float16) for _ in range(2)]
    for b in range(B):
        for j in range(per_seq):
            for page, x in zip(pages, (nhd[0], nhd[1])):
                page[table[b, j]] = x[b, 16 * j:16 * j + 16]
    ref = testing.paged_decode_reference(q, *pages, table, lens)
    same = testing.paged_decode_reference(q, *pages, table, lens, precision="same")
    result = testing.check_attention(out, ref, same, lse=lse)
    assert result.ok, f"{target} {layout}: {result}"
    if support.ml_dtypes is None:
        return
    # The bundle's bf16 head_dim 64 block sizes (64 and 16 today) are listed; none divides 36.
    with pytest.raises(tessera.KernelNotFoundError, match=r"a contiguous cache of capacity 36 .* block sizes "
                                                          r"(\d+, )*\d+; this directive compiles one: "
                                                          r"tessera.paged_decode @pd_bf16_d64_b4 \{dtype = bf16, "
                                                          r"head_dim = 64, block_size = 4"):
        odd = np.zeros((B, 36, Hkv, D), support.ml_dtypes.bfloat16)
        tessera.paged_decode(q.astype(odd.dtype), odd, odd, None, lens, device=dev)


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_per_token_plans(bundles, target):
    """paged_decode_plan with per-token scales picks the per-token set and serves calls with them; a per-tensor
    call does not fit it (InputError naming both)."""
    if support.ml_dtypes is None:
        pytest.skip("fp8 numpy arrays need ml_dtypes (not installed)")
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    c = next(x for x in CASES if x.id == "fp8-per-token-b64-gqa8-split2")
    dev = support.sim_device(target)
    rng = np.random.default_rng(5)
    k, v, table, scales = cache_of(c, rng, max_blocks=4, pages=24, target=target)
    lens = np.array(c.lens, np.int32)
    q = rng.standard_normal((len(c.lens), 1, c.Hq, c.D)).astype(np.float16)
    plan = tessera.paged_decode_plan(q, k, v, table, lens, **scales, device=dev)
    assert plan.call.kv_scale == "per_token" and plan.kernel_set.attributes["kv_scale"] == "per_token"
    out = tessera.paged_decode(q, k, v, table, lens, **scales, plan=plan, device=dev)
    ref = testing.paged_decode_reference(q, k, v, table, lens, **scales)
    same = testing.paged_decode_reference(q, k, v, table, lens, **scales, precision="same")
    assert testing.check_attention(out, ref, same).ok
    with pytest.raises(tessera.InputError,
                       match=r"kv_scale=per_tensor, .* does not fit the plan \(.*kv_scale=per_token"):
        tessera.paged_decode(q, k, v, table, lens, k_scale=1.0, v_scale=1.0, plan=plan, device=dev)

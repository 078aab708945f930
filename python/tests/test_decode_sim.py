"""tessera.paged_decode on the simulator (numpy arrays, device='sim:<target>') against the float64 reference with
CORRECTNESS.md's rule (2x the same-precision error, NaN never passes): small caches on gfx942, gfx950, gfx1100 and
sm_90 with block sizes 1, 16 and 64, NHD and HND, 1 and 3 query tokens (bottom-right causal), GQA 4:1 and 8:1, a
window, a soft cap, 1, 3 and more splits than key tiles, zero and one-token sequences. Poison: unused page slots and
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

    def directive(self):
        return (f"tessera.paged_decode @pd_{self.dtype}_d{self.D}_b{self.block_size} {{dtype = {self.dtype}, "
                f"head_dim = {self.D}, block_size = {self.block_size}, mask = #tessera.mask<causal_bottom_right>, "
                "sliding_window, softcap, return_lse, split_kv}")


CASES = [
    Case("b16-gqa4-split3", "bf16", 128, 16, (37, 1, 80), num_splits=3),
    Case("b1-sq3-gqa8", "f16", 64, 1, (9, 20), Sq=3, Hkv=1),
    Case("b64-hnd-window-softcap", "bf16", 64, 64, (130, 64, 3), layout="HND", window_left=40, softcap=6.0),
    Case("b16-empty-and-more-splits-than-tiles", "f16", 64, 16, (0, 5, 70), Sq=3, num_splits=9),
    Case("d256-sq3-split2", "f16", 256, 16, (33, 48), Sq=3, Hq=4, Hkv=2, num_splits=2),
]


def usable(c):
    return c.dtype != "bf16" or support.ml_dtypes is not None


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A temporary bundle per target, searched first (TESSERA_BUNDLE_PATH). Yields {target: compile error}."""
    text = "\n".join(sorted({c.directive() for c in CASES if usable(c)})) + "\n"
    yield from support.sim_bundles(tmp_path_factory, "decode-bundles", {t: text for t in support.SIM_TARGETS})


def cache_of(c, rng, max_blocks, pages):
    """(k_cache, v_cache, block_table): random caches of `pages` pages in c's layout, each sequence's pages a random
    choice of distinct ones; every slot no sequence uses, and every table entry past a sequence's pages, poisoned."""
    dt = support.numpy_dtype(c.dtype)
    shape = (pages, c.block_size, c.Hkv, c.D) if c.layout == "NHD" else (pages, c.Hkv, c.block_size, c.D)
    k, v = (rng.standard_normal(shape).astype(dt) for _ in range(2))
    table = rng.permutation(pages)[:len(c.lens) * max_blocks].reshape(len(c.lens), max_blocks).astype(np.int32)
    return k, v, table


def poison(c, k, v, table):
    """Copies with NaN in every cache slot no sequence reads and -1 / INT32_MAX past each sequence's pages."""
    k, v, table = k.copy(), v.copy(), table.copy()
    used = np.zeros(k.shape[0] * c.block_size, bool)
    for b, length in enumerate(c.lens):
        used_pages = -(-length // c.block_size)
        for j in range(length):
            used[table[b, j // c.block_size] * c.block_size + j % c.block_size] = True
        table[b, used_pages:] = -1 if b % 2 else INT32_MAX
    for cache in (k, v):
        slots = cache if c.layout == "NHD" else cache.transpose(0, 2, 1, 3)   # (pages, bs, Hkv, D) view
        slots.reshape(-1, c.Hkv, c.D)[~used] = np.nan
    return k, v, table


@pytest.mark.parametrize("target, case", [pytest.param(t, c, id=f"{t}-{c.id}") for t in support.SIM_TARGETS
                                          for c in CASES])
def test_paged_decode_matches_float64_and_ignores_poison(bundles, target, case):
    c = case
    if not usable(c):
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    max_blocks = max(1, -(-max(c.lens) // c.block_size)) + 1
    k, v, table = cache_of(c, rng, max_blocks, pages=3 * len(c.lens) * max_blocks)
    lens = np.array(c.lens, np.int32)
    q = rng.standard_normal((len(c.lens), c.Sq, c.Hq, c.D)).astype(support.numpy_dtype(c.dtype))
    options = dict(kv_layout=c.layout, window_left=c.window_left, softcap=c.softcap)

    def run(k, v, table):
        out = np.full(q.shape, np.nan, q.dtype)
        got, lse = tessera.paged_decode(q, k, v, table, lens, **options, num_splits=c.num_splits, out=out,
                                        return_lse=True, device=dev)
        assert got is out
        return out, lse
    out, lse = run(k, v, table)
    ref = testing.paged_decode_reference(q, k, v, table, lens, **options)
    same = testing.paged_decode_reference(q, k, v, table, lens, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse=lse)
    assert result.ok, f"{target} {c} seed {seed}: {result}"
    for b, length in enumerate(c.lens):
        if length == 0:
            assert (out[b] == 0).all() and np.isneginf(lse[b]).all(), "an empty cache gives O = 0, LSE = -inf"
    poisoned_out, poisoned_lse = run(*poison(c, k, v, table))
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


WRITE_CASES = [
    WriteCase("nhd-packed-qkv", "f16", 64, 16, "NHD", False, 0),
    WriteCase("hnd-shared-unaligned-heads", "f16", 64, 1, "HND", True, 3),
    WriteCase("bf16-d128-shared-nhd", "bf16", 128, 16, "NHD", True, 0),
]


@pytest.mark.parametrize("target, case", [pytest.param(t, c, id=f"{t}-{c.id}") for t in support.SIM_TARGETS
                                          for c in WRITE_CASES])
def test_paged_cache_write_scatters_tokens_into_their_slots(bundles, target, case):
    """tessera.paged_cache_write (the sets' `_cache_write` kernel): each token's key and value rows land in the slot
    slot_mapping names, bit for bit; padding slots (-1) and the rows of key past slot_mapping write nothing, and
    every other byte of the caches keeps its value."""
    c = case
    if not usable(c):
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")
    error = bundles.get(target)
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    rng = np.random.default_rng(7)
    dt = support.numpy_dtype(c.dtype)
    Hkv, T = 2, 11
    pages = max(5, -(-(T + 2) // c.block_size))
    page_shape = (c.block_size, Hkv, c.D) if c.layout == "NHD" else (Hkv, c.block_size, c.D)
    if c.shared:
        kv = rng.standard_normal((pages, 2, *page_shape)).astype(dt)
        k_cache, v_cache = kv[:, 0], kv[:, 1]
    else:
        k_cache, v_cache = (rng.standard_normal((pages, *page_shape)).astype(dt) for _ in range(2))
    # key and value: views of one packed (T + 2, 3, Hkv, D + pad) tensor, as from a fused qkv projection.
    qkv = rng.standard_normal((T + 2, 3, Hkv, c.D + c.head_pad)).astype(dt)
    key, value = qkv[:, 1, :, :c.D], qkv[:, 2, :, :c.D]
    slots = rng.permutation(pages * c.block_size)[:T].astype(np.int64)
    slots[[2, 7]] = -1
    slots[0] = pages * c.block_size - 1            # the cache's last slot
    expected_k, expected_v = k_cache.copy(), v_cache.copy()
    for t, s in enumerate(slots):
        if s >= 0:
            for expected, rows in ((expected_k, key), (expected_v, value)):
                page, offset = divmod(int(s), c.block_size)
                if c.layout == "NHD":
                    expected[page, offset] = rows[t]
                else:
                    expected[page, :, offset] = rows[t]
    tessera.paged_cache_write(key, value, k_cache, v_cache, slots, kv_layout=c.layout, device=dev)
    for name, got, expected in (("k_cache", k_cache, expected_k), ("v_cache", v_cache, expected_v)):
        assert (got.view(np.uint16) == expected.view(np.uint16)).all(), f"{target} {c.id}: {name} differs"

"""tessera.attn_combine (and flash_attn_interface.flash_attn_combine) on the simulator (numpy arrays,
device='sim:<target>') against the float64 merge, with CORRECTNESS.md's rule (3x the error of the same merge in
float32 rounded to the output dtype, plus a small floor; NaN never passes): gfx942, gfx950, gfx1100 and sm_90; 1, 3
and 37 parts (every wave takes several turns, the last one past the parts); head_dim 40, 64 and 512 (MLA's);
outputs float32, float16 and bfloat16; empty parts (LSE -inf) whose rows hold NaN, rows whose every part is empty
(O = 0, LSE = -inf), LSEs 80 apart; strided views (a padded head dimension, FlashAttention-3's (batch, nheads,
seqlen)-major LSE), a given `out`, the packed (num_splits, total_q, ...) layout. Then the split-KV use itself: keys
cut into parts, each part's float64 attention combined, against attention over all the keys. Errors before any device
work. The bundles are compiled by the build's tessera-compile; skipped without one or without the sim plugin."""
from typing import NamedTuple

import pytest

import support
from support import np
import tessera
from tessera import flash_attn_interface as fa, testing

NO_DEVICE = "sim:validation-only"   # its plugin never loads: an InputError proves the check came first


class Case(NamedTuple):
    id: str
    dtype: str          # the output's
    D: int
    splits: int
    rows: tuple         # (B, S, H), or (total_q, H): the packed layout
    empty: float = 0.3  # the share of parts that saw no key (LSE -inf, NaN output rows)
    strided: bool = False   # views: out_partial's head dim padded, lse_partial (split, B, H, S)-major, out given
    spread: float = 3.0     # LSEs drawn from N(0, spread)

    def directive(self):
        return f"tessera.attn_combine @combine_{self.dtype}_d{self.D} {{dtype = {self.dtype}, head_dim = {self.D}}}"


CASES = [
    Case("f32-d64-3-parts-strided", "f32", 64, 3, (2, 3, 4), strided=True),
    Case("bf16-d512-37-parts-far-apart", "bf16", 512, 37, (1, 2, 2), spread=40.0),
    Case("f16-d40-1-part-packed", "f16", 40, 1, (5, 3), empty=0.2),
    Case("f16-d40-3-parts-packed-strided", "f16", 40, 3, (5, 3), strided=True),
]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    text = "\n".join(sorted({c.directive() for c in CASES})) + "\n"
    yield from support.sim_bundles(tmp_path_factory, "combine-bundles", {t: text for t in support.SIM_TARGETS})


def merged(o, lse, dtype):
    """The merge of parts o (splits, ..., D) and lse (splits, ...) in float64 ("f64") or float32 (the
    straightforward same-precision one), O rounded to `dtype`: (O, LSE)."""
    work = np.float64 if dtype == "f64" else np.float32
    o, lse = o.astype(work), lse.astype(work)
    m = lse.max(axis=0)
    m = np.where(np.isneginf(m), 0, m)
    w = np.exp(lse - m)
    total = w.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(w[..., None] > 0, w[..., None] * o, 0).sum(axis=0) / np.where(total > 0, total, 1)[..., None]
        merged_lse = m + np.log(total)
    out = np.where(total[..., None] > 0, out, 0)
    return (out if dtype == "f64" else out.astype(support.numpy_dtype(dtype))), merged_lse


def parts(c, rng):
    """(out_partial, lse_partial) float32 for case c: normal outputs, LSEs N(0, spread), a share of parts empty
    (LSE -inf, output NaN) and the first row's every part empty; strided cases as views of larger arrays."""
    shape = (c.splits,) + c.rows
    lse = (rng.standard_normal(shape) * c.spread).astype(np.float32)
    lse[rng.random(shape) < c.empty] = -np.inf
    lse[(slice(None),) + (0,) * len(c.rows)] = -np.inf
    o = rng.standard_normal(shape + (c.D,)).astype(np.float32)
    o[np.isneginf(lse)] = np.nan
    if c.strided:
        wide = np.full(shape + (c.D + 8,), np.nan, np.float32)
        wide[..., :c.D] = o
        o = wide[..., :c.D]
        flipped = np.ascontiguousarray(np.swapaxes(lse, -1, -2))    # (split, [B,] H, S)
        lse = np.swapaxes(flipped, -1, -2)
    return o, lse


def check(got, got_lse, o, lse, dtype):
    ref, ref_lse = merged(o, lse, "f64")
    same, _ = merged(o, lse, dtype)
    floor = 1e-6 * max(1.0, float(np.nanmax(np.abs(ref))))
    err = float(np.abs(got.astype(np.float64) - ref).max())
    same_err = float(np.abs(same.astype(np.float64) - ref).max())
    assert not np.isnan(got).any() and err <= 3 * same_err + floor, \
        f"max error {err} against float64 (same-precision merge {same_err})"
    assert np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse)), "LSE -inf exactly where every part is empty"
    finite = ~np.isneginf(ref_lse)
    assert np.allclose(got_lse[finite], ref_lse[finite], rtol=1e-6, atol=1e-5)
    assert (got[~finite] == 0).all(), "a row whose every part is empty gives O = 0"


@pytest.mark.parametrize("target, case", [pytest.param(t, c, id=f"{t}-{c.id}") for t in support.SIM_TARGETS
                                          for c in CASES])
def test_combine_matches_float64(bundles, target, case):
    c = case
    if c.dtype == "bf16" and support.ml_dtypes is None:
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")
    assert not bundles.get(target), f"tessera-compile --target={target} failed:\n{bundles[target]}"
    dev = support.sim_device(target)
    rng = np.random.default_rng(sum(c.id.encode()))
    o, lse = parts(c, rng)
    out = None
    if c.strided:   # a given out, every element NaN first, rows of D + 4
        out = np.full(c.rows + (c.D + 4,), np.nan, support.numpy_dtype(c.dtype))[..., :c.D]
    got, got_lse = fa.flash_attn_combine(o, lse, out=out, out_dtype=c.dtype if out is None else None, device=dev)
    assert out is None or got is out
    assert got.shape == c.rows + (c.D,) and got.dtype == support.numpy_dtype(c.dtype)
    assert got_lse.shape == c.rows and got_lse.dtype == np.float32
    # FlashAttention-3's LSE layout: (batch, nheads, seqlen) storage, seen as (batch, seqlen, nheads).
    assert np.swapaxes(got_lse, -1, -2).flags.c_contiguous
    check(got, got_lse, o, lse, c.dtype)


def test_split_keys_combined_equal_attention_over_all_keys(bundles):
    """The split-KV use: 70 keys cut into parts of 30, 0 (empty) and 40, each part's float64 attention (its output and
    LSE) combined on the simulator equals float64 attention over all 70 keys."""
    assert not bundles.get("gfx942"), bundles["gfx942"]
    dev = support.sim_device("gfx942")
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(shape) for shape in ((2, 3, 4, 64), (2, 70, 2, 64), (2, 70, 2, 64)))
    cuts = [(0, 30), (30, 30), (30, 70)]
    results = [testing.attention_reference(q, k[:, a:b], v[:, a:b]) for a, b in cuts]
    o = np.stack([r.o for r in results]).astype(np.float32)                       # (3, B, S, H, D)
    lse = np.stack([np.swapaxes(r.lse, 1, 2) for r in results]).astype(np.float32)   # (3, B, S, H)
    got, got_lse = tessera.attn_combine(o, lse, device=dev)
    whole = testing.attention_reference(q, k, v)
    assert np.abs(got - whole.o).max() < 1e-5
    assert np.abs(got_lse - np.swapaxes(whole.lse, 1, 2)).max() < 1e-5


P = np.zeros((2, 1, 3, 4, 64), np.float32)
L = np.zeros((2, 1, 3, 4), np.float32)


@pytest.mark.parametrize("kwargs, message", [
    (dict(out_partial=P[0]), r"lse_partial must be out_partial's shape without headdim, \(1, 3, 4\), got "
                             r"\(2, 1, 3, 4\)"),
    (dict(out_partial=P[0, 0]), r"out_partial must be \(num_splits, batch, seqlen, nheads, headdim\) or "
                                r"\(num_splits, total_q, nheads, headdim\), got shape \(3, 4, 64\)"),
    (dict(out_partial=P.astype(np.float16)), r"out_partial has dtype float16; it must be float32"),
    (dict(lse_partial=L.astype(np.float64)), r"lse_partial has dtype float64; it must be float32"),
    (dict(out_partial=np.zeros((2, 1, 3, 4, 2048), np.float32)), r"headdim 2048 is not supported \(1 to 1024\)"),
    (dict(out_partial=np.zeros((2, 1, 3, 4, 128), np.float32)[..., ::2]), r"out_partial has stride 2 on head_dim"),
    (dict(out_dtype="float64"), r"out_dtype 'float64' is not supported \(float32, float16, bfloat16\)"),
    (dict(out=np.zeros((1, 3, 4, 32), np.float32)), r"out has shape \(1, 3, 4, 32\), expected \(1, 3, 4, 64\)"),
    (dict(out=np.zeros((1, 3, 4, 64), np.float16), out_dtype="f32"), r"out has dtype float16, expected float32"),
    (dict(lse_partial=[[0.0]]), r"lse_partial is a builtins.list; expected a torch tensor or a numpy array"),
])
def test_rejected_before_the_device(kwargs, message):
    args = {"out_partial": P, "lse_partial": L, **kwargs}
    with pytest.raises(tessera.InputError, match=r"^tessera.attn_combine: .*" + message):
        tessera.attn_combine(args.pop("out_partial"), args.pop("lse_partial"), **args, device=NO_DEVICE)

"""flash_attn_bwd on the simulator (numpy arrays, device='sim:<target>') against the float64 gradients with the
tolerance rule of CORRECTNESS.md (3x the same-precision error, dq, dk and dv judged separately, NaN never passes):
small cases on gfx942, gfx950, gfx1100 and sm_90 with O and LSE from tessera's forward, as users get them. Shapes
that are not tile multiples, causal top-left and bottom-right, windows with and without causal, softcap, GQA 3:1,
MQA, Sq > Sk bottom-right (fully masked rows: dq rows exactly 0), head_dim 64, 96 and 80 (and 40 and 176,
zero-padded; V's 32 under Q's and K's 48), attention sinks (their gradient too), ALiBi and chunked local attention,
dropout (the forward's mask regenerated: main and deterministic dq kernels), deterministic on (two runs bitwise equal) and off (the second of
two runs checked: it reuses the workspaces), varlen with zero-length items, rows that are not whole 16-byte vectors.
Gradients are poisoned with NaN before each run. The bundles are compiled by the build's tessera-compile from directives written here; skipped without one, without
the sim plugin, or for a target without the generator. bf16 cases need ml_dtypes."""
from typing import NamedTuple

import pytest

import support
from support import np
import tessera
from tessera import _attention, _attention_bwd, testing

MASKS = {"": "none", "tl": "causal_top_left", "br": "causal_bottom_right"}


class Case(NamedTuple):
    id: str
    dtype: str
    D: int
    B: int = 1
    Sq: int = 33
    Sk: int = 45
    Hq: int = 2
    Hkv: int = 2
    causal: str = ""            # "", "tl", "br"
    window: tuple = (-1, -1)
    softcap: float = 0.0
    deterministic: bool = False
    input_scale: float = 1.0    # q and k are standard normal times this
    varlen: bool = False
    ragged_rows: bool = False   # q, k, v, dout rows 4 elements longer than D apart: not whole 16-byte vectors
    nan_gaps: bool = False      # q, k, v, dout rows with 8 NaN columns after each D (read as zero, or all is NaN)
    sinks: bool = False         # a sink logit per query head: the forward's LSE includes it, dsinks checked
    alibi: str = ""             # ALiBi slopes: "h" (Hq,), "bh" (B, Hq)
    chunk: int = 0              # attention_chunk
    Dv: int = 0                 # V's head_dim where it differs from D (MLA-style; zero-padded to one kernel's)
    dropout: float = 0.0        # dropout_p
    seqused: bool = False       # varlen: seqused_q/k below the cu_seqlens lengths

    @property
    def dv(self):
        return self.Dv or self.D

    @property
    def gap(self):
        """Elements between one row's D and the next row of q, k, v, dout and the gradients."""
        return 4 * self.ragged_rows + 8 * self.nan_gaps

    def options(self):
        return dict(causal=bool(self.causal), causal_align="top_left" if self.causal == "tl" else "bottom_right",
                    window=self.window, softcap=self.softcap, attention_chunk=self.chunk)

    def slopes(self, rng):
        shape = {"": None, "h": (self.Hq,), "bh": (self.B, self.Hq)}[self.alibi]
        return None if shape is None else rng.uniform(0.05, 1.0, shape).astype(np.float32)

    def directives(self):
        """The forward (with every runtime feature and LSE, as examples/attention.mlir has it) and the backward."""
        mask = MASKS[self.causal]
        varlen = (", varlen" if self.varlen else "") + (", seqused" if self.seqused else "")
        # The kernels' head_dim (the API zero-pads the others).
        Df = D = _attention.kernel_head_dim(max(self.D, self.dv))
        optional = [a for a, on in (("sinks", self.sinks), ("alibi", self.alibi), ("attention_chunk", self.chunk),
                                    ("dropout", self.dropout)) if on]
        forward = (f"tessera.flash_attn @fa_{self.dtype}_d{Df}_{self.causal or 'none'}"
                   f"{'_varlen' if self.varlen else ''}{'_seqused' if self.seqused else ''}"
                   f"{''.join('_' + a for a in optional)} {{dtype = {self.dtype}, "
                   f"head_dim = {Df}, mask = #tessera.mask<{mask}>, sliding_window, softcap, return_lse{varlen}"
                   f"{''.join(', ' + a for a in optional)}}}")
        backward = _attention_bwd.directive_for(
            dict(dtype=self.dtype, head_dim=D, mask=mask, varlen=self.varlen, deterministic=self.deterministic,
                 alibi=bool(self.alibi), dropout=bool(self.dropout), seqused=self.seqused),
            {"attention_chunk": bool(self.chunk)})
        return forward, backward


CASES = [
    Case("tails-mha", "f16", 64, B=2, Sq=37, Sk=53),
    Case("tl-sq<sk-gqa3", "bf16", 64, Sq=20, Sk=45, Hq=6, Hkv=2, causal="tl"),
    Case("br-sq>sk-fully-masked-rows-mqa", "f16", 64, Sq=50, Sk=19, Hq=4, Hkv=1, causal="br"),
    Case("window-both-sides", "bf16", 64, Sq=40, Sk=40, window=(10, 5)),
    Case("br-window-det", "f16", 64, Sq=33, Sk=60, causal="br", window=(16, -1), deterministic=True),
    Case("softcap-gqa3", "f16", 64, Sq=30, Sk=45, Hq=6, Hkv=2, softcap=5.0, input_scale=2.0),
    Case("window-excludes-rows-sq>sk", "f16", 64, Sq=30, Sk=9, window=(0, 0)),
    Case("d96-tl-sq>sk-det", "f16", 96, Sq=40, Sk=23, causal="tl", deterministic=True),
    Case("ragged-rows-br-gqa3", "f16", 64, Sq=37, Sk=50, Hq=6, Hkv=2, causal="br", ragged_rows=True),
    Case("ragged-rows-det", "f16", 64, Sq=33, Sk=41, ragged_rows=True, deterministic=True),
    # Head dims beyond the default bundle's, as they are: 80; 40, 24 and 8 on tiles of the next multiple of 16, 176
    # on AMD's of 192 (11 tiles of 16 columns do not deal over its 4 waves), the columns past D read as zero.
    Case("d80-br-gqa3", "f16", 80, Sq=21, Sk=37, Hq=6, Hkv=2, causal="br"),
    Case("d40-tl-ragged-rows", "bf16", 40, Sq=20, Sk=33, causal="tl", ragged_rows=True),
    Case("d24-nan-gaps-br-gqa3", "f16", 24, Sq=21, Sk=37, Hq=6, Hkv=2, causal="br", nan_gaps=True),
    Case("d8-nan-gaps-det", "bf16", 8, Sq=30, Sk=19, deterministic=True, nan_gaps=True),
    Case("d176-window-det", "f16", 176, Sq=17, Sk=30, window=(8, 8), deterministic=True),
    # Attention sinks: dq, dk, dv from the sink-including LSE, and dsinks.
    Case("sinks-br-sq>sk-fully-masked-rows-gqa3", "f16", 64, Sq=40, Sk=19, Hq=6, Hkv=2, causal="br", sinks=True),
    Case("sinks-softcap-det", "bf16", 64, Sq=30, Sk=45, softcap=5.0, input_scale=2.0, deterministic=True, sinks=True),
    Case("sinks-d40-tl", "f16", 40, Sq=20, Sk=33, causal="tl", sinks=True),
    # ALiBi (P recomputed with the bias) and chunked local attention (its masks in both kernels).
    Case("alibi-br-gqa3", "f16", 64, Sq=30, Sk=45, Hq=6, Hkv=2, causal="br", alibi="h"),
    Case("alibi-bh-chunk-softcap-det", "bf16", 64, B=2, Sq=33, Sk=40, softcap=5.0, input_scale=2.0, alibi="bh",
         chunk=16, deterministic=True),
    Case("chunk-tl-window-sq<sk", "f16", 64, Sq=20, Sk=50, causal="tl", window=(12, -1), chunk=8),
    # V's head_dim below Q's and K's (DeepSeek's MLA prefill has 192 and 128), all zero-padded to 48.
    Case("dv32-dqk48-br-gqa3", "f16", 48, Dv=32, Sq=21, Sk=37, Hq=6, Hkv=2, causal="br"),
    # Dropout: P and dP through the forward's mask (testing.dropout_keep), in the main and the deterministic dq kernel.
    Case("dropout-br-sq>sk-gqa3", "f16", 64, Sq=40, Sk=27, Hq=6, Hkv=2, causal="br", dropout=0.3),
    Case("dropout-softcap-alibi-det", "bf16", 64, Sq=33, Sk=40, softcap=5.0, input_scale=2.0, alibi="h",
         dropout=0.15, deterministic=True),
]
# Varlen per target: deterministic with dropout on two targets; the others with per-sequence ALiBi slopes, a chunk
# and seqused_q/k (mask bottom-right, GQA 2:1).
VARLEN = {"gfx942": False, "gfx950": True, "gfx1100": False, "sm_90": True}


def varlen_case(target):
    det = VARLEN[target]
    return Case("varlen", "f16", 64, B=5, Hq=4, Hkv=2, causal="br", varlen=True, deterministic=det,
                alibi="" if det else "bh", chunk=0 if det else 8, dropout=0.2 if det else 0.0, seqused=not det)


def usable(c):
    return c.dtype != "bf16" or support.ml_dtypes is not None


# ---- Bundles: the directives of the cases, compiled per target in parallel ----------------------------------------
def _modules():
    """{target: the directives of its cases}."""
    return {target: "\n".join(sorted({line for c in CASES + [varlen_case(target)] if usable(c)
                                       for line in c.directives()})) + "\n"
            for target in support.SIM_TARGETS}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A temporary bundle per target, searched first (TESSERA_BUNDLE_PATH). Yields {target: compile error}."""
    yield from support.sim_bundles(tmp_path_factory, "attention-bwd-bundles", _modules)


def sim_for(bundles, target):
    error = bundles.get(target)
    if error and "has no kernel generator" in error:
        pytest.skip(next(line for line in error.splitlines() if "has no kernel generator" in line))
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    return support.sim_device(target)


# ---- Inputs, run, check ------------------------------------------------------------------------------------------
def _random(rng, shape, dtype, scale=1.0, gap=0):
    """Standard normal times `scale`; a gap: a view of rows `gap` elements longer, NaN past each row (4: strides not
    multiples of 8; 8: whole 16-byte vectors of NaN)."""
    x = (rng.standard_normal(shape[:-1] + (shape[-1] + gap,)) * scale).astype(support.numpy_dtype(dtype))
    x[..., shape[-1]:] = np.nan
    return x[..., :shape[-1]]


def poisoned(shape, dtype):
    return np.full(shape, np.nan, support.numpy_dtype(dtype))


def bits(x):
    return x.view(np.uint16)


def poisoned_runs(c, dev, q, k, v, backward):
    """backward(dq=, dk=, dv=) into NaN-poisoned gradients shaped like q, k, v (ragged_rows, nan_gaps: views of longer
    rows, whose gaps must stay NaN), twice: a deterministic case must agree bit for bit; the second run reuses the
    workspaces the first left (dq_accum holding its sums until the runtime zeroes it for the call). Returns the second
    run's gradients."""
    def once():
        wide = [poisoned(x.shape[:-1] + (x.shape[-1] + c.gap,), c.dtype) for x in (q, k, v)]
        grads = [w[..., :x.shape[-1]] for w, x in zip(wide, (q, k, v))]
        got = backward(dq=grads[0], dk=grads[1], dv=grads[2])
        assert all(g is x for g, x in zip(got, grads))
        assert all(np.isnan(w[..., x.shape[-1]:].astype(np.float32)).all() for w, x in zip(wide, (q, k, v))), \
            f"{dev.arch} {c.id}: a gradient was written into its rows' gaps"
        return grads
    first, grads = once(), once()
    if c.deterministic:
        for name, a, b in zip(("dq", "dk", "dv"), first, grads):
            assert (bits(a) == bits(b)).all(), f"{dev.arch} {c.id}: deterministic {name} differs between two runs"
    return grads


def _reference_dropout(c, dropout):
    return (dropout["dropout_seed"], c.dropout) if dropout else None


def needs(c):
    if not usable(c):
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")


@pytest.mark.parametrize("target, case", [pytest.param(t, c, id=f"{t}-{c.id}") for t in support.SIM_TARGETS
                                          for c in CASES])
def test_flash_attn_bwd_matches_float64(bundles, target, case):
    needs(case)
    dev = sim_for(bundles, target)
    c, seed = case, np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    q = _random(rng, (c.B, c.Sq, c.Hq, c.D), c.dtype, c.input_scale, c.gap)
    k = _random(rng, (c.B, c.Sk, c.Hkv, c.D), c.dtype, c.input_scale, c.gap)
    v = _random(rng, (c.B, c.Sk, c.Hkv, c.dv), c.dtype, gap=c.gap)
    dout = _random(rng, q.shape[:-1] + (c.dv,), c.dtype, gap=c.gap)
    sinks = (rng.standard_normal(c.Hq) * 3).astype(np.float32) if c.sinks else None
    slopes = c.slopes(rng)
    dropout = support.dropout_options(rng, c.dropout)
    out, lse = tessera.flash_attn(q, k, v, **c.options(), return_lse=True, sinks=sinks, alibi_slopes=slopes,
                                  **dropout, device=dev)
    dsinks = []

    def backward(**given):
        got = tessera.flash_attn_bwd(q, k, v, out, dout, lse, **c.options(), deterministic=c.deterministic,
                                     sinks=sinks, alibi_slopes=slopes, **dropout, **given, device=dev)
        dsinks.append(got[3] if c.sinks else None)
        return got[:3]
    grads = poisoned_runs(c, dev, q, k, v, backward)
    mask = _reference_dropout(c, dropout)
    ref = testing.attention_backward_reference(q, k, v, dout, **c.options(), sinks=sinks, alibi_slopes=slopes,
                                               dropout=mask)
    same = testing.attention_backward_reference(q, k, v, dout, **c.options(), sinks=sinks, alibi_slopes=slopes,
                                                dropout=mask, precision="same")
    result = testing.check_attention_backward(grads, ref, same)
    assert result.ok, f"{target} {c} seed {seed}: {result}"
    if c.sinks:
        error, allowed = abs(dsinks[-1] - ref.dsinks), testing.sink_gradient_tolerance(q, k, v, dout, ref, same,
                                                                                        **c.options(), sinks=sinks)
        assert (error <= allowed).all(), f"{target} {c.id} seed {seed}: dsinks {dsinks[-1]}, float64 {ref.dsinks}"
    if "fully-masked" in c.id or "excludes-rows" in c.id:
        masked = ~testing.visible_keys(c.Sq, c.Sk, **{k: v for k, v in c.options().items() if k != "softcap"},
                                       arange=np.arange).any(-1)   # query rows no key is visible from
        assert masked.any(), "the case was meant to have fully masked rows"
        assert (grads[0][:, masked] == 0).all()


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_flash_attn_varlen_bwd_with_zero_length_items(bundles, target):
    c = varlen_case(target)
    dev = sim_for(bundles, target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    lens_q, lens_k = [17, 0, 30, 5, 0], [25, 9, 0, 40, 0]   # queries without keys, keys without queries, neither
    cu_q, cu_k = np.cumsum([0] + lens_q).astype(np.int32), np.cumsum([0] + lens_k).astype(np.int32)
    q = _random(rng, (cu_q[-1], c.Hq, c.D), c.dtype)
    k, v = _random(rng, (cu_k[-1], c.Hkv, c.D), c.dtype), _random(rng, (cu_k[-1], c.Hkv, c.D), c.dtype)
    dout = _random(rng, q.shape, c.dtype)
    sizes = (cu_q, cu_k, max(lens_q), max(lens_k))
    options = dict(c.options(), alibi_slopes=c.slopes(rng))
    if c.seqused:   # fewer rows used than cu_seqlens hold: their gradients stay 0
        options.update(seqused_q=np.array([12, 0, 30, 2, 0], np.int32), seqused_k=np.array([25, 5, 0, 31, 0], np.int32))
    dropout = support.dropout_options(rng, c.dropout)
    out, lse = tessera.flash_attn_varlen(q, k, v, *sizes, **options, **dropout, return_lse=True, device=dev)

    def backward(**given):
        return tessera.flash_attn_varlen_bwd(q, k, v, out, dout, lse, *sizes, **options, **dropout,
                                             deterministic=c.deterministic, **given, device=dev)
    grads = poisoned_runs(c, dev, q, k, v, backward)
    if c.seqused:   # rows past seqused are never written: they keep the NaN, then count as 0
        used_q, used_k = options["seqused_q"], options["seqused_k"]
        for g, cu, used in zip(grads, (cu_q, cu_k, cu_k), (used_q, used_k, used_k)):
            rows = np.ones(len(g), bool)
            for b in range(len(used)):
                rows[cu[b]:cu[b] + used[b]] = False
            assert np.isnan(g[rows].astype(np.float32)).all(), f"{target}: a gradient row past seqused was written"
            g[rows] = 0
    reference = dict(options, dropout=_reference_dropout(c, dropout))
    ref = testing.attention_backward_reference_varlen(q, k, v, dout, cu_q, cu_k, **reference)
    same = testing.attention_backward_reference_varlen(q, k, v, dout, cu_q, cu_k, **reference, precision="same")
    result = testing.check_attention_backward(grads, ref, same)
    assert result.ok, f"{target} varlen deterministic={c.deterministic} seed {seed}: {result}"
    dq, dk, dv = grads
    assert (dq[cu_q[2]:cu_q[3]] == 0).all(), "queries of a zero-length key sequence: dq must be 0"
    assert (dk[cu_k[1]:cu_k[2]] == 0).all() and (dv[cu_k[1]:cu_k[2]] == 0).all(), \
        "keys of a zero-length query sequence: dk, dv must be 0"
    fresh = testing.check_attention_backward(backward(), ref, same)   # gradients the call allocates
    assert fresh.ok, f"{target} varlen deterministic={c.deterministic} new gradients, seed {seed}: {fresh}"

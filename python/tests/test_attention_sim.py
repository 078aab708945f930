"""flash_attn on the simulator (numpy arrays, device='sim:<target>') against float64 with the tolerance rule of
CORRECTNESS.md: small cases of every variant on gfx942, gfx950, gfx1100 and sm_90 (f16/bf16, D 32/64/96/128/256,
causal top-left/bottom-right with Sq != Sk both ways, windows, softcap, GQA 3 and MQA, LSE, varlen with empty
sequences, Sk = 0, fully masked rows, logits > 88, the -524288 logit, a row max that rises over many key tiles; head
dims 48, 80 and 240 as they are, 40, 59 and 176 zero-padded; attention sinks; ALiBi (per head and per batch item
and head, causal and not) and chunked local attention, alone and with a window, softcap and each other).
Outputs are poisoned with NaN. Skipped when the sim plugin is not built; bf16 cases need ml_dtypes."""
import re
from typing import NamedTuple

import pytest

import support
from support import np
import tessera
from tessera import _attention, testing


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
    scale: float = None
    input_scale: float = 1.0    # q and k are standard normal times this (logits > 88 when large)
    layout: str = "separate"    # separate | packed (q, k, v sliced from one qkv tensor) | odd (strides not 8-aligned)
    rising: float = 0.0         # scaled logits rise by about this much from the first key to the last
    sinks: bool = False         # a sink logit per query head (standard normal times 3)
    alibi: str = ""             # ALiBi slopes: "h" (Hq,), "bh" (B, Hq)
    chunk: int = 0              # attention_chunk
    kernel_chunk: bool = False  # the kernel takes a chunk (a chunk-less call on a kernel that has one)

    def kernel(self):
        return (f"fa_{self.dtype}_d{_attention.kernel_head_dim(self.D)}_{self.causal or 'none'}" +
                ("_sinks" if self.sinks else "") + ("_alibi" if self.alibi else "") +
                ("_chunk" if self.chunk or self.kernel_chunk else ""))

    def options(self):
        return dict(causal=bool(self.causal), causal_align="top_left" if self.causal == "tl" else "bottom_right",
                    scale=self.scale, window=self.window, softcap=self.softcap, attention_chunk=self.chunk)

    def slopes(self, rng):
        """ALiBi slopes of the case's shape (uniform in [0.05, 1)), or None."""
        shape = {"": None, "h": (self.Hq,), "bh": (self.B, self.Hq)}[self.alibi]
        return None if shape is None else rng.uniform(0.05, 1.0, shape).astype(np.float32)


# Every target: each case at least once. Sq != Sk both ways, causal TL and BR, GQA 3, MQA, windows, softcap.
CASES = [
    Case("gqa3-softcap-packed", "f16", 64, B=2, Sq=37, Sk=53, Hq=3, Hkv=1, softcap=5.0, layout="packed"),
    Case("br-window-sq<sk", "bf16", 128, Sq=20, Sk=70, causal="br", window=(24, -1)),
    Case("tl-sq>sk-mqa", "f16", 32, Sq=70, Sk=45, Hq=4, Hkv=1, causal="tl"),
    Case("br-sq>sk-fully-masked-rows", "bf16", 64, Sq=50, Sk=19, causal="br"),
    Case("tl-sq<sk-window-odd-strides", "f16", 64, Sq=19, Sk=66, Hkv=1, causal="tl", window=(8, 4), layout="odd"),
    Case("window-both-sides", "bf16", 32, B=2, Sq=40, Sk=40, window=(10, 5)),
    Case("window-excludes-rows-sq>sk", "bf16", 32, Sq=30, Sk=9, window=(0, 0)),
    Case("sk0", "f16", 64, Sq=9, Sk=0),
    Case("large-logits", "f16", 64, Sq=24, Sk=40, scale=1.0, input_scale=4.0),
    Case("large-logits-softcap", "f16", 64, Sq=24, Sk=40, scale=1.0, input_scale=4.0, softcap=30.0),
    Case("d96-br-sq>sk-packed", "f16", 96, Sq=40, Sk=28, causal="br", Hq=3, Hkv=1, layout="packed"),
    Case("d96-tl-bf16", "bf16", 96, Sq=1, Sk=1, causal="tl"),
    Case("d256-tl-sq<sk", "bf16", 256, Sq=17, Sk=35, causal="tl"),
    Case("d256-br-gqa3", "f16", 256, Sq=1, Sk=9, causal="br", Hq=6, Hkv=2),
    # Every key tile raises the row max: each step's rescale of the running sum and output counts.
    Case("rising-max-many-key-tiles", "f16", 64, Sq=24, Sk=300, rising=12.0),
    Case("rising-max-br", "bf16", 128, Sq=20, Sk=270, causal="br", rising=12.0),
    # Masked window-edge tiles, then interior tiles (AMD: a loop of their own), then the masked diagonal.
    Case("window-edge-interior-edge", "f16", 64, Sq=16, Sk=300, window=(200, 0)),
    Case("softcap-interior-tiles", "bf16", 128, Sq=20, Sk=200, softcap=8.0, input_scale=3.0),
    Case("odd-strides-interior-tiles", "bf16", 64, Sq=20, Sk=200, layout="odd"),
    # Head dims beyond the default bundle's: multiples of 16 run as they are, others zero-padded (40 -> 48,
    # 59 -> 64, 176 -> 192).
    Case("d48-br-window", "bf16", 48, Sq=20, Sk=45, causal="br", window=(12, -1)),
    Case("d80-gqa3-packed", "f16", 80, Sq=21, Sk=37, Hq=3, Hkv=1, layout="packed"),
    Case("d240-tl", "f16", 240, Sq=17, Sk=35, causal="tl"),
    Case("d40-padded-softcap", "f16", 40, Sq=24, Sk=40, softcap=5.0, input_scale=2.0),
    Case("d59-padded-odd-strides", "bf16", 59, Sq=19, Sk=66, causal="br", layout="odd"),
    Case("d176-padded-br", "f16", 176, Sq=17, Sk=30, causal="br"),
    # Attention sinks: rows without a visible key get O = 0 and LSE = the sink.
    Case("sinks-br-sq>sk-gqa3", "bf16", 64, Sq=40, Sk=19, Hq=6, Hkv=2, causal="br", sinks=True),
    Case("sinks-window-softcap", "f16", 128, Sq=24, Sk=70, window=(16, 8), softcap=5.0, input_scale=2.0, sinks=True),
    # ALiBi: -slope * |i + off - j| (causal: only j <= i + off), per head or per batch item and head.
    Case("alibi-br-sq<sk-gqa3", "f16", 64, Sq=20, Sk=70, Hq=6, Hkv=2, causal="br", alibi="h"),
    Case("alibi-bh-window-softcap-chunk", "bf16", 64, B=2, Sq=40, Sk=52, window=(30, 6), softcap=5.0,
         input_scale=2.0, alibi="bh", chunk=16),
    Case("alibi-no-chunk-sq>sk", "bf16", 64, Sq=45, Sk=19, alibi="h", kernel_chunk=True),
    # Chunked local attention: masked chunk edges, interior tiles between them, a chunk smaller than a tile.
    Case("chunk-br-interior", "f16", 64, Sq=20, Sk=300, causal="br", chunk=160),
    Case("chunk-br-small-sq>sk", "f16", 64, Sq=50, Sk=19, causal="br", chunk=5),
]
VARLEN = {target: ("f16", "br") for target in support.SIM_TARGETS} | {"gfx942": ("bf16", "tl")}
EXTREME_KERNEL = "fa_f16_d64_none"
VARLEN_ALIBI_KERNEL = "fa_f16_d64_br_varlen_alibi_chunk"
PAGED_KERNEL = "fa_f16_d64_br_varlen_paged"


def cases_for(target):
    return CASES


def kernels_for(target):
    dtype, mask = VARLEN[target]
    names = {c.kernel() for c in cases_for(target)} | {EXTREME_KERNEL, f"fa_{dtype}_d64_{mask}_varlen",
                                                       "fa_f16_d64_tl", VARLEN_ALIBI_KERNEL, PAGED_KERNEL,
                                                       "fa_f16_d48_br"}
    if support.ml_dtypes is None:
        names = {n for n in names if not n.startswith("fa_bf16")}
    return sorted(names)


# ---- Bundles: the kernels the cases use, compiled from examples/attention.mlir -------------------------------------
def _directive(name):
    """The directive of a kernel named as examples/attention.mlir names its own (fa_<dtype>_d<D>_<mask>[_varlen]),
    with its runtime features, for head dims that file does not have."""
    dtype, dim, mask, *optional = name.split("_")[1:]
    masks = {short: full for full, short in _attention.SHORT_MASKS.items()}
    features = {short: full for full, short in _attention.SHORT_FEATURES.items()}
    attributes = [f"dtype = {dtype}", f"head_dim = {dim[1:]}", f"mask = #tessera.mask<{masks[mask]}>",
                  *_attention.RUNTIME_FEATURES, *(features.get(a, a) for a in optional)]
    return f"tessera.flash_attn @{name} {{{', '.join(attributes)}}}"


def _modules():
    """{target: the directives its cases use, from examples/attention.mlir where it has them}."""
    source = support.REPO / "examples" / "attention.mlir"
    directives = {m.group(1): line for line in source.read_text().splitlines()
                  if (m := re.match(r"tessera\.flash_attn @(\w+) ", line))}
    return {target: "\n".join(directives.get(name) or _directive(name) for name in kernels_for(target)) + "\n"
            for target in support.SIM_TARGETS}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """With a build tree's tessera-compile: a temporary bundle per target searched first (TESSERA_BUNDLE_PATH);
    without one, the bundles of the search path (dist/). Yields {target: compile error}."""
    try:
        tessera.device("sim:gfx942")
    except tessera.BackendUnavailableError as e:
        pytest.skip(str(e).splitlines()[0])
    if support.compiler_path() is None:
        yield {}
        return
    folder = tmp_path_factory.mktemp("attention-bundles")
    errors = support.compile_bundles(folder, _modules())
    with support.bundles_searched_first(folder):
        yield errors


def sim_for(bundles, target):
    error = bundles.get(target)
    if error and "has no kernel generator" in error:
        pytest.skip(f"{target}: {error.strip().splitlines()[0]}")
    assert not error, f"tessera-compile --target={target} failed:\n{error}"
    dev = support.sim_device(target)
    try:
        tessera.find_bundle(target)
    except tessera.BundleNotFoundError:
        pytest.skip(f"no {target} bundle")
    return dev


# ---- Inputs, run, check ------------------------------------------------------------------------------------------
def _random(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(support.numpy_dtype(dtype))


def make_qkv(rng, c):
    """q (B, Sq, Hq, D), k and v (B, Sk, Hkv, D) in the case's layout."""
    q_shape, kv_shape = (c.B, c.Sq, c.Hq, c.D), (c.B, c.Sk, c.Hkv, c.D)
    if c.layout == "packed":   # q from a packed q tensor with room for more heads, k and v from one kv tensor
        qbuf = _random(rng, (c.B, c.Sq, c.Hq + 1, c.D), c.dtype, c.input_scale)
        kv = _random(rng, (c.B, c.Sk, 2, c.Hkv, c.D), c.dtype)
        kv[:, :, 0] = _random(rng, kv_shape, c.dtype, c.input_scale)
        return qbuf[:, :, 1:], kv[:, :, 0], kv[:, :, 1]
    if c.layout == "odd":      # row strides that are not multiples of 8 elements (the kernel's scalar path)
        def odd(shape, scale):
            B, S, H, D = shape
            buf = _random(rng, (B, S, H * D + 3), c.dtype, scale)
            return np.lib.stride_tricks.as_strided(buf, shape, (buf.strides[0], buf.strides[1],
                                                                D * buf.itemsize, buf.itemsize))
        return odd(q_shape, c.input_scale), odd(kv_shape, c.input_scale), odd(kv_shape, 1.0)
    q, k = _random(rng, q_shape, c.dtype, c.input_scale), _random(rng, kv_shape, c.dtype, c.input_scale)
    if c.rising:
        # A common direction u (u.u = sqrt(D)) in every query, and in key j with weight rising * j / (Sk - 1):
        # the scaled logit q.k_j / sqrt(D) gains about that weight.
        u = np.full(c.D, c.D ** -0.25)
        q = (q.astype(np.float64) + u).astype(q.dtype)
        ramp = c.rising * np.arange(c.Sk)[None, :, None, None] / max(c.Sk - 1, 1)
        k = (k.astype(np.float64) + ramp * u).astype(k.dtype)
    return q, k, _random(rng, kv_shape, c.dtype)


def poisoned(shape, dtype):
    return np.full(shape, np.nan, support.numpy_dtype(dtype))


def run_and_check(dev, c, seed):
    rng = np.random.default_rng(seed)
    q, k, v = make_qkv(rng, c)
    out, lse = poisoned((c.B, c.Sq, c.Hq, c.D), c.dtype), poisoned((c.B, c.Hq, c.Sq), "f32")
    sinks = (rng.standard_normal(c.Hq) * 3).astype(np.float32) if c.sinks else None
    extras = dict(sinks=sinks, alibi_slopes=c.slopes(rng))
    got = tessera.flash_attn(q, k, v, **c.options(), return_lse=True, **extras, out=out, lse=lse, device=dev)
    assert got[0] is out and got[1] is lse
    ref = testing.attention_reference(q, k, v, **c.options(), **extras)
    same = testing.attention_reference(q, k, v, **c.options(), **extras, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"{dev.arch} {c} seed {seed}: {result}"
    return ref


def needs(c_dtype):
    if c_dtype == "bf16" and support.ml_dtypes is None:
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")


def _params():
    for t in support.SIM_TARGETS:
        for c in cases_for(t):
            yield pytest.param(t, c, id=f"{t}-{c.id}")


@pytest.mark.parametrize("target, case", list(_params()))
def test_flash_attn_matches_float64(bundles, target, case):
    needs(case.dtype)
    dev = sim_for(bundles, target)
    ref = run_and_check(dev, case, np.random.SeedSequence().entropy)
    if case.id.startswith(("br-sq>sk", "window-excludes", "sk0")):
        assert np.isinf(ref.lse).any(), "the case was meant to have fully masked rows"
    if case.sinks and "sq>sk" in case.id:   # rows without a visible key: LSE is the sink, finite
        assert np.isfinite(ref.lse).all() and (ref.o[:, 0] == 0).all()


def _varlen_inputs(rng, lens_q, lens_k, Hq, Hkv, D, dtype):
    """cu_seqlens_q/k of these lengths and packed random q (total_q, Hq, D), k and v (total_k, Hkv, D)."""
    cu_q, cu_k = np.cumsum([0] + lens_q).astype(np.int32), np.cumsum([0] + lens_k).astype(np.int32)
    q = _random(rng, (cu_q[-1], Hq, D), dtype)
    k, v = _random(rng, (cu_k[-1], Hkv, D), dtype), _random(rng, (cu_k[-1], Hkv, D), dtype)
    return cu_q, cu_k, q, k, v


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_flash_attn_varlen_with_empty_sequences(bundles, target):
    dtype, mask = VARLEN[target]
    needs(dtype)
    dev = sim_for(bundles, target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    lens_q, lens_k = [17, 0, 30, 5], [25, 9, 0, 40]        # an empty query sequence, an empty key sequence
    Hq, Hkv, D = 4, 2, 64
    cu_q, cu_k, q, k, v = _varlen_inputs(rng, lens_q, lens_k, Hq, Hkv, D, dtype)
    out, lse = poisoned(q.shape, dtype), poisoned((Hq, cu_q[-1]), "f32")
    options = dict(causal=True, causal_align="top_left" if mask == "tl" else "bottom_right", window=(-1, -1))
    tessera.flash_attn_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **options, return_lse=True,
                              out=out, lse=lse, device=dev)
    ref = testing.attention_reference_varlen(q, k, v, cu_q, cu_k, **options)
    same = testing.attention_reference_varlen(q, k, v, cu_q, cu_k, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"{target} varlen {dtype} {mask} seed {seed}: {result}"
    assert np.isinf(lse[:, cu_q[2]:cu_q[3]]).all() and (out[cu_q[2]:cu_q[3]] == 0).all()


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_flash_attn_varlen_alibi_per_sequence_and_chunk(bundles, target):
    """(B, Hq) slopes (each sequence its row) and a chunk, positions and off per sequence."""
    dev = sim_for(bundles, target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    lens_q, lens_k = [9, 0, 21, 30], [25, 7, 0, 12]
    Hq, Hkv, D = 4, 2, 64
    cu_q, cu_k, q, k, v = _varlen_inputs(rng, lens_q, lens_k, Hq, Hkv, D, "f16")
    options = dict(causal=True, alibi_slopes=rng.uniform(0.05, 1.0, (len(lens_q), Hq)).astype(np.float32),
                   attention_chunk=6)
    out, lse = poisoned(q.shape, "f16"), poisoned((Hq, cu_q[-1]), "f32")
    tessera.flash_attn_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **options, return_lse=True, out=out,
                              lse=lse, device=dev)
    ref = testing.attention_reference_varlen(q, k, v, cu_q, cu_k, **options)
    same = testing.attention_reference_varlen(q, k, v, cu_q, cu_k, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"{target} varlen ALiBi and chunk, seed {seed}: {result}"


@pytest.mark.parametrize("Dqk, Dv, causal", [(48, 32, "br"), (32, 64, "")])
@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_v_head_dim_differs(bundles, target, Dqk, Dv, causal):
    """V's head_dim below or above Q's and K's (DeepSeek's MLA prefill: 192 and 128), every array zero-padded to the
    larger's kernel head_dim: O in V's head_dim against float64, the default scale 1/sqrt(Dqk), into a given out."""
    dev = sim_for(bundles, target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    B, Sq, Sk, Hq, Hkv = 2, 19, 37, 6, 2
    q, k = _random(rng, (B, Sq, Hq, Dqk), "f16"), _random(rng, (B, Sk, Hkv, Dqk), "f16")
    v = _random(rng, (B, Sk, Hkv, Dv), "f16")
    options = dict(causal=bool(causal))
    out = poisoned((B, Sq, Hq, Dv), "f16")
    got, lse = tessera.flash_attn(q, k, v, **options, return_lse=True, out=out, device=dev)
    assert got is out
    ref = testing.attention_reference(q, k, v, **options)
    same = testing.attention_reference(q, k, v, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"{target} Dqk {Dqk} Dv {Dv}, seed {seed}: {result}"


def _paged(rng, k, v, cu_k, page_size, max_pages):
    """k and v (total_k, Hkv, D) copied into pages of page_size at random places among twice as many as they need
    (NaN everywhere else, so a read of anything else shows) and the (B, max_pages) table naming them (-1 past each
    sequence's pages)."""
    lens = np.diff(cu_k)
    need = -(-lens // page_size)
    pages = rng.permutation(2 * need.sum())
    shape = (len(pages), page_size) + k.shape[1:]
    k_pages, v_pages = np.full(shape, np.nan, k.dtype), np.full(shape, np.nan, v.dtype)
    table = np.full((len(lens), max_pages), -1, np.int32)
    used = 0
    for b, n in enumerate(lens):
        for j in range(need[b]):
            page, rows = pages[used], slice(cu_k[b] + j * page_size, min(cu_k[b] + (j + 1) * page_size, cu_k[b + 1]))
            table[b, j] = page
            k_pages[page, :rows.stop - rows.start], v_pages[page, :rows.stop - rows.start] = k[rows], v[rows]
            used += 1
    return k_pages, v_pages, table


@pytest.mark.parametrize("page_size", [16, 128])
@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_flash_attn_varlen_paged_kv(bundles, target, page_size):
    """K and V in a paged cache through a block table (chunked prefill): pages smaller than a key tile (each row its
    own entry) and larger (a tile's whole in one page), GQA 2:1, causal with a window, against the float64
    reference on the packed keys; pages past each sequence's, tails past its length and the rest of the table are
    never read (NaN, -1)."""
    dev = sim_for(bundles, target)
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    lens_q, lens_k = [5, 0, 33, 17], [300, 9, 0, 140]
    Hq, Hkv, D = 4, 2, 64
    cu_q, cu_k, q, k, v = _varlen_inputs(rng, lens_q, lens_k, Hq, Hkv, D, "f16")
    k_pages, v_pages, table = _paged(rng, k, v, cu_k, page_size, max_pages=-(-max(lens_k) // page_size) + 1)
    options = dict(causal=True, window=(200, -1))
    out, lse = poisoned(q.shape, "f16"), poisoned((Hq, cu_q[-1]), "f32")
    tessera.flash_attn_varlen(q, k_pages, v_pages, cu_q, cu_k, max(lens_q), max(lens_k), **options, return_lse=True,
                              block_table=table, out=out, lse=lse, device=dev)
    ref = testing.attention_reference_varlen(q, k, v, cu_q, cu_k, **options)
    same = testing.attention_reference_varlen(q, k, v, cu_q, cu_k, **options, precision="same")
    result = testing.check_attention(out, ref, same, lse)
    assert result.ok, f"{target} paged K/V, pages of {page_size}, seed {seed}: {result}"


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_extreme_logit_gives_v_exactly(bundles, target):
    """Raw logit -524288 (q = 64, k = -128 over D = 64, scale 1) with one visible key: O equals V bit for bit."""
    dev = sim_for(bundles, target)
    rng = np.random.default_rng()
    q = np.full((1, 5, 2, 64), 64.0, np.float16)
    k = np.full((1, 1, 2, 64), -128.0, np.float16)
    v = _random(rng, (1, 1, 2, 64), "f16")
    out, lse = poisoned(q.shape, "f16"), poisoned((1, 2, 5), "f32")
    tessera.flash_attn(q, k, v, scale=1.0, return_lse=True, out=out, lse=lse, device=dev)
    assert (out == np.broadcast_to(v, out.shape)).all(), f"{target}: O != V: max error {np.abs(out - v).max()}"
    assert np.isfinite(lse).all() and np.abs(lse + 524288).max() <= 1.0, lse
    # Causal top-left with all logits -524288: query 0 sees key 0 only.
    k = np.full((1, 8, 2, 64), -128.0, np.float16)
    v = _random(rng, (1, 8, 2, 64), "f16")
    q = np.full((1, 8, 2, 64), 64.0, np.float16)
    out = poisoned(q.shape, "f16")
    tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", scale=1.0, out=out, device=dev)
    assert (out[:, 0] == v[:, 0]).all() and not np.isnan(out).any()
    ref = testing.attention_reference(q, k, v, causal=True, causal_align="top_left", scale=1.0)
    same = testing.attention_reference(q, k, v, causal=True, causal_align="top_left", scale=1.0, precision="same")
    assert testing.check_attention(out, ref, same).ok


@pytest.mark.parametrize("target", support.SIM_TARGETS)
def test_new_outputs_and_reuse(bundles, target):
    """Outputs allocated by the call (without LSE: the kernel writes a scratch one), then a reused output."""
    dev = sim_for(bundles, target)
    rng = np.random.default_rng()
    c = Case("reuse", "f16", 64, Sq=21, Sk=30, causal="tl")
    out = poisoned((1, 21, 2, 64), "f16")
    for _ in range(2):
        q, k, v = make_qkv(rng, c)
        fresh = tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", device=dev)
        assert isinstance(fresh, np.ndarray) and fresh.shape == q.shape and fresh.dtype == np.float16
        tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", out=out, device=dev)
        ref = testing.attention_reference(q, k, v, **c.options())
        same = testing.attention_reference(q, k, v, **c.options(), precision="same")
        assert testing.check_attention(out, ref, same).ok and (fresh == out).all()

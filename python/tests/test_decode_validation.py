"""tessera.paged_decode / paged_decode_plan argument checks, all made before any device is touched; kernel set choice,
the missing-variant message, the split heuristic, launch arguments (NHD and HND caches), plans and empty sizes through
the fake sim plugin; and the float64 paged decode reference itself (no GPU, no simulator)."""
import math
import types

import pytest

import support
from support import np, torch
import tessera
from tessera import _decode, _device, testing

NO_DEVICE = "sim:validation-only"   # its plugin never loads: an InputError proves the check came first
BR = "causal_bottom_right"


@pytest.fixture(autouse=True)
def no_plugin(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(tmp_path / "no-plugin.so"))


def f16(*shape):
    return np.ones(shape, np.float16)


def cache_shape(num_pages, block_size, Hkv, D, layout="NHD"):
    return (num_pages, block_size, Hkv, D) if layout == "NHD" else (num_pages, Hkv, block_size, D)


def decode_args(B=2, Sq=1, Hq=4, Hkv=2, D=64, block_size=16, num_pages=6, max_blocks=3, length=17, layout="NHD"):
    """q, k_cache, v_cache, block_table, cache_seqlens of a call: sequence b uses pages b * max_blocks, ... (mod
    num_pages), every sequence `length` keys long."""
    shape = cache_shape(num_pages, block_size, Hkv, D, layout)
    table = np.arange(B * max_blocks, dtype=np.int32).reshape(B, max_blocks) % np.int32(max(num_pages, 1))
    return f16(B, Sq, Hq, D), f16(*shape), f16(*shape), table, np.full(B, length, np.int32)


def replaced(**changes):
    args = dict(zip(("q", "k_cache", "v_cache", "block_table", "cache_seqlens"), decode_args()))
    args.update(changes)
    return args


HND = {"kv_layout": "HND"}
PAGES = np.arange(6, dtype=np.int32).reshape(2, 3)


@pytest.mark.parametrize("changes, kwargs, message", [
    ({"q": np.ones((2, 1, 4, 64), np.float32)}, {}, r"q has dtype float32; supported: float16, bfloat16"),
    ({"v_cache": np.ones((6, 16, 2, 64), np.float32)}, {}, r"v_cache has dtype float32; supported"),
    ({"k_cache": f16(6, 16, 2, 64).view(np.int16)}, {}, r"k_cache has dtype int16"),
    ({"q": f16(2, 4, 64)}, {}, r"q must be 4-D \(B, Sq, Hq, D\), got shape \(2, 4, 64\)"),
    ({"k_cache": f16(6, 16, 128)}, {}, r"k_cache must be 4-D \(num_pages, block_size, Hkv, D\), got shape "
                                       r"\(6, 16, 128\)"),
    ({"v_cache": f16(6, 2, 16)}, HND, r"v_cache must be 4-D \(num_pages, Hkv, block_size, D\)"),
    ({}, {"kv_layout": "vllm"}, r"kv_layout must be 'NHD' \(num_pages, block_size, Hkv, D\) or 'HND' \(num_pages, "
                                r"Hkv, block_size, D\), got 'vllm'"),
    ({}, {"kv_layout": "nhd"}, r"kv_layout must be 'NHD' .*, got 'nhd'"),
    ({"k_cache": f16(6, 16, 2, 32), "v_cache": f16(6, 16, 2, 32)}, {}, r"q, k_cache and v_cache must have the same "
                                                                        r"head_dim, got 64, 32 and 32"),
    ({"q": f16(2, 1, 4, 80), "k_cache": f16(6, 16, 2, 80), "v_cache": f16(6, 16, 2, 80)}, {},
     r"head_dim 80 is not supported \(supported: 32, 64, 96, 128, 256\)"),
    ({"v_cache": f16(7, 16, 2, 64)}, {}, r"k_cache and v_cache must have the same shape \(num_pages, block_size, "
                                         r"Hkv, D\), got \(6, 16, 2, 64\) and \(7, 16, 2, 64\)"),
    ({"q": f16(2, 1, 6, 64), "k_cache": f16(6, 16, 4, 64), "v_cache": f16(6, 16, 4, 64)}, {},
     r"Hq = 6 must be a multiple of the number of key/value heads Hkv = 4"),
    ({"k_cache": f16(6, 16, 2, 128)[..., ::2]}, {}, r"k_cache has stride 2 on head_dim \(its last dimension\) and "
                                                    r"strides \(4096, 256, 128, 2\) \(elements\); the head_dim stride "
                                                    r"must be 1"),
    ({"q": np.ones((2, 1, 64, 4), np.float16).transpose(0, 1, 3, 2)}, {}, r"q has stride 4 on head_dim"),
    ({"k_cache": f16(6, 48, 2, 64), "v_cache": f16(6, 48, 2, 64)}, {}, r"block_size 48 \(k_cache \(6, 48, 2, 64\) as "
                                                                       r"NHD \(num_pages, block_size, Hkv, D\)\) must "
                                                                       r"be a power of two from 1 to 1024"),
    ({"k_cache": f16(1, 2, 2048, 64), "v_cache": f16(1, 2, 2048, 64)}, HND, r"block_size 2048 .* as HND"),
    ({"k_cache": f16(6, 16, 0, 64), "v_cache": f16(6, 16, 0, 64)}, {}, r"Hq = 4 must be a multiple .* Hkv = 0"),
    ({"block_table": PAGES.astype(np.int64)}, {}, r"block_table has dtype int64; it must be int32"),
    ({"block_table": PAGES[0]}, {}, r"block_table must be 2-D \(B, max_blocks\), got shape \(3,\)"),
    ({"block_table": np.zeros((3, 3), np.int32)}, {}, r"q has batch size 2 but block_table has 3 rows"),
    ({"block_table": np.zeros((2, 6), np.int32)[:, ::2]}, {}, r"block_table has shape \(2, 3\) and strides \(6, 2\) "
                                                              r"\(elements\); it needs unit stride along its last "
                                                              r"dimension"),
    ({"cache_seqlens": np.array([17, 17], np.int64)}, {}, r"cache_seqlens has dtype int64; it must be int32"),
    ({"cache_seqlens": np.array([[17], [17]], np.int32)}, {}, r"cache_seqlens must be 1-D \(B,\), got shape "
                                                              r"\(2, 1\)"),
    ({"cache_seqlens": np.array([17, 17, 17], np.int32)}, {}, r"q has batch size 2 but cache_seqlens has 3 rows"),
    ({"cache_seqlens": np.array([17, 0, 17, 0], np.int32)[::2]}, {}, r"cache_seqlens has shape \(2,\) and strides "
                                                                     r"\(2,\) \(elements\); it needs unit stride"),
    ({"cache_seqlens": np.array([17, 49], np.int32)}, {}, r"cache_seqlens\[1\] = 49 is outside \[0, 48\] "
                                                          r"\(block_table has 3 pages of 16 tokens per sequence\)"),
    ({"cache_seqlens": np.array([-1, 3], np.int32)}, {}, r"cache_seqlens\[0\] = -1 is outside \[0, 48\]"),
    ({"block_table": np.array([[0, 1, 2], [3, 6, 5]], np.int32)}, {}, r"block_table\[1, 1\] = 6 is not a page of "
                                                                      r"the cache \(0 to 5\); cache_seqlens\[1\] = "
                                                                      r"17 uses its first 2 entries"),
    ({"block_table": np.array([[0, -1, 2], [3, 4, 5]], np.int32)}, {}, r"block_table\[0, 1\] = -1 is not a page"),
    ({}, {"window_left": -2}, r"window_left must be >= 0 \(keys pos - window_left <= j are visible\) or -1 \(no "
                              r"window\), got -2"),
    ({}, {"window_left": 1.5}, r"window_left must be an integer, got 1.5"),
    ({}, {"num_splits": -1}, r"num_splits must be >= 1, or 0 for the heuristic's choice, got -1"),
    ({}, {"num_splits": "4"}, r"num_splits must be an integer, got '4'"),
    ({}, {"softcap": -1.0}, r"softcap must be finite and >= 0 \(0 disables it\), got -1.0"),
    ({}, {"softmax_scale": float("nan")}, r"scale must be finite, got nan"),
    ({}, {"k_scale": 0.5}, r"k_scale=0.5 given, but scales dequantise fp8 caches and this cache is float16: leave "
                           r"them out"),
    ({}, {"k_scale": 1.0, "v_scale": 2.0}, r"k_scale=1.0 and v_scale=2.0 given"),
    ({}, {"out": f16(2, 1, 4, 32)}, r"out has shape \(2, 1, 4, 32\), expected \(2, 1, 4, 64\)"),
    ({}, {"out": np.ones((2, 1, 4, 64), np.float32)}, r"out has dtype float32, expected float16"),
    ({}, {"out": np.broadcast_to(f16(1, 1, 4, 64), (2, 1, 4, 64))}, r"out has shape \(2, 1, 4, 64\) and strides "
                                                                    r"\(0, 0, 64, 1\)"),
    ({"block_table": [[0, 1, 2], [3, 4, 5]]}, {}, r"block_table is a builtins.list; expected a torch tensor or a "
                                                  r"numpy array"),
    ({}, {"sinks": np.zeros(2, np.float32)}, r"sinks must be a float32 vector of one logit per query head, shape "
                                             r"\(4,\) with unit stride, got shape \(2,\)"),
    ({}, {"sinks": np.zeros(4, np.float16)}, r"sinks must be .* dtype float16"),
    ({}, {"alibi_slopes": np.zeros(3, np.float32)}, r"tessera.paged_decode: alibi_slopes must be float32 of shape "
                                                    r"\(4,\) or \(2, 4\) .* got shape \(3,\)"),
    ({}, {"alibi_slopes": np.zeros((2, 8), np.float32)[:, ::2]}, r"alibi_slopes must be .* unit stride along the "
                                                                 r"heads, got shape \(2, 4\), dtype float32, "
                                                                 r"strides \(8, 2\)"),
    ({}, {"cache_leftpad": np.zeros(2, np.int64)}, r"cache_leftpad must be an int32 vector of each sequence's first "
                                                   r"key, shape \(2,\) with unit stride, got shape \(2,\), dtype int64"),
    ({}, {"cache_leftpad": np.array([0, 18], np.int32)}, r"cache_leftpad\[1\] = 18 is outside \[0, cache_seqlens\[1\] "
                                                         r"= 17\]"),
    ({}, {"cache_leftpad": np.array([-1, 0], np.int32)}, r"cache_leftpad\[0\] = -1 is outside"),
    # Entries of pages wholly before the first key are never read, the others are checked.
    ({"block_table": np.array([[-1, 1, 2], [3, 4, 5]], np.int32)}, {"cache_leftpad": np.array([15, 0], np.int32)},
     r"block_table\[0, 0\] = -1 is not a page of the cache .* its first 2 entries from entry 0 \(cache_leftpad\[0\] "
     r"= 15\)"),
])
def test_paged_decode_rejected_before_the_device(changes, kwargs, message):
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.paged_decode(**replaced(**changes), device=NO_DEVICE, **kwargs)
    assert isinstance(e.value, ValueError) and str(e.value).startswith("tessera.paged_decode: ")


def test_plan_rejected_before_the_device():
    with pytest.raises(tessera.InputError, match=r"^tessera.paged_decode_plan: kv_layout must be"):
        tessera.paged_decode_plan(*decode_args(), kv_layout="vllm", device=NO_DEVICE)
    with pytest.raises(tessera.InputError, match=r"^tessera.paged_decode_plan: num_splits must be >= 1"):
        tessera.paged_decode_plan(*decode_args(), num_splits=-3, device=NO_DEVICE)


@support.requires_ml_dtypes
@pytest.mark.parametrize("fp8, kwargs, message", [
    (("k", "v"), {}, r"the caches are float8_e4m3fn: k_scale and v_scale \(dequantised value = stored x scale\) "
                     r"must be given"),
    (("k", "v"), {"k_scale": 0.5}, r"the caches are float8_e4m3fn: v_scale \("),
    (("k", "v"), {"k_scale": 0.0, "v_scale": 1.0}, r"k_scale must be a positive finite number, got 0.0"),
    (("k", "v"), {"k_scale": 1.0, "v_scale": float("inf")}, r"v_scale must be a positive finite number, got inf"),
    (("k", "v"), {"k_scale": np.ones(2, np.float32), "v_scale": 1.0},
     r"k_scale must be a one-element float32 tensor \(per-tensor\) or \(num_pages, Hkv, block_size\) float32 "
     r"\(per-token\), got dtype float32 and shape \(2,\)"),
    (("k", "v"), {"k_scale": np.ones(1, np.float64), "v_scale": 1.0}, r"got dtype float64 and shape \(1,\)"),
    (("k", "v"), {"k_scale": "1", "v_scale": 1.0}, r"k_scale must be a number, a one-element float32 tensor or "
                                                   r"per-token scales \(num_pages, Hkv, block_size\) float32, got str"),
    # per-token scales: (num_pages, Hkv, block_size) = (6, 2, 16) here, both of them, with the same strides
    (("k", "v"), {"k_scale": np.ones((6, 2, 16), np.float32), "v_scale": 1.0},
     r"k_scale and v_scale must both be per-tensor \(a number or one element\) or both per-token \(6, 2, 16\) "
     r"\(num_pages, Hkv, block_size\), got per-token and per-tensor"),
    (("k", "v"), {"k_scale": np.ones((6, 16, 2), np.float32), "v_scale": np.ones((6, 16, 2), np.float32)},
     r"per-token k_scale must be \(num_pages, Hkv, block_size\) = \(6, 2, 16\) like the caches, got \(6, 16, 2\)"),
    (("k", "v"), {"k_scale": np.ones((6, 2, 16), np.float32),
                  "v_scale": np.ones((6, 16, 2), np.float32).transpose(0, 2, 1)},
     r"per-token k_scale and v_scale must have the same strides \(the kernels address both alike\), got "
     r"\(32, 16, 1\) and \(32, 1, 2\)"),
    (("v",), {}, r"k_cache and v_cache must have the same dtype, got float16 and float8_e4m3fn"),
])
def test_fp8_caches_need_their_scales_and_dtypes_must_agree(fp8, kwargs, message):
    q, k, v, table, lens = decode_args()
    k, v = (x.astype(support.ml_dtypes.float8_e4m3fn) if name in fp8 else x for name, x in (("k", k), ("v", v)))
    with pytest.raises(tessera.InputError, match=message):
        tessera.paged_decode(q, k, v, table, lens, **kwargs, device=NO_DEVICE)


@support.requires_ml_dtypes
def test_q_and_a_non_fp8_cache_share_a_dtype():
    q, k, v, table, lens = decode_args()
    bf16 = support.ml_dtypes.bfloat16
    with pytest.raises(tessera.InputError, match=r"q, k_cache and v_cache must have the same dtype \(or fp8 caches: "
                                                 r"float8_e4m3fn, float8_e4m3fnuz\), got float16 and bfloat16"):
        tessera.paged_decode(q, k.astype(bf16), v.astype(bf16), table, lens, device=NO_DEVICE)
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):   # fp8 with scales reaches the device
        fp8 = support.ml_dtypes.float8_e4m3fnuz
        tessera.paged_decode(q, k.astype(fp8), v.astype(fp8), table, lens, k_scale=0.5,
                             v_scale=np.full(1, 2.0, np.float32), device=NO_DEVICE)


def test_valid_arguments_reach_the_device():
    """The counterpart of the tests above: good arguments fail only at the plugin. An HND cache sliced from one
    (pages, 2, Hkv, block, D) tensor, q sliced from a packed one, a block table with a row stride and entries past
    each sequence's pages that are no page at all (-1, INT32_MAX), lengths 0 and up to the table's capacity, a
    cache without pages for a batch of empty sequences, every option."""
    kv = f16(5, 2, 2, 16, 64)
    packed = f16(3, 2, 8, 64)
    table = np.full((3, 8), -1, np.int32)[:, :4]
    table[0, :4] = [4, 0, 3, 1]
    table[1, 1] = np.iinfo(np.int32).max
    lens = np.array([64, 0, 1], np.int32)
    table[2, 0] = 2
    options = dict(causal=False, softmax_scale=0.1, window_left=3, softcap=30.0, num_splits=5, return_lse=True)
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.paged_decode(packed[:, :, :4], kv[:, 0], kv[:, 1], table, lens, kv_layout="HND", out=f16(3, 2, 4, 64),
                             device=NO_DEVICE, **options)
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.paged_decode(*decode_args(num_pages=0, max_blocks=0, length=0), device=NO_DEVICE, **options)


def test_numpy_needs_a_sim_device_and_a_writable_out():
    with pytest.raises(tessera.InputError, match=r"^tessera.paged_decode: numpy arrays run on the simulator"):
        tessera.paged_decode(*decode_args())
    out = f16(2, 1, 4, 64)
    out.flags.writeable = False
    with pytest.raises(tessera.InputError, match="out is a read-only numpy array"):
        tessera.paged_decode(*decode_args(), out=out, device=NO_DEVICE)


@support.requires_torch
def test_torch_checks_before_the_device():
    q, k, v, table, lens = (torch.from_numpy(x) for x in decode_args())
    with pytest.raises(tessera.InputError, match="torch tensors and numpy arrays mixed"):
        tessera.paged_decode(q, k, v, table, lens.numpy())
    with pytest.raises(tessera.InputError, match="tensors are on cpu; torch tensors must be on a CUDA"):
        tessera.paged_decode(q, k, v, table, lens)
    with pytest.raises(tessera.InputError, match=r"cache_seqlens has dtype int64; it must be int32"):
        tessera.paged_decode(q, k, v, table, lens.long())
    with pytest.raises(tessera.InputError, match=r"q requires grad, but tessera.paged_decode has no backward"):
        tessera.paged_decode(q.clone().requires_grad_(), k, v, table, lens)
    with torch.no_grad():   # inference: the plain checks
        with pytest.raises(tessera.InputError, match="tensors are on cpu"):
            tessera.paged_decode(q.clone().requires_grad_(), k, v, table, lens)


# ---- Through the fake sim plugin ---------------------------------------------------------------------------------
FAKE = support.fake_driver_path()
SETS = {   # name: (dtype, head_dim, block_size, mask, features, rows)
    "pd_a_fp8": ("f16", 64, 16, BR, (), 16),                   # an fp8 cache's set: only for fp8 caches
    "pd_f16_d64_b16": ("f16", 64, 16, BR, support.DECODE_FEATURES, 16),
    "pd_f16_d64_b16_lean": ("f16", 64, 16, BR, (), 16),
    "pd_f16_d64_b16_split": ("f16", 64, 16, BR, ("split_kv",), 16),
    "pd_f16_d64_b16_none_lse": ("f16", 64, 16, "none", ("return_lse",), 16),
    "pd_f16_d64_b64": ("f16", 64, 64, BR, support.DECODE_FEATURES, 32),
    "pd_bf16_d128_b16": ("bf16", 128, 16, BR, support.DECODE_FEATURES, 16),
    "pd_f16_d256_b16_rows": ("f16", 256, 16, BR, support.DECODE_FEATURES, 16),   # sm_90's stride rules
}


@pytest.fixture
def fake_sim(monkeypatch, tmp_path):
    """A gfx942 bundle of fake paged_decode sets on the fake sim plugin; KernelSet.launch and .reserve record their
    values: (fake driver, device, [(set name, values)], [(set name, reserved values)], {kernel name: entry})."""
    if FAKE is None or not FAKE.is_file():
        pytest.skip("fake driver not built (ninja -C build tessera_fake_driver)")
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(FAKE))
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path))
    sets = [support.paged_decode_kernel_set(name, dtype, D, block, mask, features, rows,
                                            vector_rows=name.endswith("_rows"), cache_writer=name == "pd_f16_d64_b16",
                                            kv_dtype="f8E4M3FN" if name.endswith("_fp8") else None)
            for name, (dtype, D, block, mask, features, rows) in SETS.items()]
    kernels = [k for ks, _ in sets for k in ks]
    support.write_bundle(tmp_path / "gfx942", "gfx942", kernels, [s for _, s in sets])
    launched, reserved = [], []
    launch, reserve = _device.KernelSet.launch, _device.KernelSet.reserve
    monkeypatch.setattr(_device.KernelSet, "launch", lambda self, stream=None, **values:
                        launched.append((self.name, values)) or launch(self, stream, **values))
    monkeypatch.setattr(_device.KernelSet, "reserve", lambda self, stream=None, **values:
                        reserved.append((self.name, values)) or reserve(self, stream, **values))
    return (support.FakeDriver(FAKE), tessera.Device("sim:gfx942"), launched, reserved,
            {k["name"]: k for k in kernels})


def grids(fake):
    return [(launch.entry.decode(), tuple(launch.grid)) for launch in fake.launches()]


def test_the_sets_kernels_launch_with_the_abis_grids(fake_sim):
    fake, dev, launched, _, _ = fake_sim
    B, Sq, Hq, Hkv = 3, 2, 12, 2
    out, lse = tessera.paged_decode(*decode_args(B=B, Sq=Sq, Hq=Hq, Hkv=Hkv, num_pages=9), window_left=4,
                                    num_splits=3, return_lse=True, device=dev)
    assert out.shape == (B, Sq, Hq, 64) and out.dtype == np.float16 and lse.shape == (B, Hq, Sq)
    assert lse.dtype == np.float32 and launched[-1][0] == "pd_f16_d64_b16"
    # _decode: [splits, Hkv * ceil(Hq / Hkv * Sq / rows), B]; _combine: [ceil(Hq * Sq / 4), B, 1]
    assert grids(fake) == [("pd_f16_d64_b16_decode", (3, Hkv * 1, B)), ("pd_f16_d64_b16_combine", (6, B, 1))]
    assert fake.lib.fake_memset_count() == 0   # decode_partials is not zeroed
    fake.lib.fake_reset()
    tessera.paged_decode(*decode_args(B=B, Sq=Sq, Hq=Hq, Hkv=Hkv, num_pages=9), window_left=4, num_splits=1,
                         device=dev)
    assert grids(fake) == [("pd_f16_d64_b16_decode", (1, Hkv, B))]   # one split: no combine
    fake.lib.fake_reset()
    tessera.paged_decode(*decode_args(B=1, Sq=4, Hq=32, Hkv=4, num_pages=9), num_splits=2, device=dev)
    assert grids(fake) == [("pd_f16_d64_b16_split_decode", (2, 4 * 2, 1)),   # 8 heads x 4 tokens: two of 16 rows
                           ("pd_f16_d64_b16_split_combine", (32, 1, 1))]


def strides(values, tensor, axes):
    return tuple(values[f"{tensor}_stride_{a}"] for a in axes)


def test_launch_arguments_of_an_nhd_cache(fake_sim):
    """k and v pages sliced from one (pages, block, 2, Hkv, D) tensor, q sliced from a packed one, a block table with
    a row stride, an output with gaps between rows: every stride as the arrays have it."""
    fake, dev, launched, _, entries = fake_sim
    B, Sq, Hq, Hkv, D, block, pages = 3, 2, 8, 2, 64, 16, 10
    kv = f16(pages, block, 2, Hkv, D)
    packed = f16(B, Sq, Hq + 2 * Hkv, D)
    table = np.zeros((B, 7), np.int32)[:, :4]
    lens = np.array([64, 0, 33], np.int32)
    out = f16(B, Sq, Hq, D + 8)[..., :D]
    got = tessera.paged_decode(packed[:, :, :Hq], kv[:, :, 0], kv[:, :, 1], table, lens, softmax_scale=0.25,
                               window_left=5, softcap=20.0, num_splits=4, out=out, device=dev)
    assert got is out
    name, values = launched[-1]
    assert name == "pd_f16_d64_b16"
    assert (values["B"], values["Sq"], values["Hq"], values["Hkv"], values["num_splits"]) == (B, Sq, Hq, Hkv, 4)
    assert strides(values, "q", "bsh") == (Sq * (Hq + 2 * Hkv) * D, (Hq + 2 * Hkv) * D, D)
    for t in "kv":
        assert strides(values, t, ("page", "token", "head")) == (block * 2 * Hkv * D, 2 * Hkv * D, D)
    assert values["block_table_stride"] == 7
    assert strides(values, "o", "bsh") == (Sq * Hq * (D + 8), Hq * (D + 8), D + 8)
    assert strides(values, "lse", "bh") == (Hq * Sq, Sq)   # a scratch LSE: the set writes one
    assert values["scale"] == 0.25 and (values["window_left"], values["softcap"]) == (5, 20.0)
    assert "decode_partials" not in values and set(values) == dev.bundle().kernel_set(name).settable
    # What the decode kernel received, in its C layout.
    args = support.unpack_args(entries["pd_f16_d64_b16_decode"], fake.launches()[0].args)
    assert (args["k_stride_token"], args["v_stride_head"], args["block_table_stride"]) == (2 * Hkv * D, D, 7)
    assert args["decode_partials"] != 0 and args["lse"] != 0 and args["window_left"] == 5


def test_a_cache_whose_rows_are_not_16_byte_vectors_is_refused_where_the_kernels_copy_them(fake_sim):
    """The set's `divisible` rules on the cache strides (kernels that copy whole 16-byte rows asynchronously): a
    cache with other strides is an InputError before any launch, never a copy; the same cache serves a set without
    those rules."""
    fake, dev, launched, _, _ = fake_sim
    B, Hq, Hkv, block, pages = 2, 4, 2, 16, 6
    table, lens = np.zeros((B, 3), np.int32), np.array([20, 5], np.int32)
    for D, name in ((256, "pd_f16_d256_b16_rows"), (64, "pd_f16_d64_b16_split")):
        cache = f16(pages, block, Hkv, D + 4)[..., :D]                  # head stride D + 4: not a multiple of 8
        q = f16(B, 1, Hq, D)
        if name.endswith("_rows"):
            with pytest.raises(tessera.InputError, match=r"k_cache has head stride 260 \(elements; strides "
                                                         r"\(8320, 520, 260, 1\)\); the gfx942 decode kernels copy "
                                                         r"its rows as 16-byte vectors, so every stride must be a "
                                                         r"multiple of 8"):
                tessera.paged_decode(q, cache, cache, table, lens, device=dev)
            assert not launched
        else:
            tessera.paged_decode(q, cache, cache, table, lens, device=dev)
            assert launched[-1][0] == name


def test_launch_arguments_of_an_hnd_cache(fake_sim):
    """HND pages (pages, Hkv, block, D): the token stride is the third dimension's, the head stride the second's; an
    NHD cache viewed as HND gives the NHD strides."""
    fake, dev, launched, _, _ = fake_sim
    B, Hq, Hkv, D, block, pages = 2, 4, 2, 64, 16, 6
    q, k, v, table, lens = decode_args(B=B, Hq=Hq, Hkv=Hkv, D=D, block_size=block, num_pages=pages, layout="HND")
    tessera.paged_decode(q, k, v, table, lens, kv_layout="HND", num_splits=1, device=dev)
    name, values = launched[-1]
    assert name == "pd_f16_d64_b16_lean" and values["B"] == B and "num_splits" not in values
    for t in "kv":
        assert strides(values, t, ("page", "token", "head")) == (Hkv * block * D, D, block * D)
    assert values["block_table_stride"] == 3 and "window_left" not in values and "lse" not in values
    nhd = f16(pages, block, Hkv, D)
    tessera.paged_decode(q, nhd.transpose(0, 2, 1, 3), nhd.transpose(0, 2, 1, 3), table, lens, kv_layout="HND",
                         num_splits=1, device=dev)
    assert strides(launched[-1][1], "k", ("page", "token", "head")) == (block * Hkv * D, Hkv * D, D)


@pytest.mark.parametrize("Sq, options, expected", [
    (1, {"num_splits": 1}, "pd_f16_d64_b16_lean"),                          # the fp8 set has no more features
    (2, {"num_splits": 0}, "pd_f16_d64_b16_split"),                         # the heuristic needs split_kv
    (2, {"num_splits": 7}, "pd_f16_d64_b16_split"),
    (2, {"num_splits": 1, "window_left": 8}, "pd_f16_d64_b16"),
    (2, {"num_splits": 1, "softcap": 1.0}, "pd_f16_d64_b16"),
    (2, {"num_splits": 1, "return_lse": True}, "pd_f16_d64_b16"),
    (1, {"num_splits": 1, "causal": False}, "pd_f16_d64_b16_none_lse"),     # the exact mask first
    (1, {"num_splits": 0, "causal": False}, "pd_f16_d64_b16_split"),        # one token: a causal set serves
    (2, {"num_splits": 1, "causal": False, "return_lse": True}, "pd_f16_d64_b16_none_lse"),
])
def test_kernel_set_choice(fake_sim, Sq, options, expected):
    fake, dev, launched, _, _ = fake_sim
    tessera.paged_decode(*decode_args(Sq=Sq), **options, device=dev)
    assert launched[-1][0] == expected


def test_block_size_and_variants_pick_their_sets(fake_sim):
    fake, dev, launched, _, _ = fake_sim
    tessera.paged_decode(*decode_args(block_size=64), device=dev)
    assert launched[-1][0] == "pd_f16_d64_b64"
    if support.ml_dtypes is not None:
        bf16 = support.ml_dtypes.bfloat16
        q, k, v, table, lens = decode_args(D=128)
        tessera.paged_decode(q.astype(bf16), k.astype(bf16), v.astype(bf16), table, lens, device=dev)
        assert launched[-1][0] == "pd_bf16_d128_b16"


def test_missing_variants_name_the_directive_that_adds_them(fake_sim):
    fake, dev, _, _, _ = fake_sim
    with pytest.raises(tessera.KernelNotFoundError, match=r"\(gfx942\) has no paged_decode kernel set with dtype=f16 "
                                                          r"head_dim=64 block_size=32 mask=causal_bottom_right "
                                                          r"or none split_kv \(paged_decode kernel sets: pd_a_fp8, "
                                                          r"pd_f16_d64_b16, .*\); this directive compiles one: "
                                                          r"tessera.paged_decode @pd_f16_d64_b32 \{dtype = f16, "
                                                          r"head_dim = 64, block_size = 32, mask = "
                                                          r"#tessera.mask<causal_bottom_right>, sliding_window, "
                                                          r"softcap, return_lse, split_kv\}; no tessera-compile "
                                                          r"to build it on demand"):
        tessera.paged_decode(*decode_args(block_size=32), device=dev)
    with pytest.raises(tessera.KernelNotFoundError, match=r"head_dim=32 block_size=16 mask=none or "
                                                          r"causal_bottom_right sliding_window \(.*"
                                                          r"@pd_f16_d32_b16_none \{dtype = f16, head_dim = 32, "
                                                          r"block_size = 16, mask = #tessera.mask<none>, "
                                                          r"sliding_window, softcap, return_lse, split_kv\}; "
                                                          r"no tessera-compile"):
        tessera.paged_decode(*decode_args(D=32), causal=False, window_left=2, num_splits=1, device=dev)
    with pytest.raises(tessera.KernelNotFoundError, match=r"mask=none split_kv \(.*@pd_f16_d64_b16_none \{"):
        tessera.paged_decode(*decode_args(Sq=2), causal=False, device=dev)   # two tokens: the mask matters
    with pytest.raises(tessera.KernelNotFoundError, match=r"dtype=f16 sinks head_dim=64 block_size=16 mask=causal_bottom_right or none "
                                                          r"split_kv \(.*@pd_f16_d64_b16_sinks \{.*split_kv, sinks\}"):
        tessera.paged_decode(*decode_args(), sinks=np.zeros(4, np.float32), device=dev)
    with pytest.raises(tessera.KernelNotFoundError, match=r"dtype=f16 alibi head_dim=64 block_size=16 .* "
                                                          r"@pd_f16_d64_b16_alibi \{.*split_kv, alibi\}"):
        tessera.paged_decode(*decode_args(), alibi_slopes=np.zeros(4, np.float32), device=dev)
    with pytest.raises(tessera.KernelNotFoundError, match=r"dtype=f16 cache_leftpad head_dim=64 block_size=16 .* "
                                                          r"@pd_f16_d64_b16_leftpad \{.*split_kv, cache_leftpad\}"):
        tessera.paged_decode(*decode_args(), cache_leftpad=np.array([16, 0], np.int32), device=dev)
    assert fake.launches() == []


def test_kernel_set_choice_is_remembered_per_bundle(fake_sim, monkeypatch):
    fake, dev, launched, _, _ = fake_sim
    scans, find = [], _decode.find_kernel_set
    monkeypatch.setattr(_decode, "find_kernel_set", lambda bundle, call: scans.append(call) or find(bundle, call))
    for num_splits in (1, 1, 0, 5, 1):
        tessera.paged_decode(*decode_args(), num_splits=num_splits, device=dev)
    assert len(scans) == 2 and [name for name, _ in launched] == ["pd_f16_d64_b16_lean"] * 2 + \
        ["pd_f16_d64_b16_split"] * 2 + ["pd_f16_d64_b16_lean"]
    for _ in range(2):
        with pytest.raises(tessera.KernelNotFoundError):
            tessera.paged_decode(*decode_args(D=32), device=dev)
    assert len(scans) == 4


# ---- The split heuristic --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workgroups, context, processors, splits", [
    (64, 8192, 132, 2),          # H200, B8 Hkv8 GQA4 8K (bench/NOTES.md's FA3 example): 2 waves' worth in one
    (128 * 8, 8192, 132, 1),     # B128: the GPU is full already
    (106, 8192, 132, 1),         # >= 0.8 x 132 workgroups
    (105, 8192, 132, 5),         # just under: 5 splits make 3.98 waves
    (8, 131072, 132, 15),        # B1 Hkv8: 120 of 132 multiprocessors (0.91 of the best 1.0 at 33 splits)
    (1, 131072, 132, 109),       # one workgroup: capped at 128 splits, 109 within 85% of 128/132
    (1, 256, 132, 1),            # 4 key tiles of 64: never split
    (1, 257, 132, 2),            # 5 tiles, at most 2 chunks of 256
    (2, 1024, 4, 2),             # the simulator's 4 multiprocessors
    (0, 8192, 132, 1),
])
def test_split_count_follows_flash_attention_3(workgroups, context, processors, splits):
    assert _decode.split_count(workgroups, context, processors) == splits


def test_heuristic_uses_host_sizes_and_the_decode_kernels_rows(fake_sim):
    """num_splits=0: workgroups B * Hkv * ceil(Hq / Hkv * Sq / rows) with rows from the decode kernel's grid, the
    context the block table allows (max_blocks * block_size, never cache_seqlens), the simulator's 4
    multiprocessors; the grid launched with that count."""
    fake, dev, launched, _, _ = fake_sim
    kernel_sets = dev.bundle().kernel_sets
    assert _decode.rows_per_workgroup(kernel_sets["pd_f16_d64_b16"]) == 16
    assert _decode.rows_per_workgroup(kernel_sets["pd_f16_d64_b64"]) == 32
    assert _decode.processors(dev) == 4
    cases = [   # (B, Sq, Hq, Hkv, block_size, max_blocks, lengths, num_splits)
        (1, 1, 4, 2, 16, 64, 3, 2),       # 2 workgroups of 1024 keys: 2 splits fill the 4 multiprocessors
        (1, 1, 4, 2, 16, 16, 3, 1),       # 256 keys: 4 tiles
        (4, 1, 4, 2, 16, 64, 3, 1),       # 8 workgroups
        (1, 1, 32, 1, 64, 16, 1, 4),      # rows 32: one workgroup, 4 splits
        (1, 1, 32, 1, 16, 64, 1, 2),      # rows 16: two workgroups
        (1, 20, 4, 2, 16, 64, 3, 1),      # 40 rows per KV head: 3 workgroups each, 6 in all
    ]
    for B, Sq, Hq, Hkv, block, max_blocks, length, splits in cases:
        fake.lib.fake_reset()
        args = decode_args(B=B, Sq=Sq, Hq=Hq, Hkv=Hkv, block_size=block, num_pages=B * max_blocks,
                           max_blocks=max_blocks, length=length)
        tessera.paged_decode(*args, device=dev)
        assert launched[-1][1]["num_splits"] == splits, (B, Sq, Hq, Hkv, block, max_blocks)
        assert fake.launches()[0].grid[0] == splits
    fake_set = type("Set", (), {"kernels": [type("K", (), {"info": {"grid": [1, ["mul", "Hq", "Sq"], "B"]}})]})
    assert _decode.rows_per_workgroup(fake_set) == _decode.DEFAULT_ROWS


# ---- Plans ----------------------------------------------------------------------------------------------------------
def test_a_plan_fixes_the_set_and_splits_and_reserves_the_workspace(fake_sim, monkeypatch):
    fake, dev, launched, reserved, _ = fake_sim
    big = decode_args(B=4, Sq=2, Hq=4, Hkv=2, block_size=16, num_pages=256, max_blocks=64, length=5)
    plan = tessera.paged_decode_plan(*big, window_left=4, return_lse=True, device=dev)
    assert plan.kernel_set.name == "pd_f16_d64_b16" and plan.num_splits == 1 and launched == []
    (name, values), = reserved
    assert name == "pd_f16_d64_b16" and set(values) == plan.kernel_set.settable
    assert (values["B"], values["Sq"], values["Hq"], values["num_splits"]) == (4, 2, 4, 1)
    plan = tessera.paged_decode_plan(*big, num_splits=6, device=dev)
    assert plan.kernel_set.name == "pd_f16_d64_b16_split" and plan.num_splits == 6
    assert reserved[-1][1]["num_splits"] == 6 and fake.launches() == []
    # Calls up to the plan's sizes take its set and splits without choosing (the heuristic would not split these).
    monkeypatch.setattr(_decode, "split_count", lambda *a: pytest.fail("a planned call ran the heuristic"))
    monkeypatch.setattr(_decode, "find_kernel_set", lambda *a: pytest.fail("a planned call chose a set"))
    allocations = fake.lib.fake_calls(b"sim_alloc")
    for B, Sq in ((4, 2), (1, 1), (3, 2)):
        small = decode_args(B=B, Sq=Sq, Hq=4, Hkv=2, block_size=16, num_pages=256, max_blocks=64, length=5)
        tessera.paged_decode(*small, plan=plan, device=dev)
        assert launched[-1][0] == "pd_f16_d64_b16_split" and launched[-1][1]["num_splits"] == 6
        assert launched[-1][1]["B"] == B
    # Each call allocated only its 6 arrays in simulator memory: the workspace was ready.
    assert fake.lib.fake_calls(b"sim_alloc") - allocations == 3 * 6


@pytest.mark.parametrize("changes, options, message", [
    ({"B": 5}, {}, r"the call \(B=5, Sq=2, dtype=f16, kv_dtype=f16, kv_scale=per_tensor, fp8_products=False, "
                   r"sinks=False, alibi=False, cache_leftpad=False, D=64, block_size=16, Hq=4, Hkv=2\) does not fit the "
                   r"plan \(B=4, Sq=2, dtype=f16, kv_dtype=f16, kv_scale=per_tensor, fp8_products=False, sinks=False, "
                   r"alibi=False, cache_leftpad=False, D=64, block_size=16, Hq=4, Hkv=2\): the plan serves its dtype, "
                   r"products, sinks, ALiBi, cache_leftpad, head_dim"),
    ({"Sq": 3}, {}, r"does not fit the plan"),
    ({"Hq": 8}, {}, r"does not fit the plan"),
    ({"block_size": 64}, {}, r"block_size=64, Hq=4, Hkv=2\) does not fit the plan"),
    ({}, {"num_splits": 2}, r"num_splits=2 but the plan fixed 6: pass 0 \(or the plan's\) with plan="),
    ({}, {"window_left": 3}, r"the plan's kernel set pd_f16_d64_b16_split .* does not serve this call's mask "
                             r"causal_bottom_right and features: make the plan with the call's options"),
    ({}, {"causal": False}, r"does not serve this call's mask none"),
])
def test_calls_that_do_not_fit_the_plan(fake_sim, changes, options, message):
    fake, dev, launched, _, _ = fake_sim
    sizes = dict(B=4, Sq=2, Hq=4, Hkv=2, block_size=16, num_pages=256, max_blocks=64, length=5)
    plan = tessera.paged_decode_plan(*decode_args(**sizes), num_splits=6, device=dev)
    with pytest.raises(tessera.InputError, match=r"^tessera.paged_decode: .*" + message):
        tessera.paged_decode(*decode_args(**{**sizes, **changes}), plan=plan, device=dev, **options)
    assert launched == []


def test_a_plan_belongs_to_its_device(fake_sim):
    fake, dev, launched, _, _ = fake_sim
    plan = tessera.paged_decode_plan(*decode_args(), device=dev)
    with pytest.raises(tessera.InputError, match=r"the plan was made for Device\('sim:gfx942'.*this call runs on "
                                                 r"Device\('sim:gfx942'"):
        tessera.paged_decode(*decode_args(), plan=plan, device=tessera.Device("sim:gfx942"))
    with pytest.raises(tessera.InputError, match=r"plan must come from tessera.paged_decode_plan, got dict"):
        tessera.paged_decode(*decode_args(), plan={}, device=dev)
    assert launched == []


# ---- Empty sizes -------------------------------------------------------------------------------------------------
def test_empty_sizes_launch_nothing_and_empty_caches_launch(fake_sim):
    fake, dev, launched, _, _ = fake_sim
    out, lse = tessera.paged_decode(*decode_args(B=0), return_lse=True, device=dev)
    assert out.shape == (0, 1, 4, 64) and lse.shape == (0, 4, 1)
    assert tessera.paged_decode(*decode_args(Sq=0), device=dev).shape == (2, 0, 4, 64)
    q, k, v, table, lens = decode_args()
    assert tessera.paged_decode(q[:, :, :0], k[:, :, :0], v[:, :, :0], table, lens, device=dev).shape == (2, 1, 0, 64)
    assert fake.launches() == [] and launched == []
    # No page at all (every length 0): launched, the kernels write O = 0 and LSE = -inf.
    tessera.paged_decode(*decode_args(num_pages=0, max_blocks=0, length=0), device=dev)
    assert len(launched) == 1


# ---- The reference ------------------------------------------------------------------------------------------------
def paged(rng, dense, lengths, block_size, layout, spare=3):
    """A paged cache holding each sequence's keys (dense (B, L, Hkv, D)) in randomly permuted pages of spare x the
    pages needed, every other slot NaN; the block table with -1 past each sequence's pages."""
    B, L, Hkv, D = dense.shape
    need = [-(-n // block_size) for n in lengths]
    num_pages = spare * max(sum(need), 1)
    cache = np.full((num_pages, block_size, Hkv, D), np.nan, dense.dtype)
    order = rng.permutation(num_pages)
    table = np.full((B, max(-(-L // block_size), 1)), -1, np.int32)
    used = 0
    for b, n in enumerate(lengths):
        for j in range(need[b]):
            page = order[used]
            used += 1
            table[b, j] = page
            rows = dense[b, j * block_size:min(n, (j + 1) * block_size)]
            cache[page, :len(rows)] = rows
    return (cache if layout == "NHD" else cache.transpose(0, 2, 1, 3).copy()), table


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("options", [dict(causal=True), dict(causal=False), dict(causal=True, window_left=5),
                                     dict(causal=False, window_left=0, softcap=2.0),
                                     dict(causal=True, scale=0.3, softcap=0.5)])
def test_paged_reference_is_dense_attention_per_sequence(layout, options):
    """The reference gathers each sequence's pages (never a NaN slot, a -1 entry or a spare page) and equals
    attention_reference on the dense keys, bottom-right aligned, window (window_left, -1); lengths 0 and under Sq
    leave rows that see no key (O = 0, LSE = -inf)."""
    rng = np.random.default_rng()
    B, Sq, Hq, Hkv, D, block = 5, 3, 4, 2, 16, 4
    lengths = [9, 0, 1, 2, 16]
    q = rng.standard_normal((B, Sq, Hq, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, 16, Hkv, D)).astype(np.float16) for _ in range(2))
    (k_cache, table), (v_cache, _) = (paged(np.random.default_rng(7), x, lengths, block, layout) for x in (k, v))
    ref = testing.paged_decode_reference(q, k_cache, v_cache, table, np.array(lengths, np.int32), kv_layout=layout,
                                         **options)
    dense_options = dict(options, window=(options.get("window_left", -1), -1))
    dense_options.pop("window_left", None)
    for b, n in enumerate(lengths):
        dense = testing.attention_reference(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], causal_align="bottom_right",
                                            **dense_options)
        assert np.array_equal(ref.o[b], dense.o[0]) and np.array_equal(ref.lse[b], dense.lse[0])
        assert np.array_equal(ref.o_abs[b], dense.o_abs[0])
    assert not np.isnan(ref.o).any()
    assert np.isneginf(ref.lse[1]).all() and (ref.o[1] == 0).all()            # length 0
    if options["causal"]:
        assert np.isneginf(ref.lse[2, :, :2]).all() and np.isfinite(ref.lse[2, :, 2]).all()   # length 1 < Sq


def naive_decode(q, keys, values, length, causal, window_left, scale):
    """One query row at a time in Python floats: query t of Sq sits at position length - Sq + t."""
    Sq, Hq, D = q.shape
    group = Hq // keys.shape[1]
    O, L = np.zeros((Sq, Hq, D)), np.full((Hq, Sq), -np.inf)
    for t in range(Sq):
        pos = length - Sq + t
        visible = [j for j in range(length) if (not causal or j <= pos) and (window_left < 0 or j >= pos - window_left)]
        for h in range(Hq):
            if not visible:
                continue
            s = [scale * float(np.dot(q[t, h].astype(np.float64), keys[j, h // group].astype(np.float64)))
                 for j in visible]
            m = max(s)
            p = [math.exp(x - m) for x in s]
            L[h, t] = m + math.log(sum(p))
            O[t, h] = sum(pj * values[j, h // group].astype(np.float64) for pj, j in zip(p, visible)) / sum(p)
    return O, L


@pytest.mark.parametrize("causal, window_left", [(True, -1), (False, -1), (True, 2), (False, 1)])
def test_paged_reference_matches_the_definition(causal, window_left):
    rng = np.random.default_rng()
    Sq, Hq, Hkv, D, block, length = 3, 4, 1, 8, 2, 7
    q = rng.standard_normal((1, Sq, Hq, D))
    k, v = rng.standard_normal((1, length, Hkv, D)), rng.standard_normal((1, length, Hkv, D))
    (k_cache, table), (v_cache, _) = (paged(np.random.default_rng(3), x, [length], block, "NHD") for x in (k, v))
    ref = testing.paged_decode_reference(q, k_cache, v_cache, table, [length], causal=causal,
                                         window_left=window_left)
    O, L = naive_decode(q[0], k[0], v[0], length, causal, window_left, D ** -0.5)
    np.testing.assert_allclose(ref.o[0], O, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref.lse[0], L, rtol=1e-12)


def test_check_attention_judges_paged_decode_outputs():
    """check_attention takes the paged reference as it is (the layouts are the dense ones): the same-precision
    result passes, NaN and a non-zero row that sees no key fail."""
    rng = np.random.default_rng()
    lengths = [40, 0, 2]
    q = rng.standard_normal((3, 3, 8, 64)).astype(np.float16)
    k, v = (rng.standard_normal((3, 40, 2, 64)).astype(np.float16) for _ in range(2))
    (k_cache, table), (v_cache, _) = (paged(np.random.default_rng(5), x, lengths, 16, "HND") for x in (k, v))
    args = (q, k_cache, v_cache, table, np.array(lengths, np.int32))
    ref = testing.paged_decode_reference(*args, kv_layout="HND", window_left=20)
    same = testing.paged_decode_reference(*args, kv_layout="HND", window_left=20, precision="same")
    assert (same.o == same.o.astype(np.float16)).all()
    good = same.o.astype(np.float16)
    assert testing.check_attention(good, ref, same, same.lse.astype(np.float32)).ok
    for index, value, what in (((0, 2, 5, 9), np.nan, "NaN"), ((1, 0, 0, 0), 1e-3, "not exactly 0"),
                               ((2, 0, 3, 1), 1e-3, "not exactly 0")):
        bad = good.copy()
        bad[index] = value
        result = testing.check_attention(bad, ref, same)
        assert not result.ok and what in str(result), (index, str(result))


@pytest.mark.parametrize("info, backend, arch, resident", [
    # sm_90: 202 registers x 64 threads (13312 a workgroup of 2 warps), 16 KiB of shared memory: 4 by registers
    ({"block": [64, 1, 1], "registers": {"regs": 202}, "lds_bytes": 16384}, "cuda", "sm_90", 4),
    # 200 registers: 6400 a warp, two per sub-partition of 16384: 8 warps, 4 workgroups (not 65536 // 12800 = 5: with
    # five counted, the heuristic chose 9 splits at B8 ctx32768, 576 workgroups in two waves, 1.6x the time on the H200)
    ({"block": [64, 1, 1], "registers": {"regs": 200}, "lds_bytes": 37888}, "cuda", "sm_90", 4),
    # 128 registers x 128 threads: 4096 a warp, four per sub-partition: 16 warps, 4 workgroups
    ({"block": [128, 1, 1], "registers": {"regs": 128}, "lds_bytes": 0}, "cuda", "sm_90", 4),
    # 255 registers x 256 threads: one
    ({"block": [256, 1, 1], "registers": {"regs": 255}, "lds_bytes": 0}, "cuda", "sm_90", 1),
    # shared memory bound: 100 KiB each, two fit in 228 KiB
    ({"block": [64, 1, 1], "registers": {"regs": 32}, "lds_bytes": 102400}, "cuda", "sm_90", 2),
    # gfx942: 2 waves of 64 a workgroup at 1 wave per SIMD over 4 SIMDs
    ({"block": [128, 1, 1], "registers": {"vgpr": 155}, "occupancy_waves_per_simd": 1}, "hip", "gfx942", 2),
    # gfx1100: 2 waves of 32 at 2 waves per SIMD
    ({"block": [64, 1, 1], "registers": {"vgpr": 199}, "occupancy_waves_per_simd": 2}, "hip", "gfx1100", 4),
    ({"block": [64, 1, 1], "registers": {"regs": 202}}, "sim", "sm_90", 1),
])
def test_resident_workgroups_per_processor(info, backend, arch, resident):
    """The split heuristic's slots: workgroups of a decode kernel one multiprocessor holds at once."""
    kernel, dev = types.SimpleNamespace(info=info), types.SimpleNamespace(backend=backend, arch=arch)
    assert _decode.resident_per_processor(kernel, dev) == resident


# ---- paged_cache_write ---------------------------------------------------------------------------------------------
def write_args(T=5, Hkv=2, D=64, block_size=16, num_pages=4, layout="NHD"):
    """key, value, k_cache, v_cache, slot_mapping of a cache write: token t to slot 3 t."""
    shape = cache_shape(num_pages, block_size, Hkv, D, layout)
    return f16(T, Hkv, D), f16(T, Hkv, D), f16(*shape), f16(*shape), np.arange(T, dtype=np.int64) * 3


def write_replaced(**changes):
    args = dict(zip(("key", "value", "k_cache", "v_cache", "slot_mapping"), write_args()))
    args.update(changes)
    return args


@pytest.mark.parametrize("changes, kwargs, message", [
    ({}, {"kv_layout": "vllm"}, r"kv_layout must be 'NHD' .* or 'HND' .*, got 'vllm'"),
    ({"key": f16(5, 128)}, {}, r"key must be 3-D \(num_tokens, Hkv, D\), got shape \(5, 128\)"),
    ({"v_cache": f16(4, 16, 128)}, {}, r"v_cache must be 4-D \(num_pages, block_size, Hkv, D\)"),
    ({"slot_mapping": np.zeros((5, 1), np.int64)}, {}, r"slot_mapping must be 1-D \(num_tokens,\)"),
    ({"value": np.ones((5, 2, 64), np.float32)}, {}, r"value has dtype float32; supported: float16, bfloat16"),
    ({"slot_mapping": np.zeros(5, np.int32)}, {}, r"slot_mapping has dtype int32; it must be int64 \(page \* "
                                                  r"block_size \+ offset, negative for a token to skip\)"),
    ({"slot_mapping": np.zeros(10, np.int64)[::2]}, {}, r"slot_mapping has stride 2; it needs unit stride"),
    ({"v_cache": f16(5, 16, 2, 64)}, {}, r"k_cache and v_cache must have the same shape \(num_pages, block_size, "
                                         r"Hkv, D\), got \(4, 16, 2, 64\) and \(5, 16, 2, 64\)"),
    ({"value": f16(6, 2, 64)}, {}, r"key and value must have the same shape \(num_tokens, Hkv, D\), got \(5, 2, 64\) "
                                   r"and \(6, 2, 64\)"),
    ({"key": f16(5, 4, 64), "value": f16(5, 4, 64)}, {}, r"key has shape \(5, 4, 64\) but the cache \(4, 16, 2, 64\) "
                                                         r"\(NHD \(num_pages, block_size, Hkv, D\)\) holds Hkv=2 heads "
                                                         r"of head_dim 64"),
    ({}, {"kv_layout": "HND"}, r"key has shape \(5, 2, 64\) but the cache \(4, 16, 2, 64\) \(HND .*\) holds Hkv=16"),
    ({"key": f16(3, 2, 64), "value": f16(3, 2, 64)}, {}, r"slot_mapping names 5 tokens but key has 3"),
    ({"key": f16(5, 2, 80), "value": f16(5, 2, 80), "k_cache": f16(4, 16, 2, 80), "v_cache": f16(4, 16, 2, 80)}, {},
     r"head_dim 80 is not supported"),
    ({"k_cache": f16(4, 12, 2, 64), "v_cache": f16(4, 12, 2, 64)}, {}, r"block_size 12 .* must be a power of two"),
    ({"key": f16(5, 2, 128)[..., ::2]}, {}, r"key has stride 2 on head_dim"),
    ({"slot_mapping": np.array([0, 1, 64, -1, 2], np.int64)}, {}, r"slot_mapping\[2\] = 64 is past the cache's 4 "
                                                                  r"pages of 16 tokens \(slots 0 to 63; negative ones "
                                                                  r"are skipped\)"),
    ({"key": [[0.0]]}, {}, r"key is a builtins.list; expected a torch tensor or a numpy array"),
])
def test_paged_cache_write_rejected_before_the_device(changes, kwargs, message):
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.paged_cache_write(**write_replaced(**changes), device=NO_DEVICE, **kwargs)
    assert str(e.value).startswith("tessera.paged_cache_write: ")


@support.requires_ml_dtypes
def test_paged_cache_write_needs_one_dtype_and_fp8_scales():
    key, value, k, v, slots = write_args()
    with pytest.raises(tessera.InputError, match=r"key, value, k_cache and v_cache must have the same dtype \(or fp8 "
                                                 r"caches: float8_e4m3fn, float8_e4m3fnuz\), got float16 and "
                                                 r"bfloat16"):
        bf16 = support.ml_dtypes.bfloat16
        tessera.paged_cache_write(key, value, k.astype(bf16), v.astype(bf16), slots, device=NO_DEVICE)
    with pytest.raises(tessera.InputError, match=r"k_cache and v_cache must have the same dtype, got float8_e4m3fn "
                                                 r"and float16"):
        tessera.paged_cache_write(key, value, k.astype(support.ml_dtypes.float8_e4m3fn), v, slots, device=NO_DEVICE)
    fp8 = support.ml_dtypes.float8_e4m3fn
    with pytest.raises(tessera.InputError, match=r"the caches are float8_e4m3fn: v_scale"):
        tessera.paged_cache_write(key, value, k.astype(fp8), v.astype(fp8), slots, k_scale=1.0, device=NO_DEVICE)
    with pytest.raises(tessera.InputError, match=r"value has dtype float32; supported: float16, bfloat16"):
        tessera.paged_cache_write(key, value.astype(np.float32), k, v, slots, device=NO_DEVICE)
    with pytest.raises(tessera.InputError, match=r"key and value must have the same dtype, got float16 and bfloat16"):
        tessera.paged_cache_write(key, value.astype(support.ml_dtypes.bfloat16), k, v, slots, device=NO_DEVICE)


def test_paged_cache_write_needs_writable_caches_and_a_sim_device():
    key, value, k, v, slots = write_args()
    v.flags.writeable = False
    with pytest.raises(tessera.InputError, match="v_cache is a read-only numpy array"):
        tessera.paged_cache_write(key, value, k, v, slots, device=NO_DEVICE)
    with pytest.raises(tessera.InputError, match=r"^tessera.paged_cache_write: numpy arrays run on the simulator"):
        tessera.paged_cache_write(*write_args())
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):   # good arguments reach the device
        tessera.paged_cache_write(*write_args(T=3, layout="HND"), kv_layout="HND", device=NO_DEVICE)


def test_paged_cache_write_launches_the_sets_writer(fake_sim):
    """The writer of a set with the cache's dtype, head_dim and block_size, one workgroup per slot_mapping entry,
    every stride as the arrays have it (key and value sliced from a packed qkv, an HND cache from one buffer); no
    writer for the variant is a KernelNotFoundError naming the directive; no tokens launch nothing."""
    fake, dev, _, _, entries = fake_sim
    T, Hkv, D, block, pages = 6, 2, 64, 16, 3
    qkv = f16(T + 2, 3, Hkv, D)
    kv = f16(pages, 2, Hkv, block, D)
    slots = np.array([5, -1, 17, 40, 0, 3], np.int64)
    tessera.paged_cache_write(qkv[:, 1], qkv[:, 2], kv[:, 0], kv[:, 1], slots, kv_layout="HND", device=dev)
    (launch,) = fake.launches()
    assert launch.entry.decode() == "pd_f16_d64_b16_cache_write" and tuple(launch.grid) == (T, 1, 1)
    args = support.unpack_args(entries["pd_f16_d64_b16_cache_write"], launch.args)
    assert (args["num_tokens"], args["Hkv"]) == (T, Hkv)
    for t in ("key", "value"):
        assert (args[f"{t}_stride_t"], args[f"{t}_stride_h"]) == (3 * Hkv * D, D)
    for t in "kv":
        assert strides(args, t, ("page", "token", "head")) == (2 * Hkv * block * D, D, block * D)
    fake.lib.fake_reset()
    tessera.paged_cache_write(qkv[:0, 1], qkv[:0, 2], kv[:, 0], kv[:, 1], slots[:0], kv_layout="HND", device=dev)
    assert not fake.launches()
    with pytest.raises(tessera.KernelNotFoundError, match=r"has no paged_decode kernel set with dtype=f16 "
                                                          r"head_dim=64 block_size=64, whose cache writer this call "
                                                          r"needs .*; this directive compiles one: "
                                                          r"tessera.paged_decode @pd_f16_d64_b64 "):
        tessera.paged_cache_write(*write_args(block_size=64), device=dev)


@support.requires_ml_dtypes
def test_fp8_caches_launch_the_fp8_set_with_their_scales(fake_sim):
    """An fp8 cache takes the set whose kv_dtype is its format, with k_scale and v_scale passed as device pointers
    (a number becomes a one-element array); another fp8 format has no set: KernelNotFoundError names the directive
    with kv_dtype and kv_scale."""
    fake, dev, launched, _, entries = fake_sim
    q, k, v, table, lens = decode_args()
    fp8 = support.ml_dtypes.float8_e4m3fn
    tessera.paged_decode(q, k.astype(fp8), v.astype(fp8), table, lens, k_scale=0.5,
                         v_scale=np.full(1, 2.0, np.float32), num_splits=1, device=dev)
    name, values = launched[-1]
    assert name == "pd_a_fp8" and values["k_scale"] and values["v_scale"] and values["k_scale"] != values["v_scale"]
    fnuz = support.ml_dtypes.float8_e4m3fnuz
    with pytest.raises(tessera.KernelNotFoundError, match=r"kv_dtype=f8E4M3FNUZ kv_scale=per_tensor head_dim=64 "
                                                         r".*this directive "
                                                          r"compiles one: tessera.paged_decode @pd_f16_d64_b16_fp8 "
                                                          r"\{dtype = f16, kv_dtype = f8E4M3FNUZ, kv_scale = "
                                                          r"#tessera.kv_scale<per_tensor>, head_dim = 64"):
        tessera.paged_decode(q, k.astype(fnuz), v.astype(fnuz), table, lens, k_scale=0.5, v_scale=0.5,
                             num_splits=1, device=dev)


def test_fp8_products_need_an_fp8_cache_with_per_tensor_scales_and_pick_their_own_set(fake_sim):
    """fp8_products=True is refused for a half-precision cache and for per-token scales (before any device work);
    on an fp8 cache it takes only a set made with fp8_products, and the missing one's directive has it."""
    fake, dev, launched, _, _ = fake_sim
    q, k, v, table, lens = decode_args()
    with pytest.raises(tessera.InputError, match=r"^tessera.paged_decode: fp8_products=True runs the products on the "
                                                 r"fp8 cache's own bytes: it needs an fp8 cache \(f8E4M3FN or "
                                                 r"f8E4M3FNUZ\) with per-tensor k_scale and v_scale, got a f16 cache$"):
        tessera.paged_decode(q, k, v, table, lens, fp8_products=True, device=NO_DEVICE)
    with pytest.raises(tessera.InputError, match=r"fp8_products must be True or False, got 'yes'"):
        tessera.paged_decode(q, k, v, table, lens, fp8_products="yes", device=NO_DEVICE)
    if support.ml_dtypes is None:
        return
    fp8 = support.ml_dtypes.float8_e4m3fn
    k8, v8 = k.astype(fp8), v.astype(fp8)
    per_token = np.ones((6, 2, 16), np.float32)
    with pytest.raises(tessera.InputError, match=r"got a f8E4M3FN cache with per-token scales$"):
        tessera.paged_decode_plan(q, k8, v8, table, lens, k_scale=per_token, v_scale=per_token, fp8_products=True,
                                  device=NO_DEVICE)
    with pytest.raises(tessera.KernelNotFoundError, match=r"kv_dtype=f8E4M3FN kv_scale=per_tensor fp8_products "
                                                          r"head_dim=64 .*this directive compiles one: "
                                                          r"tessera.paged_decode @pd_f16_d64_b16_fp8_products \{.*"
                                                          r"split_kv, fp8_products\}"):
        tessera.paged_decode(q, k8, v8, table, lens, k_scale=0.5, v_scale=0.5, num_splits=1, fp8_products=True,
                             device=dev)
    assert fake.launches() == []


@pytest.mark.parametrize("k, v, message", [
    (f16(2, 32, 2), f16(2, 32, 2), r"k_cache must be 4-D \(B, capacity, Hkv, D\), got shape \(2, 32, 2\)"),
    (f16(2, 32, 2, 64), f16(2, 16, 2, 64), r"without a block_table k_cache and v_cache are contiguous caches "
                                           r"\(B, capacity, Hkv, D\) of one shape and strides"),
    (f16(3, 32, 2, 64), f16(3, 32, 2, 64), r"one row per sequence: q has batch size 2 but k_cache 3"),
])
def test_contiguous_caches_are_checked(k, v, message):
    q, _, _, _, lens = decode_args()
    with pytest.raises(tessera.InputError, match=message):
        tessera.paged_decode(q, k, v, None, lens, device=NO_DEVICE)


@support.requires_ml_dtypes
@pytest.mark.parametrize("entry", [tessera.paged_decode, tessera.paged_decode_plan])
def test_contiguous_caches_take_per_tensor_scales(entry):
    q, _, _, _, lens = decode_args()
    k = f16(2, 32, 2, 64).astype(support.ml_dtypes.float8_e4m3fn)
    scales = np.ones((2, 2, 32), np.float32)
    with pytest.raises(tessera.InputError, match=r"contiguous caches \(block_table=None\) take per-tensor k_scale "
                                                 r"and v_scale; per-token scales \(num_pages, Hkv, block_size\) need a "
                                                 r"paged cache and its block_table"):
        entry(q, k, k, None, lens, k_scale=scales, v_scale=scales, device=NO_DEVICE)


def test_contiguous_caches_launch_as_pages(fake_sim):
    """block_table=None: the largest block size of the fitting sets that divides the capacity and the batch stride
    (64 here: capacity 128, batch stride 192 tokens), page strides of block_size tokens, a table of each
    sequence's pages in order (3 pages from one sequence to the next); HND's head and token strides swapped."""
    fake, dev, launched, _, entries = fake_sim
    q, _, _, _, _ = decode_args()
    big = f16(2, 192, 2, 64)
    k = big[:, :128]
    lens = np.array([100, 128], np.int32)
    tessera.paged_decode(q, k, k, None, lens, num_splits=1, device=dev)
    name, values = launched[-1]
    assert name == "pd_f16_d64_b64"
    assert (values["k_stride_page"], values["k_stride_token"], values["k_stride_head"]) == (64 * 128, 128, 64)
    assert values["block_table_stride"] == 2
    hnd = f16(2, 2, 192, 64)[:, :, :128]
    tessera.paged_decode(q, hnd, hnd, None, lens, kv_layout="HND", num_splits=1, device=dev)
    name, values = launched[-1]
    assert (values["k_stride_page"], values["k_stride_token"], values["k_stride_head"]) == (64 * 64, 64, 192 * 64)


def test_contiguous_caches_take_a_plan(fake_sim):
    """paged_decode_plan with block_table=None chooses like the call (the same block size and set), and calls with
    that plan launch the planned set and split count."""
    fake, dev, launched, reserved, _ = fake_sim
    q, _, _, _, _ = decode_args()
    k = f16(2, 192, 2, 64)[:, :128]
    lens = np.array([100, 128], np.int32)
    plan = tessera.paged_decode_plan(q, k, k, None, lens, num_splits=1, device=dev)
    assert plan.kernel_set.name == "pd_f16_d64_b64" and plan.call.block_size == 64
    tessera.paged_decode(q, k, k, None, lens, plan=plan, device=dev)
    assert launched[-1][0] == "pd_f16_d64_b64"

"""tessera.flash_attn / flash_attn_varlen argument checks, all made before any device is touched, kernel choice and
the launch arguments seen through the fake sim plugin, and the float64 reference itself (no GPU, no simulator)."""
import math

import pytest

import support
from support import np, torch
import tessera
from tessera import testing

NO_DEVICE = "sim:validation-only"   # its plugin never loads: an InputError proves the check came first


@pytest.fixture(autouse=True)
def no_plugin(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(tmp_path / "no-plugin.so"))


def f16(*shape):
    return np.ones(shape, np.float16)


def qkv(B=1, Sq=4, Sk=5, Hq=2, Hkv=2, D=64, dtype=np.float16):
    return np.ones((B, Sq, Hq, D), dtype), np.ones((B, Sk, Hkv, D), dtype), np.ones((B, Sk, Hkv, D), dtype)


Q, K, V = qkv()


@pytest.mark.parametrize("args, kwargs, message", [
    ((Q, K, np.ones((1, 5, 2, 64), np.float32)), {}, r"v has dtype float32; supported: float16, bfloat16"),
    ((Q.astype(np.float64), K, V), {}, r"q has dtype float64; supported"),
    ((Q, K, np.ones((1, 5, 2, 64), np.float16).view(np.int16)), {}, r"v has dtype int16"),
    ((Q[0], K, V), {}, r"q must be 4-D \(B, Sq, Hq, D\), got shape \(4, 2, 64\)"),
    ((Q, K[0], V), {}, r"k must be 4-D \(B, Sk, Hkv, D\), got shape \(5, 2, 64\)"),
    ((f16(1, 4, 2, 264), f16(1, 5, 2, 264), f16(1, 5, 2, 264)), {}, r"head_dim 264 is not supported \(1 to 256\)"),
    ((f16(1, 4, 2, 0), f16(1, 5, 2, 0), f16(1, 5, 2, 0)), {}, r"head_dim 0 is not supported \(1 to 256\)"),
    # A head_dim the kernels take zero-padded (44 -> 48): the given output keeps the caller's 44.
    ((f16(1, 4, 2, 44), f16(1, 5, 2, 44), f16(1, 5, 2, 44)), {"out": f16(1, 4, 2, 48)},
     r"out has shape \(1, 4, 2, 48\), expected \(1, 4, 2, 44\)"),
    ((f16(1, 4, 2, 44), f16(1, 5, 2, 44), f16(1, 5, 2, 44)), {"out": np.ones((1, 4, 2, 44), np.float32)},
     r"out has dtype float32, expected float16"),
    ((Q, f16(1, 5, 2, 32), f16(1, 5, 2, 32)), {}, r"q and k must have the same head_dim \(v's may differ\), got 64 "
                                                   r"and 32"),
    ((Q, K, f16(1, 5, 2, 300)), {}, r"v's head_dim 300 is not supported \(1 to 256\)"),
    ((Q, K, f16(1, 5, 2, 32)), {"out": f16(1, 4, 2, 64)},
     r"out has shape \(1, 4, 2, 64\), expected \(1, 4, 2, 32\)"),
    ((Q, K, V), {"sinks": np.zeros(3, np.float32)}, r"sinks must be a float32 vector of one logit per query head, "
                                                    r"shape \(2,\) with unit stride, got shape \(3,\)"),
    ((Q, K, V), {"sinks": np.zeros(2, np.float16)}, r"sinks must be .* got shape \(2,\), dtype float16"),
    ((Q, K, V), {"sinks": np.zeros(4, np.float32)[::2]}, r"sinks must be .* unit stride, got .* strides \(2,\)"),
    ((Q, K, V), {"sinks": [0.0, 1.0]}, r"sinks is a builtins.list; expected a torch tensor or a numpy array"),
    ((Q, K, V), {"alibi_slopes": np.ones(3, np.float32)},
     r"alibi_slopes must be float32 of shape \(2,\) or \(1, 2\) \(a slope per query head, or per sequence and "
     r"query head\) with unit stride along the heads, got shape \(3,\)"),
    ((Q, K, V), {"alibi_slopes": np.ones((1, 2), np.float64)}, r"alibi_slopes must be .* dtype float64"),
    ((Q, K, V), {"alibi_slopes": np.ones((1, 4), np.float32)[:, ::2]},
     r"alibi_slopes must be .* unit stride along the heads, got shape \(1, 2\), dtype float32, strides \(4, 2\)"),
    ((Q, K, V), {"attention_chunk": -1}, r"attention_chunk must be >= 0 \(0 = off\), got -1"),
    ((Q, K, V), {"dropout_p": 1.0}, r"dropout_p must be a number in \[0, 1\), got 1.0"),
    ((Q, K, V), {"dropout_p": -0.1}, r"dropout_p must be a number in \[0, 1\), got -0.1"),
    ((Q, K, V), {"dropout_p": "0.1"}, r"dropout_p must be a number in \[0, 1\), got '0.1'"),
    ((Q, K, V), {"dropout_p": 0.1}, r"dropout on numpy arrays needs dropout_seed= \(an int, or a \(seed, offset\) "
                                    r"pair\): the backward regenerates the mask from it"),
    ((Q, K, V), {"dropout_p": 0.1, "dropout_seed": (1, 2, 3)},
     r"dropout_seed must be an int seed, a \(seed, offset\) pair of ints in \[0, 2\*\*64\) or a \(2,\) int64 array "
     r"of them, got \(1, 2, 3\)"),
    ((Q, K, V), {"dropout_p": 0.1, "dropout_seed": -1}, r"dropout_seed must be an int seed, .* got -1"),
    ((Q, K, V), {"dropout_p": 0.1, "dropout_seed": np.zeros(2, np.int32)},
     r"dropout_seed as an array must be int64 \(seed, offset\) of shape \(2,\) with unit stride, got shape \(2,\), "
     r"dtype int32"),
    ((Q, K, V), {"attention_chunk": 2.5}, r"attention_chunk must be an integer \(0 = off\), got 2.5"),
    ((Q, K, f16(1, 6, 2, 64)), {}, r"k and v must have the same shape \(B, Sk, Hkv, D\) but for the head_dim, got "
                                   r"\(1, 5, 2, 64\) and \(1, 6, 2, 64\)"),
    ((Q, K, f16(1, 5, 1, 64)), {}, r"k and v must have the same shape"),
    ((Q, f16(2, 5, 2, 64), f16(2, 5, 2, 64)), {}, r"q has batch size 1 but k and v have 2"),
    ((f16(1, 4, 6, 64), f16(1, 5, 4, 64), f16(1, 5, 4, 64)), {}, r"Hq = 6 must be a multiple of the number of "
                                                                 r"key/value heads Hkv = 4"),
    ((f16(1, 4, 6, 64), f16(1, 5, 0, 64), f16(1, 5, 0, 64)), {}, r"Hq = 6 must be a multiple .* Hkv = 0"),
    ((f16(1, 4, 2, 128)[..., ::2], K, V), {}, r"q has stride 2 on head_dim \(its last dimension\) and strides "
                                              r"\(1024, 256, 128, 2\) \(elements\); the head_dim stride must be 1"),
    ((Q, K, np.ones((1, 5, 64, 2), np.float16).transpose(0, 1, 3, 2)), {}, r"v has stride 2 on head_dim"),
    ((Q, K, V), {"causal": True, "causal_align": "top-left"}, r"causal_align must be 'bottom_right' or "
                                                              r"'top_left', got 'top-left'"),
    ((Q, K, V), {"causal_align": "left"}, r"causal_align must be"),
    ((Q, K, V), {"window": (3,)}, r"window must be a pair of integers \(left, right\), -1 = unbounded; got \(3,\)"),
    ((Q, K, V), {"window": (1.5, 2)}, r"window must be a pair of integers"),
    ((Q, K, V), {"window": (-2, 0)}, r"window \(-2, 0\): each side is >= 0, or -1 for unbounded"),
    ((Q, K, V), {"softcap": -1.0}, r"softcap must be finite and >= 0 \(0 disables it\), got -1.0"),
    ((Q, K, V), {"softcap": "big"}, r"softcap 'big' is not a number"),
    ((Q, K, V), {"scale": float("nan")}, r"scale must be finite, got nan"),
    ((Q, K, V), {"scale": "x"}, r"scale 'x' is not a number"),
    ((Q, K, V), {"out": f16(1, 4, 2, 32)}, r"out has shape \(1, 4, 2, 32\), expected \(1, 4, 2, 64\)"),
    ((Q, K, V), {"out": np.ones((1, 4, 2, 64), np.float32)}, r"out has dtype float32, expected float16"),
    ((Q, K, V), {"out": np.broadcast_to(f16(1, 1, 2, 64), (1, 4, 2, 64))}, r"out has shape \(1, 4, 2, 64\) and "
                                                                           r"strides \(0, 0, 64, 1\)"),
    ((Q, K, V), {"lse": np.ones((1, 2, 4), np.float32)}, r"lse is given but return_lse is False"),
    ((Q, K, V), {"return_lse": True, "lse": np.ones((1, 4, 2), np.float32)}, r"lse has shape \(1, 4, 2\), "
                                                                             r"expected \(1, 2, 4\)"),
    ((Q, K, V), {"return_lse": True, "lse": np.ones((1, 2, 4), np.float16)}, r"lse has dtype float16, expected "
                                                                             r"float32"),
    ((Q, K, V), {"return_lse": True, "lse": np.ones((1, 4, 2), np.float32).transpose(0, 2, 1)},
     r"lse has shape \(1, 2, 4\) and strides \(8, 1, 2\)"),
    (([[1.0]], K, V), {}, r"q is a builtins.list; expected a torch tensor or a numpy array"),
])
def test_flash_attn_rejected_before_the_device(args, kwargs, message):
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.flash_attn(*args, device=NO_DEVICE, **kwargs)
    assert isinstance(e.value, ValueError) and str(e.value).startswith("tessera.flash_attn: ")


@support.requires_ml_dtypes
def test_dtype_mismatch_names_all_three():
    with pytest.raises(tessera.InputError, match=r"q, k and v must have the same dtype, got float16, float16 and "
                                                 r"bfloat16"):
        tessera.flash_attn(Q, K, V.astype(support.ml_dtypes.bfloat16), device=NO_DEVICE)


def varlen_args(total_q=7, total_k=9, Hq=2, Hkv=1, D=64, cu_q=(0, 3, 7), cu_k=(0, 4, 9), max_q=4, max_k=5):
    cu = [c if isinstance(c, np.ndarray) else np.array(c, np.int32) for c in (cu_q, cu_k)]
    return (f16(total_q, Hq, D), f16(total_k, Hkv, D), f16(total_k, Hkv, D), *cu, max_q, max_k)


@pytest.mark.parametrize("change, kwargs, message", [
    ({"cu_q": np.array([0, 3, 7], np.int64)}, {}, r"cu_seqlens_q has dtype int64; it must be int32"),
    ({"cu_k": np.array([[0, 4, 9]], np.int32)}, {}, r"cu_seqlens_k must be 1-D with B \+ 1 >= 1 entries, got "
                                                    r"shape \(1, 3\)"),
    ({"cu_q": np.array([], np.int32)}, {}, r"cu_seqlens_q must be 1-D with B \+ 1 >= 1 entries, got shape \(0,\)"),
    ({"cu_k": np.array([0, 9], np.int32)}, {}, r"cu_seqlens_q has 3 entries and cu_seqlens_k 2; both must have B "
                                               r"\+ 1"),
    ({"cu_q": np.array([0, 5, 3], np.int32)}, {}, r"cu_seqlens_q must be non-decreasing offsets from >= 0 to at "
                                                  r"most 7 \(the rows of q\), got \[0, 5, 3\]"),
    ({"cu_k": np.array([0, 4, 10], np.int32)}, {}, r"cu_seqlens_k must be non-decreasing .* at most 9 \(the rows "
                                                   r"of k and v\)"),
    ({"max_q": 3}, {}, r"cu_seqlens_q has a sequence of length 4 but max_seqlen_q is 3"),
    ({"max_k": 4.0}, {}, r"max_seqlen_q and max_seqlen_k must be integers, got 4 and 4.0"),
    ({"max_k": -1}, {}, r"max_seqlen_q and max_seqlen_k must be >= 0, got 4 and -1"),
    ({"Hq": 3, "Hkv": 2}, {}, r"Hq = 3 must be a multiple .* Hkv = 2"),
    ({"D": 272}, {}, r"head_dim 272 is not supported \(1 to 256\)"),
    ({"D": 40}, {"out": f16(7, 2, 48)}, r"out has shape \(7, 2, 48\), expected \(7, 2, 40\)"),
    ({}, {"out": f16(7, 2, 32)}, r"out has shape \(7, 2, 32\), expected \(7, 2, 64\)"),
    ({}, {"return_lse": True, "lse": np.ones((7, 2), np.float32)}, r"lse has shape \(7, 2\), expected \(2, 7\)"),
    ({}, {"causal": True, "causal_align": "bottom"}, r"causal_align must be"),
    ({}, {"seqused_k": np.array([4, 5], np.int64)}, r"seqused_k must be int32 of shape \(2,\) \(a length per sequence\) "
                                                    r"with unit stride, got shape \(2,\), dtype int64"),
    ({}, {"seqused_q": np.array([1, 2, 3], np.int32)}, r"seqused_q must be int32 of shape \(2,\).* got shape \(3,\)"),
    ({}, {"seqused_q": np.array([3, 5], np.int32)}, r"seqused_q\[1\] = 5 is not within sequence 1's 4 rows "
                                                    r"\(cu_seqlens_q\[2\] - cu_seqlens_q\[1\]\)"),
    ({}, {"seqused_k": np.array([-1, 0], np.int32)}, r"seqused_k\[0\] = -1 is not within sequence 0's 4 rows"),
])
def test_flash_attn_varlen_rejected_before_the_device(change, kwargs, message):
    args = dict(total_q=7, total_k=9, Hq=2, Hkv=1, D=64, cu_q=(0, 3, 7), cu_k=(0, 4, 9), max_q=4, max_k=5)
    args.update(change)
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.flash_attn_varlen(*varlen_args(**args), device=NO_DEVICE, **kwargs)
    assert str(e.value).startswith("tessera.flash_attn_varlen: ")


def paged_args(page_size=2, num_pages=6, table=((0, 1, 2), (3, 4, 5))):
    """varlen_args with k and v as num_pages pages of page_size and a block table of two sequences (4 and 5 keys)."""
    q, k, v, cq, ck, mq, mk = varlen_args()
    pages = f16(num_pages, page_size, 1, 64)
    return q, pages, pages, cq, ck, mq, mk, np.array(table, np.int32)


@pytest.mark.parametrize("change, message", [
    ({"k": f16(9, 1, 64)}, r"k must be 4-D \(num_pages, page_size, Hkv, D\), got shape \(9, 1, 64\)"),
    ({"table": np.zeros((2, 3), np.int64)}, r"block_table must be int32 \(2, max_pages\), a row of page indices per "
                                            r"sequence with unit stride along it, got shape \(2, 3\), dtype int64"),
    ({"table": np.zeros((3, 3), np.int32)}, r"block_table must be int32 \(2, max_pages\).* got shape \(3, 3\)"),
    ({"table": np.zeros((2, 6), np.int32)[:, ::2]}, r"block_table must be .* strides \(6, 2\)"),
    ({"table": np.zeros((2, 2), np.int32)}, r"sequence 1 has 5 keys but its block_table row holds 2 pages of 2 "
                                            r"\(4 keys\)"),
    ({"table": np.array([[0, 1, -1], [3, 6, 5]], np.int32)}, r"block_table row 1 names pages \[3, 6, 5\]; k and v "
                                                             r"have 6 \(0 to 5\)"),
    ({"k": f16(6, 0, 1, 64)}, r"k and v are pages \(num_pages, page_size, Hkv, D\) with page_size 0"),
])
def test_paged_kv_rejected_before_the_device(change, message):
    """A paged cache's checks: its shape, the table's dtype, shape and row stride, and (numpy) every length within its
    row's pages and every page it uses within the cache (entries past a sequence's pages are never read: -1 is
    fine)."""
    q, k, v, cq, ck, mq, mk, table = paged_args()
    k = v = change.get("k", k)
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.flash_attn_varlen(q, k, v, cq, ck, mq, mk, block_table=change.get("table", table), device=NO_DEVICE)
    assert str(e.value).startswith("tessera.flash_attn_varlen: ")


def test_paged_kv_valid_arguments_reach_the_device():
    """Unused table entries may hold anything, and cu_seqlens_k counts keys, not rows of k."""
    q, k, v, cq, ck, mq, mk, table = paged_args(table=((0, 1, -7), (3, 4, 5)))
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.flash_attn_varlen(q, k[:, :, :, :], v, cq, ck, mq, mk, block_table=table, device=NO_DEVICE)


@support.requires_torch
def test_paged_kv_has_no_backward():
    q = torch.ones(4, 2, 64, dtype=torch.float16, requires_grad=True)
    pages = torch.ones(2, 2, 1, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(tessera.InputError, match=r"a paged K/V cache \(block_table\) has no backward "
                                                 r"\(FlashAttention has none either\)"):
        tessera.flash_attn_varlen(q, pages, pages, cu, cu, 4, 4, block_table=torch.zeros(1, 2, dtype=torch.int32))


def test_varlen_needs_3d_tensors():
    q, k, v, cq, ck, mq, mk = varlen_args()
    with pytest.raises(tessera.InputError, match=r"q must be 3-D \(total_q, Hq, D\), got shape \(1, 7, 2, 64\)"):
        tessera.flash_attn_varlen(q[None], k, v, cq, ck, mq, mk, device=NO_DEVICE)


def test_numpy_needs_a_sim_device():
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn: numpy arrays run on the simulator: pass "
                                                 r"device='sim:<target>'"):
        tessera.flash_attn(Q, K, V)
    with pytest.raises(tessera.InputError, match=r"numpy arrays run on the simulator"):
        tessera.flash_attn_varlen(*varlen_args(), device="cuda")


def test_read_only_outputs_are_rejected():
    out = f16(1, 4, 2, 64)
    out.flags.writeable = False
    with pytest.raises(tessera.InputError, match="out is a read-only numpy array"):
        tessera.flash_attn(Q, K, V, out=out, device=NO_DEVICE)


def test_valid_arguments_reach_the_device():
    # The counterpart of the tests above: good arguments (strided, GQA, every option) fail only at the plugin.
    packed = f16(2, 5, 3, 4, 64)
    q, k, v = packed[:, :, 0], packed[:, :, 1, :2], packed[:, :, 2, 2:]
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", scale=0.1, window=(3, 0), softcap=30.0,
                           return_lse=True, device=NO_DEVICE)
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.flash_attn_varlen(*varlen_args(), causal=True, return_lse=True, device=NO_DEVICE)


@support.requires_torch
def test_torch_tensors_checked_before_the_device():
    q = torch.ones(1, 4, 2, 64, dtype=torch.float16)
    with pytest.raises(tessera.InputError, match="q, k and v must have the same dtype, got float16, float16 and "
                                                 "bfloat16"):
        tessera.flash_attn(q, q, q.bfloat16())
    with pytest.raises(tessera.InputError, match="torch tensors and numpy arrays mixed"):
        tessera.flash_attn(q, q, f16(1, 4, 2, 64))
    with pytest.raises(tessera.InputError, match="tensors are on cpu; torch tensors must be on a CUDA"):
        tessera.flash_attn(q, q, q)
    with pytest.raises(tessera.InputError, match=r"cu_seqlens_q has dtype int64; it must be int32"):
        tessera.flash_attn_varlen(q[0], q[0], q[0], torch.tensor([0, 4]), torch.tensor([0, 4], dtype=torch.int32),
                                  4, 4)


# ---- Kernel choice and launch arguments through the fake sim plugin ----------------------------------------------
FAKE = support.fake_driver_path()
ALL = ("sliding_window", "softcap", "return_lse")


@pytest.fixture
def fake_sim(monkeypatch, tmp_path):
    if FAKE is None or not FAKE.is_file():
        pytest.skip("fake driver not built (ninja -C build tessera_fake_driver)")
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(FAKE))
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path))
    kernels = [support.flash_attn_kernel_entry(f"fa_f16_d64_{s}", "f16", 64, m) for s, m in support.ATTN_MASKS.items()]
    kernels += [support.flash_attn_kernel_entry("fa_f16_d64_br_varlen", "f16", 64, "causal_bottom_right", True),
                support.flash_attn_kernel_entry("fa_f16_d64_none_plain", "f16", 64, features=()),
                support.flash_attn_kernel_entry("fa_f16_d64_none_lse", "f16", 64, features=("return_lse",)),
                support.flash_attn_kernel_entry("fa_f16_d64_br_varlen_paged", "f16", 64, "causal_bottom_right", True,
                                                features=("paged_kv",)),   # the fake records 256 bytes
                support.flash_attn_kernel_entry("fa_f16_d64_br_drop", "f16", 64, "causal_bottom_right",
                                                features=ALL + ("dropout",)),
                support.flash_attn_kernel_entry("fa_f16_d64_br_varlen_seqused", "f16", 64, "causal_bottom_right", True,
                                                features=ALL + ("seqused",)),
                support.flash_attn_kernel_entry("fa_f16_d32_none_packed", "f16", 32, features=ALL),
                support.gemm_kernel_entry("f16", "f16", False, "hsaco")]
    kernels[-2]["attributes"]["pack_gqa"] = 4      # one query-head pack per tile: not what flash_attn launches
    support.write_bundle(tmp_path / "gfx942", "gfx942", kernels)
    fake = support.FakeDriver(FAKE)
    entries = {k["name"]: k for k in kernels}
    return fake, tessera.Device("sim:gfx942"), entries


def _one_launch(fake, entries):
    (launch,) = fake.launches()
    name = launch.entry.decode()
    return name, tuple(launch.grid), support.unpack_args(entries[name], launch.args)


def test_dispatch_packed_qkv_strides_and_options(fake_sim):
    fake, dev, entries = fake_sim
    B, S, Hq, Hkv, D = 2, 37, 6, 2, 64
    packed = np.full((B, S, Hq + 2 * Hkv, D), 7.0, np.float16)       # one packed qkv tensor
    q, k, v = packed[:, :, :Hq], packed[:, :, Hq:Hq + Hkv], packed[:, :, Hq + Hkv:]
    out, lse = tessera.flash_attn(q, k, v, causal=True, causal_align="top_left", window=(5, -1), softcap=20.0,
                                  return_lse=True, device=dev)
    assert out.shape == (B, S, Hq, D) and out.dtype == np.float16 and lse.shape == (B, Hq, S) and lse.dtype == np.float32
    name, grid, args = _one_launch(fake, entries)
    assert name == "fa_f16_d64_tl" and grid == (1, Hq, B)
    row = (Hq + 2 * Hkv) * D
    assert (args["B"], args["Sq"], args["Sk"], args["Hq"], args["Hkv"]) == (B, S, S, Hq, Hkv)
    for t in "qkv":
        assert (args[f"{t}_stride_b"], args[f"{t}_stride_s"], args[f"{t}_stride_h"]) == (S * row, row, D)
    assert (args["o_stride_b"], args["o_stride_s"], args["o_stride_h"]) == (S * Hq * D, Hq * D, D)
    assert (args["lse_stride_b"], args["lse_stride_h"]) == (Hq * S, S)
    assert args["scale"] == pytest.approx(1 / 8) and args["softcap"] == pytest.approx(20.0)
    assert (args["window_left"], args["window_right"]) == (5, -1)


def test_dispatch_prefers_the_kernel_with_fewest_extra_features(fake_sim):
    fake, dev, entries = fake_sim
    q, k, v = qkv(D=64)
    tessera.flash_attn(q, k, v, device=dev)
    name, _, args = _one_launch_last(fake, entries)
    assert name == "fa_f16_d64_none_plain" and "lse" not in args
    tessera.flash_attn(q, k, v, return_lse=True, device=dev)
    assert fake.launches()[-1].entry == b"fa_f16_d64_none_lse"
    tessera.flash_attn(q, k, v, softcap=1.0, device=dev)
    name, _, args = _one_launch_last(fake, entries)
    assert name == "fa_f16_d64_none" and args["lse"] != 0          # scratch LSE for a kernel that writes one
    assert (args["window_left"], args["window_right"], args["softcap"]) == (-1, -1, 1.0)
    tessera.flash_attn(q, k, v, causal=True, scale=0.5, device=dev)
    name, _, args = _one_launch_last(fake, entries)
    assert name == "fa_f16_d64_br" and args["scale"] == 0.5


def _one_launch_last(fake, entries):
    launch = fake.launches()[-1]
    name = launch.entry.decode()
    return name, tuple(launch.grid), support.unpack_args(entries[name], launch.args)


def test_dispatch_varlen(fake_sim):
    fake, dev, entries = fake_sim
    q, k, v, cq, ck, mq, mk = varlen_args(cu_q=(0, 3, 3, 7), cu_k=(0, 4, 9, 9), max_q=4, max_k=5)
    out, lse = tessera.flash_attn_varlen(q, k, v, cq, ck, mq, mk, causal=True, return_lse=True, device=dev)
    assert out.shape == (7, 2, 64) and lse.shape == (2, 7)
    name, grid, args = _one_launch(fake, entries)
    assert name == "fa_f16_d64_br_varlen" and grid == (1, 2, 3)
    assert (args["B"], args["Sq"], args["Sk"], args["Hq"], args["Hkv"]) == (3, 4, 5, 2, 1)
    assert (args["q_stride_b"], args["q_stride_s"], args["q_stride_h"]) == (0, 128, 64)
    assert (args["k_stride_b"], args["k_stride_s"], args["k_stride_h"]) == (0, 64, 64)
    assert (args["lse_stride_b"], args["lse_stride_h"]) == (0, 7)
    assert args["cu_seqlens_q"] and args["cu_seqlens_k"]


def test_dispatch_paged_kv(fake_sim):
    """A paged call takes a paged_kv kernel (never the plain varlen one), with the pages' strides, the table's row
    stride and the page size; a variant without one names the directive that compiles it."""
    fake, dev, entries = fake_sim
    q, k, v, cq, ck, mq, mk, table = paged_args(page_size=4, num_pages=5, table=((0, 4, 0), (2, 1, 3)))
    tessera.flash_attn_varlen(q, k, v, cq, ck, mq, mk, causal=True, block_table=table, device=dev)
    name, grid, args = _one_launch(fake, entries)
    assert name == "fa_f16_d64_br_varlen_paged" and grid == (1, 2, 2)
    assert (args["k_stride_b"], args["k_stride_s"], args["k_stride_h"]) == (256, 64, 64)
    assert (args["block_table_stride"], args["page_size"], args["block_table"] != 0) == (3, 4, True)
    with pytest.raises(tessera.KernelNotFoundError, match=r"mask=none varlen=True paged_kv=True .* this directive "
                                                          r"compiles one: tessera.flash_attn "
                                                          r"@fa_f16_d64_none_varlen_paged \{dtype = f16, head_dim = "
                                                          r"64, .*, varlen, paged_kv\}"):
        tessera.flash_attn_varlen(q, k, v, cq, ck, mq, mk, block_table=table, device=dev)


def test_dispatch_dropout(fake_sim):
    """A dropout call takes a dropout kernel with the rate and the seed's words in memory; dropout_p = 0 is a plain
    call; a missing variant names the directive that compiles it."""
    fake, dev, entries = fake_sim
    q, k, v = qkv(D=64)
    tessera.flash_attn(q, k, v, causal=True, dropout_p=0.25, dropout_seed=(5, 6), device=dev)
    name, _, args = _one_launch_last(fake, entries)
    assert name == "fa_f16_d64_br_drop" and args["dropout_p"] == 0.25 and args["rng_state"] != 0
    tessera.flash_attn(q, k, v, causal=True, dropout_p=0.0, device=dev)
    assert _one_launch_last(fake, entries)[0] == "fa_f16_d64_br"
    with pytest.raises(tessera.KernelNotFoundError, match=r"mask=none varlen=False dropout=True .* compiles one: "
                                                          r"tessera.flash_attn @fa_f16_d64_none_drop \{.*, dropout\}"):
        tessera.flash_attn(q, k, v, dropout_p=0.5, dropout_seed=1, device=dev)


def test_dispatch_seqused(fake_sim):
    """seqused_q/k take a seqused kernel, each pointer given (the one not given: cu_seqlens' lengths); a variant
    without one names the directive that compiles it."""
    fake, dev, entries = fake_sim
    args = varlen_args(cu_q=(0, 3, 7), cu_k=(0, 4, 9), max_q=4, max_k=5)
    tessera.flash_attn_varlen(*args, causal=True, seqused_k=np.array([2, 5], np.int32), device=dev)
    name, grid, launched = _one_launch_last(fake, entries)
    assert name == "fa_f16_d64_br_varlen_seqused" and launched["seqused_q"] and launched["seqused_k"]
    with pytest.raises(tessera.KernelNotFoundError, match=r"varlen=True seqused=True .* compiles one: "
                                                          r"tessera.flash_attn @fa_f16_d64_none_varlen_seqused "
                                                          r"\{.*, varlen, seqused\}"):
        tessera.flash_attn_varlen(*args, seqused_q=np.array([1, 1], np.int32), device=dev)


def test_rng_state_words():
    """The seed forms as the kernels read them: int64 (seed, offset), i.e. words seed_lo, seed_hi, offset_lo,
    offset_hi; values past 2^63 wrap to the same bits."""
    from tessera import _attention
    state = _attention.rng_state("t", Q, (0x1234567890ABCDEF, (7 << 32) + 9))
    assert state.dtype == np.int64 and state.view(np.uint32).tolist() == [0x90ABCDEF, 0x12345678, 9, 7]
    assert _attention.rng_state("t", Q, (1 << 64) - 1).view(np.uint64).tolist() == [(1 << 64) - 1, 0]
    given = np.array([3, 4], np.int64)
    assert _attention.rng_state("t", Q, given) is given


def test_dropout_mask_definition():
    """Philox4x32-10 against Random123's known answers; the mask's rate and its dependence on every coordinate."""
    for counter, key, want in [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
                               ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
                               ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
                                (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]:
        assert [int(x) for x in testing.philox4x32_10(counter, key)] == list(want)
    keep = testing.dropout_keep((11, 3), 0.3, 2, 3, 64, 80)
    assert abs(keep.mean() - 0.7) < 0.01
    # Element (b, h, i, j): word i & 3 of Philox(key (seed_lo, seed_hi ^ offset_hi), (j >> 1, i >> 2, b Hq + h,
    # offset_lo)), half j & 1.
    b, h, i, j = 1, 2, 37, 51
    words = testing.philox4x32_10((j >> 1, i >> 2, b * 3 + h, 3), (11, 0))
    draw = (int(words[i & 3]) >> (16 * (j & 1))) & 0xFFFF
    assert keep[b, h, i, j] == (draw >= int(0.3 * 65536))
    # Every coordinate moves the mask; the first batch item shifts the streams (varlen's per-sequence masks).
    assert (keep[0] != keep[1]).any() and (keep[:, 0] != keep[:, 1]).any()
    assert (testing.dropout_keep((11, 4), 0.3, 2, 3, 64, 80) != keep).any()
    assert (testing.dropout_keep((11, 3), 0.3, 1, 3, 64, 80, first_batch=1)[0] == keep[1]).all()
    assert testing.dropout_keep((11, 3), 0.0, 1, 1, 8, 8).all()


def test_missing_variant_is_named(fake_sim):
    fake, dev, _ = fake_sim
    q, k, v = qkv(D=32)
    with pytest.raises(tessera.KernelNotFoundError, match=r"\(gfx942\) has no flash_attn kernel with dtype=f16 "
                                                          r"head_dim=32 mask=none varlen=False return_lse "
                                                          r"\(flash_attn kernels: fa_f16_d64_none, "):
        tessera.flash_attn(q, k, v, return_lse=True, device=dev)   # the pack_gqa kernel is not used
    with pytest.raises(tessera.KernelNotFoundError, match=r"mask=causal_top_left varlen=True"):
        tessera.flash_attn_varlen(*varlen_args(), causal=True, causal_align="top_left", device=dev)
    assert fake.launches() == []


def test_kernel_choice_is_remembered_per_bundle(fake_sim, monkeypatch, tmp_path):
    """The bundle is scanned once per variant (not per call), a missing variant raises on every call, and each
    bundle answers for its own kernels."""
    from tessera import _attention
    fake, dev, entries = fake_sim
    scans, find = [], _attention.find_kernel
    monkeypatch.setattr(_attention, "find_kernel",
                        lambda bundle, p, pack=1: scans.append(p) or find(bundle, p, pack))
    q, k, v = qkv(D=64)
    for causal in (False, False, True, False, True):
        tessera.flash_attn(q, k, v, causal=causal, device=dev)
    assert len(scans) == 2
    assert [launch.entry for launch in fake.launches()] == [b"fa_f16_d64_none_plain"] * 2 + [b"fa_f16_d64_br"] + \
        [b"fa_f16_d64_none_plain", b"fa_f16_d64_br"]
    messages = []
    for _ in range(2):
        with pytest.raises(tessera.KernelNotFoundError) as error:
            tessera.flash_attn(*qkv(D=32), return_lse=True, device=dev)
        messages.append(str(error.value))
    assert len(scans) == 4 and messages[0] == messages[1] and "head_dim=32" in messages[0]

    support.write_bundle(tmp_path / "other", "gfx942", [entries["fa_f16_d64_none"]])
    p = scans[0]
    assert _attention.in_bundle(dev.bundle(tmp_path / "other"), p).name == "fa_f16_d64_none"
    assert _attention.in_bundle(dev.bundle(), p).name == "fa_f16_d64_none_plain"


def test_gqa_packing_rule():
    """pack_for: pack query heads of one KV head into a tile when few queries leave its 128 rows mostly unused
    (FlashAttention-3's 0.9 fill rule), with the largest fill among the packings that divide Hq / Hkv."""
    from tessera import _attention

    def plan(Sq, Hq, Hkv, varlen=False):
        return _attention.Plan("t", varlen, "f16", 128, 1, Sq, 100, Hq, Hkv, "none", 1.0, (-1, -1), 0.0, False,
                               (1, Sq, Hq, 128), (1, Hq, Sq))
    packs = (4, 8)
    assert _attention.pack_for(plan(1, 16, 2), packs) == 8      # 8 of 128 rows used instead of 1
    assert _attention.pack_for(plan(1, 8, 2), packs) == 4       # ratio 4: 8 heads would span two KV heads
    assert _attention.pack_for(plan(1, 6, 2), packs) == 1       # ratio 3: no packing divides it
    assert _attention.pack_for(plan(16, 16, 2), packs) == 8     # 16 queries x 8 heads fill a tile exactly
    assert _attention.pack_for(plan(100, 16, 2), packs) == 8    # fill 0.78 unpacked, 0.89 packed by 8
    assert _attention.pack_for(plan(1000, 16, 2), packs) == 1   # 0.98 unpacked already
    assert _attention.pack_for(plan(1, 16, 2, varlen=True), packs) == 1
    assert _attention.pack_for(plan(0, 16, 2), packs) == 1
    assert _attention.pack_for(plan(1, 16, 2), ()) == 1


def test_gqa_packed_kernel_launched_only_where_it_packs(fake_sim, tmp_path):
    """A bundle kernel with pack_gqa > 1 is launched for few queries per KV head, with its own grid; a portable
    fallback with the same attribute (one head per tile anyway) is not preferred."""
    fake, dev, entries = fake_sim
    packed = support.flash_attn_kernel_entry("fa_f16_d64_none_gqa4", "f16", 64, features=("return_lse",))
    packed["attributes"]["pack_gqa"] = 4
    packed["grid"] = [["ceil_div", "Sq", 32], ["div", "Hq", 4], "B"]
    fallback = dict(packed, name="fa_f16_d64_none_gqa4_fallback", entry="fa_f16_d64_none_gqa4_fallback",
                    code_object="fa_f16_d64_none_gqa4_fallback.hsaco", fallback="portable kernel: one head per tile")
    support.write_bundle(tmp_path / "packs", "gfx942", [entries["fa_f16_d64_none_lse"], packed])
    support.write_bundle(tmp_path / "fallback", "gfx942", [entries["fa_f16_d64_none_lse"], fallback])
    from tessera import _attention
    for folder, Sq, expected in (("packs", 3, "fa_f16_d64_none_gqa4"), ("packs", 1000, "fa_f16_d64_none_lse"),
                                 ("fallback", 3, "fa_f16_d64_none_lse")):
        p = _attention.Plan("t", False, "f16", 64, 1, Sq, 50, 8, 2, "none", 1.0, (-1, -1), 0.0, True,
                            (1, Sq, 8, 64), (1, 8, Sq))
        assert _attention.in_bundle(dev.bundle(tmp_path / folder), p).name == expected, (folder, Sq)
    bundle = dev.bundle(tmp_path / "packs")
    q, k, v = qkv(Sq=3, Sk=50, Hq=8, Hkv=2)
    tessera.flash_attn(q, k, v, return_lse=True, device=dev)   # the default bundle: no packed kernel
    name, grid, _ = _one_launch(fake, entries)
    assert name == "fa_f16_d64_none_lse" and grid == (1, 8, 1)
    kernel = _attention.in_bundle(bundle, p._replace(Sq=3))
    assert kernel.grid(**{**{n: 1 for n in kernel.settable}, "Sq": 3, "Hq": 8}) == (1, 2, 1)


def test_empty_sizes_launch_nothing(fake_sim):
    fake, dev, _ = fake_sim
    out = tessera.flash_attn(*qkv(B=0), device=dev)
    assert out.shape == (0, 4, 2, 64)
    out, lse = tessera.flash_attn(*qkv(Sq=0), return_lse=True, device=dev)
    assert out.shape == (1, 0, 2, 64) and lse.shape == (1, 2, 0)
    out = tessera.flash_attn(*qkv(Hq=0, Hkv=0), device=dev)
    assert out.shape == (1, 4, 0, 64)
    q, k, v, cq, ck, mq, mk = varlen_args(total_q=0, cu_q=(0, 0, 0), max_q=0)
    assert tessera.flash_attn_varlen(q, k, v, cq, ck, mq, mk, causal=True, device=dev).shape == (0, 2, 64)
    assert fake.launches() == []
    tessera.flash_attn(*qkv(Sk=0), device=dev)       # Sk = 0: the kernel writes O = 0, LSE = -inf
    assert len(fake.launches()) == 1


# ---- The reference ------------------------------------------------------------------------------------------------
def naive_attention(q, k, v, causal, align, window, softcap, scale):
    """One row at a time in Python floats: the definition the vectorised reference must match."""
    B, Sq, Hq, D = q.shape
    Sk, group = k.shape[1], Hq // k.shape[2]
    O, L = np.zeros((B, Sq, Hq, D)), np.full((B, Hq, Sq), -np.inf)
    for b in range(B):
        for h in range(Hq):
            for i in range(Sq):
                off = 0 if causal and align == "top_left" else Sk - Sq
                keys = [j for j in range(Sk) if not (causal and j > i + off) and
                        not (window[0] >= 0 and j < i + off - window[0]) and
                        not (window[1] >= 0 and j > i + off + window[1])]
                if not keys:
                    continue
                s = [scale * float(np.dot(q[b, i, h].astype(np.float64), k[b, j, h // group].astype(np.float64)))
                     for j in keys]
                s = [softcap * math.tanh(x / softcap) for x in s] if softcap else s
                m = max(s)
                p = [math.exp(x - m) for x in s]
                L[b, h, i] = m + math.log(sum(p))
                O[b, i, h] = sum(pj * v[b, j, h // group].astype(np.float64) for pj, j in zip(p, keys)) / sum(p)
    return O, L


@pytest.mark.parametrize("causal, align, window, softcap", [
    (False, "bottom_right", (-1, -1), 0.0), (True, "bottom_right", (-1, -1), 0.0), (True, "top_left", (2, -1), 0.0),
    (False, "bottom_right", (1, 1), 3.0), (True, "bottom_right", (0, 0), 0.0), (False, "bottom_right", (0, -1), 0.0)])
@pytest.mark.parametrize("Sq, Sk", [(5, 7), (1, 7), (10, 7), (6, 0)])
def test_reference_matches_the_definition(causal, align, window, softcap, Sq, Sk):
    rng = np.random.default_rng()
    q = rng.standard_normal((2, Sq, 4, 32)).astype(np.float16)
    k, v = (rng.standard_normal((2, Sk, 2, 32)).astype(np.float16) for _ in range(2))
    ref = testing.attention_reference(q, k, v, causal, align, 0.3, window, softcap)
    O, L = naive_attention(q, k, v, causal, align, window, softcap, 0.3)
    np.testing.assert_allclose(ref.o, O, atol=1e-12)
    assert (np.isinf(ref.lse) == np.isinf(L)).all()
    np.testing.assert_allclose(ref.lse[np.isfinite(L)], L[np.isfinite(L)], rtol=1e-12)
    same = testing.attention_reference(q, k, v, causal, align, 0.3, window, softcap, precision="same")
    assert same.o.dtype == np.float64 and (same.o == same.o.astype(np.float16)).all()   # rounded to f16
    assert testing.check_attention(same.o, ref, same, same.lse).ok
    assert testing.check_attention(ref.o, ref, same, ref.lse).ok


def test_reference_varlen_matches_per_sequence():
    rng = np.random.default_rng()
    cq, ck = [0, 3, 3, 9], [0, 5, 8, 8]
    q = rng.standard_normal((9, 3, 32)).astype(np.float16)
    k, v = (rng.standard_normal((8, 1, 32)).astype(np.float16) for _ in range(2))
    ref = testing.attention_reference_varlen(q, k, v, cq, ck, causal=True)
    for b in range(3):
        one = testing.attention_reference(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]],
                                          causal=True)
        assert (ref.o[cq[b]:cq[b + 1]] == one.o[0]).all() and (ref.lse[:, cq[b]:cq[b + 1]] == one.lse[0]).all()
    assert np.isinf(ref.lse[:, 3:9]).all() and (ref.o[3:9] == 0).all()   # the third sequence has no keys


def test_check_attention_catches_what_it_must():
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 6, 2, 32)).astype(np.float16) for _ in range(3))
    ref = testing.attention_reference(q[:, :, :], k[:, :3], v[:, :3], causal=True)   # rows 0-2 fully masked
    same = testing.attention_reference(q, k[:, :3], v[:, :3], causal=True, precision="same")
    good_o, good_lse = same.o.astype(np.float16), same.lse.astype(np.float32)
    assert testing.check_attention(good_o, ref, same, good_lse).ok
    bad = good_o.copy()
    bad[0, 4, 1, 7] = np.nan
    assert "NaN" in str(testing.check_attention(bad, ref, same, good_lse))
    bad = good_o.copy()
    bad[0, 1, 0, 0] = 1e-4                      # a fully masked row must be exactly 0
    assert "not exactly 0" in str(testing.check_attention(bad, ref, same, good_lse))
    bad = good_o.copy()
    bad[0, 5, 0, 3] += 0.05
    assert not testing.check_attention(bad, ref, same, good_lse).ok
    lse = good_lse.copy()
    lse[0, 0, 0] = -1e30                        # -inf exactly, not a large negative number
    assert "not -inf" in str(testing.check_attention(good_o, ref, same, lse))
    lse = good_lse.copy()
    lse[0, 1, 4] = np.nan
    assert not testing.check_attention(good_o, ref, same, lse).ok
    lse = good_lse.copy()
    lse[0, 1, 5] += 1e-3
    assert not testing.check_attention(good_o, ref, same, lse).ok
    k_nan = k.copy()
    k_nan[0, 1, 0, 5] = np.nan                  # NaN inputs: named as such, not as rows without a visible key
    nan_ref = testing.attention_reference(q, k_nan[:, :3], v[:, :3], causal=True)
    check = testing.check_attention(good_o, nan_ref, same, good_lse)
    assert not check.ok and "the reference has" in str(check) and "inputs hold NaN" in str(check)


def test_check_attention_bounds_a_lucky_same_precision_draw_by_the_output_rounding():
    """The decode case that once failed: one large element (17.3) that the same-precision draw rounded to its nearer
    f16 neighbour and a kernel, 0.0003 away before rounding, to the other: its error (0.011) was 2.4x the draw's max
    (0.0046), within half an f16 ulp at 17.3 of the draw's. The bound counts the output rounding of the largest
    element (unit roundoff x max|ref|); an error of a few ulps still fails, and f32 outputs get no such allowance."""
    ref_o = np.array([17.307858892674968, 3.0, -2.0, 0.5])
    same_o = np.array([17.3125, 3.0, -2.0, 0.5])
    ref = testing.AttentionResult(ref_o.reshape(1, 1, 1, 4), np.zeros((1, 1, 1)), np.abs(ref_o).reshape(1, 1, 1, 4))
    same = testing.AttentionResult(same_o.reshape(1, 1, 1, 4), np.zeros((1, 1, 1)), np.zeros((1, 1, 1, 4)))
    out = same.o.astype(np.float16)
    out[0, 0, 0, 0] = np.float16(17.296875)         # the other f16 neighbour of 17.3079
    check = testing.check_attention(out, ref, same)
    assert check.ok and check.o.reference_error == pytest.approx(17.307858892674968 * 2.0**-11)
    assert not testing.check_attention(out.astype(np.float32), ref, same).ok
    out[0, 0, 0, 0] = np.float16(17.28125)          # an ulp further
    assert not testing.check_attention(out, ref, same).ok
    assert testing.output_roundoff(np.float16) == 2.0**-11 and testing.output_roundoff("bf16") == 2.0**-8
    assert testing.output_roundoff(np.float64) == 0.0


# ---- The default kernels ------------------------------------------------------------------------------------------
ALL_VARIANTS = {(d, D, m, v) for d in support.DTYPES for D in (32, 64, 96, 128, 256)
                for m in support.ATTN_MASKS.values() for v in (False, True)}


def test_examples_attention_declares_every_variant():
    """examples/attention.mlir (dist's default kernels): fa_<dtype>_d<D>_<none|tl|br>[_varlen] with every runtime
    feature (window, softcap, LSE), for all 60 variants, and no tile; further kernels (leaner twins) may follow."""
    import re
    full = {}
    for line in (support.REPO / "examples" / "attention.mlir").read_text().splitlines():
        if not line.startswith("tessera.flash_attn "):
            continue
        name, attrs = re.fullmatch(r"tessera\.flash_attn @(\w+) \{(.*)\}", line).groups()
        attrs = dict(a.split(" = ") if " = " in a else (a, True) for a in attrs.split(", "))
        assert "tile" not in attrs, name
        if not {"sliding_window", "softcap", "return_lse"} <= set(attrs):
            continue
        mask = re.fullmatch(r"#tessera\.mask<(\w+)>", attrs["mask"]).group(1)
        short = {v: k for k, v in support.ATTN_MASKS.items()}[mask]
        variant = (attrs["dtype"], int(attrs["head_dim"]), mask, "varlen" in attrs)
        assert name == f"fa_{variant[0]}_d{variant[1]}_{short}" + ("_varlen" if variant[3] else "")
        full[name] = variant
    assert set(full.values()) == ALL_VARIANTS and len(full) == 60


def test_examples_attention_declares_every_backward_variant():
    """examples/attention.mlir: fa_bwd_<dtype>_d<D>_<none|tl|br>[_varlen][_det], window and softcap, for the 60
    forward variants in both modes (120 kernel sets), no tile."""
    import re
    found = set()
    for line in (support.REPO / "examples" / "attention.mlir").read_text().splitlines():
        if not line.startswith("tessera.flash_attn_bwd "):
            continue
        name, attrs = re.fullmatch(r"tessera\.flash_attn_bwd @(\w+) \{(.*)\}", line).groups()
        attrs = dict(a.split(" = ") if " = " in a else (a, True) for a in attrs.split(", "))
        assert "tile" not in attrs and {"sliding_window", "softcap"} <= set(attrs), name
        mask = re.fullmatch(r"#tessera\.mask<(\w+)>", attrs["mask"]).group(1)
        short = {v: k for k, v in support.ATTN_MASKS.items()}[mask]
        variant = (attrs["dtype"], int(attrs["head_dim"]), mask, "varlen" in attrs)
        det = "deterministic" in attrs
        assert name == f"fa_bwd_{variant[0]}_d{variant[1]}_{short}" + ("_varlen" if variant[3] else "") + \
            ("_det" if det else "")
        found.add((*variant, det))
    assert found == {(*v, det) for v in ALL_VARIANTS for det in (False, True)}


def test_default_bundles_have_every_attention_variant():
    """The bundles found (dist/ or a build tree) hold the 60 flash_attn kernels, unless a target has none at all
    (scripts/make_dist.sh leaves them out, with a warning, for a target without the generator)."""
    import json
    found = tessera.available_targets()
    if not found:
        pytest.skip("no bundles in the search path (scripts/make_dist.sh builds them)")
    for target, directory in found.items():
        kernels = [k for k in json.loads((directory / "manifest.json").read_text())["kernels"]
                   if k["directive"] == "flash_attn"]
        if not kernels:
            continue
        variants = {(a["dtype"], a["head_dim"], a.get("mask", "none"), a.get("varlen", False))
                    for a in (k["attributes"] for k in kernels)
                    if all(a.get(f) for f in ("sliding_window", "softcap", "return_lse"))}
        assert variants >= ALL_VARIANTS, f"{target}: missing {sorted(ALL_VARIANTS - variants)}"


def test_tma_kernels_fall_back_to_their_portable_twin():
    """sm_90a kernels copy with TMA (16-byte multiple strides); other strides take the kernel's portable twin, and
    twins are never chosen directly."""
    import types
    from tessera import _arrays, _attention

    def kernel(name, **info):
        attrs = dict(dtype="f16", head_dim=64, mask="none")
        return types.SimpleNamespace(name=name, directive="flash_attn", attributes=attrs, info=info)
    fast, twin = kernel("fa", portable_twin="fa_portable"), kernel("fa_portable", twin_of="fa")
    bundle = types.SimpleNamespace(kernels={"fa_portable": twin, "fa": fast}, directory="b", target="sm_90a")
    p = _attention.Plan("t", False, "f16", 64, 2, 256, 256, 4, 4, "none", 0.125, (-1, -1), 0.0, False,
                        (2, 256, 4, 64), (2, 4, 256))
    assert _attention.find_kernel(bundle, p) is fast
    packed = np.zeros((2, 256, 12, 64), np.float16)                   # q, k, v sliced from one qkv tensor
    infos = {n: _arrays.describe(packed[:, :, 4 * i:4 * i + 4], n) for i, n in enumerate("qkv")}
    infos["o"] = _arrays.describe(np.zeros((2, 256, 4, 64), np.float16), "o")
    assert _attention.with_tma_fallback(bundle, fast, p, infos) is fast
    infos["k"] = _arrays.describe(np.zeros((2, 256, 4, 68), np.float16)[..., :64], "k")  # 136-byte head stride
    assert _attention.with_tma_fallback(bundle, fast, p, infos) is twin
    one = np.zeros((1, 1, 1, 68), np.float16)[..., :64]               # extent-1 dimensions: strides unused
    assert _attention.with_tma_fallback(bundle, fast, p, {n: _arrays.describe(one, n) for n in "qkvo"}) is fast
    assert _attention.with_tma_fallback(bundle, twin, p, infos) is twin   # kernels without TMA stay

"""tessera.flash_attn_bwd / flash_attn_varlen_bwd argument checks, all made before any device is touched; kernel set
choice, the missing-variant message, launch arguments and empty sizes through the fake sim plugin; the autograd
wiring's checks (torch, CPU); and the float64 backward reference itself (no GPU, no simulator)."""
import pytest

import support
from support import np, torch
import tessera
from tessera import _attention_bwd, _device, testing

NO_DEVICE = "sim:validation-only"   # its plugin never loads: an InputError proves the check came first


@pytest.fixture(autouse=True)
def no_plugin(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(tmp_path / "no-plugin.so"))


def f16(*shape):
    return np.ones(shape, np.float16)


def f32(*shape):
    return np.zeros(shape, np.float32)


def bwd_args(B=1, Sq=4, Sk=5, Hq=2, Hkv=2, D=64):
    """q, k, v, out, dout, lse of a dense call."""
    q, kv = f16(B, Sq, Hq, D), f16(B, Sk, Hkv, D)
    return q, kv, kv.copy(), q.copy(), q.copy(), f32(B, Hq, Sq)


def replaced(**changes):
    args = dict(zip(("q", "k", "v", "out", "dout", "lse"), bwd_args()))
    args.update(changes)
    return args


@pytest.mark.parametrize("changes, kwargs, message", [
    ({"out": f16(1, 4, 2, 32)}, {}, r"out has shape \(1, 4, 2, 32\), expected \(1, 4, 2, 64\)"),
    ({"dout": f16(1, 4, 3, 64)}, {}, r"dout has shape \(1, 4, 3, 64\), expected \(1, 4, 2, 64\)"),
    ({"out": np.ones((1, 4, 2, 64), np.float32)}, {}, r"out has dtype float32, expected float16"),
    ({"dout": np.ones((1, 4, 2, 64), np.float64)}, {}, r"dout has dtype float64, expected float16"),
    ({"dout": f16(1, 4, 2, 128)[..., ::2]}, {}, r"dout has stride 2 on head_dim \(its last dimension\) and strides "
                                                r"\(1024, 256, 128, 2\) \(elements\); the head_dim stride must be 1"),
    ({"out": np.ones((1, 4, 64, 2), np.float16).transpose(0, 1, 3, 2)}, {}, r"out has stride 2 on head_dim"),
    ({"lse": f32(1, 4, 2)}, {}, r"lse has shape \(1, 4, 2\), expected \(1, 2, 4\)"),
    ({"lse": np.zeros((1, 2, 4), np.float16)}, {}, r"lse has dtype float16, expected float32"),
    ({"lse": f32(1, 4, 2).transpose(0, 2, 1)}, {}, r"lse has strides \(8, 1, 2\) \(elements\); it needs unit stride "
                                                   r"on its last dimension \(the query rows\), as the forward "
                                                   r"writes it"),
    ({"lse": [[0.0]]}, {}, r"lse is a builtins.list; expected a torch tensor or a numpy array"),
    (dict(zip(("q", "k", "v", "out", "dout"), bwd_args(D=264))), {}, r"head_dim 264 is not supported \(1 to 256\)"),
    # A head_dim the kernels take zero-padded (40 -> 48): given gradients keep the caller's 40.
    (dict(zip(("q", "k", "v", "out", "dout"), bwd_args(D=40))), {"dq": f16(1, 4, 2, 48)},
     r"dq has shape \(1, 4, 2, 48\), expected \(1, 4, 2, 40\)"),
    (dict(zip(("q", "k", "v", "out", "dout"), bwd_args(D=40))), {"dv": f16(1, 5, 2, 40).astype(np.float32)},
     r"dv has dtype float32, expected float16"),
    ({"k": f16(1, 5, 4, 64), "v": f16(1, 5, 4, 64)}, {}, r"Hq = 2 must be a multiple of the number of key/value "
                                                         r"heads Hkv = 4"),
    ({"q": f16(2, 4, 2, 64)}, {}, r"q has batch size 2 but k and v have 1"),
    ({}, {"causal": True, "causal_align": "top-left"}, r"causal_align must be 'bottom_right' or 'top_left'"),
    ({}, {"window": (-2, 0)}, r"window \(-2, 0\): each side is >= 0, or -1 for unbounded"),
    ({}, {"softcap": -1.0}, r"softcap must be finite and >= 0"),
    ({}, {"scale": float("inf")}, r"scale must be finite, got inf"),
    ({}, {"dq": f16(1, 4, 2, 32)}, r"dq has shape \(1, 4, 2, 32\), expected \(1, 4, 2, 64\)"),
    ({}, {"dk": f16(1, 4, 2, 64)}, r"dk has shape \(1, 4, 2, 64\), expected \(1, 5, 2, 64\)"),
    ({}, {"dv": np.ones((1, 5, 2, 64), np.float32)}, r"dv has dtype float32, expected float16"),
    ({}, {"dropout_p": 0.1}, r"dropout_p = 0.1 needs the forward's dropout_seed \(its seed and offset\): the "
                             r"backward regenerates the forward's mask from it"),
    ({}, {"dropout_p": 1.5, "dropout_seed": 3}, r"dropout_p must be a number in \[0, 1\), got 1.5"),
    ({}, {"dk": np.broadcast_to(f16(1, 1, 2, 64), (1, 5, 2, 64))}, r"dk has shape \(1, 5, 2, 64\) and strides "
                                                                   r"\(0, 0, 64, 1\) \(elements\); it needs unit "
                                                                   r"stride on the last dimension and elements that "
                                                                   r"do not overlap"),
])
def test_flash_attn_bwd_rejected_before_the_device(changes, kwargs, message):
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.flash_attn_bwd(**replaced(**changes), device=NO_DEVICE, **kwargs)
    assert isinstance(e.value, ValueError) and str(e.value).startswith("tessera.flash_attn_bwd: ")


def test_inputs_that_need_no_unit_stride_elsewhere_reach_the_device():
    # Any strides but head_dim's: dout and out transposed views, out and dout broadcast over the batch, lse strided
    # on the batch; q, k, v sliced from one packed tensor; GQA; every option.
    packed = f16(2, 5, 3, 4, 64)
    q, k, v = packed[:, :, 0], packed[:, :, 1, :2], packed[:, :, 2, 2:]
    dout = np.ones((2, 4, 5, 64), np.float16).transpose(0, 2, 1, 3)
    out = np.broadcast_to(f16(1, 5, 4, 64), (2, 5, 4, 64))
    lse = f32(2, 4, 9)[..., :5]
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.flash_attn_bwd(q, k, v, out, dout, lse, causal=True, causal_align="top_left", scale=0.1,
                               window=(3, 0), softcap=30.0, deterministic=True, device=NO_DEVICE)


def varlen_args(total_q=7, total_k=9, Hq=2, Hkv=1, D=64, cu_q=(0, 3, 7), cu_k=(0, 4, 9), max_q=4, max_k=5):
    """q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k of a varlen call."""
    q, kv = f16(total_q, Hq, D), f16(total_k, Hkv, D)
    cu = [np.array(c, np.int32) for c in (cu_q, cu_k)]
    return q, kv, kv.copy(), q.copy(), q.copy(), f32(Hq, total_q), *cu, max_q, max_k


@pytest.mark.parametrize("index, value, kwargs, message", [
    (5, f32(7, 2), {}, r"lse has shape \(7, 2\), expected \(2, 7\)"),
    (5, f32(1, 2, 7), {}, r"lse has shape \(1, 2, 7\), expected \(2, 7\)"),
    (4, f16(7, 2, 32), {}, r"dout has shape \(7, 2, 32\), expected \(7, 2, 64\)"),
    (3, f16(1, 7, 2, 64), {}, r"out has shape \(1, 7, 2, 64\), expected \(7, 2, 64\)"),
    (6, np.array([0, 3, 7], np.int64), {}, r"cu_seqlens_q has dtype int64; it must be int32"),
    (7, np.array([0, 4, 10], np.int32), {}, r"cu_seqlens_k must be non-decreasing .* at most 9"),
    (8, 3, {}, r"cu_seqlens_q has a sequence of length 4 but max_seqlen_q is 3"),
    (9, 5.0, {}, r"max_seqlen_q and max_seqlen_k must be integers"),
    (None, None, {"dk": f16(9, 2, 64)}, r"dk has shape \(9, 2, 64\), expected \(9, 1, 64\)"),
    (None, None, {"causal": True, "causal_align": "bottom"}, r"causal_align must be"),
])
def test_flash_attn_varlen_bwd_rejected_before_the_device(index, value, kwargs, message):
    args = list(varlen_args())
    if index is not None:
        args[index] = value
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.flash_attn_varlen_bwd(*args, device=NO_DEVICE, **kwargs)
    assert str(e.value).startswith("tessera.flash_attn_varlen_bwd: ")


def test_numpy_needs_a_sim_device_and_writable_gradients():
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn_bwd: numpy arrays run on the simulator"):
        tessera.flash_attn_bwd(*bwd_args())
    dq = f16(1, 4, 2, 64)
    dq.flags.writeable = False
    with pytest.raises(tessera.InputError, match="dq is a read-only numpy array"):
        tessera.flash_attn_bwd(*bwd_args(), dq=dq, device=NO_DEVICE)


@support.requires_torch
def test_torch_checks_before_the_device():
    q = torch.ones(1, 4, 2, 64, dtype=torch.float16)
    lse = torch.zeros(1, 2, 4)
    with pytest.raises(tessera.InputError, match="torch tensors and numpy arrays mixed"):
        tessera.flash_attn_bwd(q, q, q, q, f16(1, 4, 2, 64), lse)
    with pytest.raises(tessera.InputError, match=r"dout has dtype bfloat16, expected float16"):
        tessera.flash_attn_bwd(q, q, q, q, q.bfloat16(), lse)
    with pytest.raises(tessera.InputError, match="tensors are on cpu; torch tensors must be on a CUDA"):
        tessera.flash_attn_bwd(q, q, q, q, q, lse)


@support.requires_torch
def test_autograd_records_the_call_and_refuses_out_and_lse():
    """Inputs that require grad take the autograd Function (its forward checks as flash_attn does: CPU tensors are
    refused); out= / lse= cannot be recorded; the backward itself is not differentiable, so it refuses grad."""
    q = torch.ones(1, 4, 2, 64, dtype=torch.float16, requires_grad=True)
    with pytest.raises(tessera.InputError, match="tessera.flash_attn: tensors are on cpu"):
        tessera.flash_attn(q, q, q, causal=True)
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn: out= and lse= are not supported when autograd "
                                                 r"records the call \(q, k, v require grad\)"):
        tessera.flash_attn(q, q, q, out=torch.empty(1, 4, 2, 64, dtype=torch.float16))
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn_varlen: out= and lse= .*\(k requires grad\)"):
        tessera.flash_attn_varlen(q[0].detach(), q[0], q[0].detach(), cu, cu, 4, 4, return_lse=True,
                                  lse=torch.empty(2, 4))
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn_varlen: tensors are on cpu"):
        tessera.flash_attn_varlen(q[0], q[0], q[0], cu, cu, 4, 4)
    lse = torch.zeros(1, 2, 4)
    with pytest.raises(tessera.InputError, match=r"tessera.flash_attn_bwd: q, out require grad, but "
                                                 r"tessera.flash_attn_bwd has no backward"):
        tessera.flash_attn_bwd(q, q.detach(), q.detach(), q, q.detach(), lse)
    with torch.no_grad():   # not recorded: the plain call's checks
        with pytest.raises(tessera.InputError, match="tessera.flash_attn: tensors are on cpu"):
            tessera.flash_attn(q, q, q)


@support.requires_torch
def test_kernel_ready_upstream_gradient():
    """What autograd hands the backward: expanded (o.sum()), of another dtype or misaligned gradients become a copy in
    out's layout; usable ones are passed as they are."""
    out = torch.empty(2, 3, 4, 64, dtype=torch.bfloat16)
    usable = torch.randn(2, 4, 3, 64).bfloat16().transpose(1, 2)
    assert _attention_bwd.kernel_ready(usable, out) is usable
    for dout in (torch.ones((), dtype=torch.bfloat16).expand(out.shape), torch.randn(out.shape),
                 torch.randn(out.numel() + 1).bfloat16()[1:].view(out.shape)):
        ready = _attention_bwd.kernel_ready(dout, out)
        assert ready.dtype == out.dtype and ready.stride() == out.stride() and torch.equal(ready, dout.bfloat16())


# ---- Kernel set choice, launch arguments, empty sizes through the fake sim plugin ------------------------------
FAKE = support.fake_driver_path()
BR, TL = "causal_bottom_right", "causal_top_left"


def bwd_set(name, mask="none", varlen=False, deterministic=False, features=support.BWD_FEATURES, dtype="f16", D=64,
            vector_rows=False):
    return support.flash_attn_bwd_kernel_set(name, dtype, D, mask, varlen, deterministic, features,
                                             vector_rows=vector_rows)


@pytest.fixture
def fake_sim(monkeypatch, tmp_path):
    """A gfx942 bundle of fake flash_attn_bwd sets on the fake sim plugin; KernelSet.launch records its values."""
    if FAKE is None or not FAKE.is_file():
        pytest.skip("fake driver not built (ninja -C build tessera_fake_driver)")
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(FAKE))
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path))
    sets = [bwd_set("b_none"), bwd_set("b_none_det", deterministic=True), bwd_set("b_br", BR),
            bwd_set("b_br_plain", BR, features=()), bwd_set("b_br_window", BR, features=("sliding_window",)),
            bwd_set("b_br_varlen", BR, varlen=True), bwd_set("b_tl_varlen_det", TL, varlen=True, deterministic=True),
            bwd_set("b_bf16_tl", TL, features=("sliding_window",), dtype="bf16", D=128),
            bwd_set("b_tl_rows", TL, features=(), D=96, vector_rows=True)]
    kernels = [k for ks, _ in sets for k in ks] + [support.flash_attn_kernel_entry("fa_f16_d64_br", "f16", 64, BR)]
    support.write_bundle(tmp_path / "gfx942", "gfx942", kernels, [s for _, s in sets])
    launched, launch = [], _device.KernelSet.launch
    monkeypatch.setattr(_device.KernelSet, "launch",
                        lambda self, stream=None, **values: launched.append((self.name, values)) or
                        launch(self, stream, **values))
    return support.FakeDriver(FAKE), tessera.Device("sim:gfx942"), launched


def test_the_sets_kernels_launch_in_order(fake_sim):
    fake, dev, launched = fake_sim
    for deterministic, last in ((False, "dq_convert"), (True, "dq")):
        fake.lib.fake_reset()
        dq, dk, dv = tessera.flash_attn_bwd(*bwd_args(), deterministic=deterministic, device=dev)
        name = "b_none_det" if deterministic else "b_none"
        assert [launch.entry.decode() for launch in fake.launches()] == [f"{name}_pre", f"{name}_main",
                                                                       f"{name}_{last}"]
        assert launched[-1][0] == name
        assert dq.shape == (1, 4, 2, 64) and dk.shape == dv.shape == (1, 5, 2, 64) and dq.dtype == np.float16
    # The non-deterministic set's dq_accum is zeroed before its first kernel (the runtime's, from the manifest).
    assert fake.lib.fake_memset_count() == 0
    fake.lib.fake_reset()
    tessera.flash_attn_bwd(*bwd_args(), device=dev)
    assert fake.lib.fake_memset_count() == 1


def test_launch_arguments_packed_strides_and_neutral_options(fake_sim):
    fake, dev, launched = fake_sim
    B, Sq, Sk, Hq, Hkv, D = 2, 7, 9, 6, 2, 64
    packed = f16(B, Sk, Hq + 2 * Hkv, D)                              # k, v sliced from one tensor (q's too)
    q, k, v = packed[:, :Sq, :Hq], packed[:, :, Hq:Hq + Hkv], packed[:, :, Hq + Hkv:]
    out = f16(B, Sq, Hq, D)
    dout = np.ones((B, Hq, Sq, D), np.float16).transpose(0, 2, 1, 3)  # head-major: strides of another order
    lse = f32(B, Hq, Sq + 3)[..., :Sq]
    dq = f16(B, Sq, Hq, D + 8)[..., :D]                              # a gradient with gaps between rows
    tessera.flash_attn_bwd(q, k, v, out, dout, lse, scale=0.25, dq=dq, device=dev)
    name, values = launched[-1]
    assert name == "b_none"
    row = (Hq + 2 * Hkv) * D
    assert (values["B"], values["Sq"], values["Sk"], values["Hq"], values["Hkv"]) == (B, Sq, Sk, Hq, Hkv)
    for t in "qkv":
        assert (values[f"{t}_stride_b"], values[f"{t}_stride_s"], values[f"{t}_stride_h"]) == (Sk * row, row, D)
    assert (values["o_stride_b"], values["o_stride_s"], values["o_stride_h"]) == (Sq * Hq * D, Hq * D, D)
    assert (values["do_stride_b"], values["do_stride_s"], values["do_stride_h"]) == (Hq * Sq * D, D, Sq * D)
    assert (values["dq_stride_b"], values["dq_stride_s"], values["dq_stride_h"]) == (Sq * Hq * (D + 8), Hq * (D + 8),
                                                                                     D + 8)
    assert (values["dk_stride_b"], values["dk_stride_s"], values["dk_stride_h"]) == (Sk * Hkv * D, Hkv * D, D)
    assert (values["lse_stride_b"], values["lse_stride_h"]) == (Hq * (Sq + 3), Sq + 3)
    assert values["scale"] == 0.25 and (values["window_left"], values["window_right"], values["softcap"]) == (-1, -1, 0)
    assert {"bwd_stats", "dq_accum"}.isdisjoint(values)        # workspaces are the runtime's
    assert set(values) == dev.bundle().kernel_set("b_none").settable


def test_inputs_a_set_streams_in_vectors_are_copied_when_their_rows_are_not(fake_sim):
    """A set whose main kernel copies q and dout rows as 16-byte vectors (sm_90's, the manifest's `divisible` rules on
    their strides) gets fresh contiguous copies of those with other strides; the others and aligned ones as given."""
    fake, dev, launched = fake_sim
    B, Sq, Sk, H, D = 1, 4, 5, 2, 96
    q = f16(B, Sq, H, D + 4)[..., :D]                                # rows 100 elements apart: not whole vectors
    dout = f16(B, Sq, H, D + 4)[..., :D]
    k, v, out, lse = f16(B, Sk, H, D), f16(B, Sk, H, D + 4)[..., :D], f16(B, Sq, H, D), f32(B, H, Sq)
    tessera.flash_attn_bwd(q, k, v, out, dout, lse, causal=True, causal_align="top_left", device=dev)
    name, values = launched[-1]
    assert name == "b_tl_rows"
    for t in ("q", "do"):
        assert (values[f"{t}_stride_b"], values[f"{t}_stride_s"], values[f"{t}_stride_h"]) == (Sq * H * D, H * D, D)
    assert (values["v_stride_s"], values["v_stride_h"]) == (H * (D + 4), D + 4)   # not streamed: as given
    aligned = f16(B, Sq, H, D + 8)[..., :D]
    tessera.flash_attn_bwd(aligned, k, v, out, aligned, lse, causal=True, causal_align="top_left", device=dev)
    assert launched[-1][1]["q_stride_s"] == H * (D + 8) and launched[-1][1]["do_stride_h"] == D + 8
    # The runtime itself refuses such strides, naming the argument and the rule.
    kernel_set = dev.bundle().kernel_set("b_tl_rows")
    with pytest.raises(tessera.TesseraError, match=r"kernel b_tl_rows_main: 'q_stride_s' = 132 must be a multiple "
                                                   r"of 8 = 8"):
        kernel_set.launch(None, **dict(launched[-1][1], q_stride_s=132))


def test_kernel_set_choice_matches_exactly_and_prefers_fewest_features(fake_sim):
    fake, dev, launched = fake_sim
    for options, expected in (({"causal": True}, "b_br_plain"),
                              ({"causal": True, "window": (3, 0)}, "b_br_window"),
                              ({"causal": True, "softcap": 5.0}, "b_br"),
                              ({"causal": True, "window": (3, 0), "softcap": 5.0}, "b_br"),
                              ({}, "b_none"), ({"deterministic": True}, "b_none_det")):
        tessera.flash_attn_bwd(*bwd_args(), **options, device=dev)
        assert launched[-1][0] == expected, options


def test_missing_variants_name_the_directive_that_adds_them(fake_sim):
    fake, dev, launched = fake_sim
    directive = (r"this directive compiles one: tessera.flash_attn_bwd @fa_bwd_f16_d64_tl {dtype = f16, head_dim = 64, "
                 r"mask = #tessera.mask<causal_top_left>, sliding_window, softcap}; no tessera-compile to build it "
                 r"on demand")
    with pytest.raises(tessera.KernelNotFoundError, match=r"has no flash_attn_bwd kernel set with dtype=f16 "
                                                          r"head_dim=64 mask=causal_top_left varlen=False "
                                                          r"deterministic=False \(flash_attn_bwd kernel sets: b_none, "
                                                          r"b_none_det, b_br, .*\); " + directive):
        tessera.flash_attn_bwd(*bwd_args(), causal=True, causal_align="top_left", device=dev)
    with pytest.raises(tessera.KernelNotFoundError, match=r"head_dim=32 mask=none varlen=False deterministic=True "
                                                          r".*@fa_bwd_f16_d32_none_det \{dtype = f16, head_dim = 32, "
                                                          r"mask = #tessera.mask<none>, sliding_window, softcap, "
                                                          r"deterministic\}"):
        tessera.flash_attn_bwd(*bwd_args(D=32), deterministic=True, device=dev)
    with pytest.raises(tessera.KernelNotFoundError, match=r"mask=causal_bottom_right varlen=True deterministic=True "
                                                          r".*@fa_bwd_f16_d64_br_varlen_det \{.*, sliding_window, "
                                                          r"softcap, varlen, deterministic\}"):
        tessera.flash_attn_varlen_bwd(*varlen_args(), causal=True, deterministic=True, device=dev)
    assert fake.launches() == []


@support.requires_ml_dtypes
def test_missing_features_are_named(fake_sim):
    fake, dev, launched = fake_sim
    args = [x.astype(support.ml_dtypes.bfloat16) if x.dtype == np.float16 else x for x in bwd_args(D=128)]
    tessera.flash_attn_bwd(*args, causal=True, causal_align="top_left", window=(2, 0), device=dev)
    assert launched[-1][0] == "b_bf16_tl"
    with pytest.raises(tessera.KernelNotFoundError, match=r"dtype=bf16 head_dim=128 mask=causal_top_left varlen=False "
                                                          r"deterministic=False softcap \(flash_attn_bwd kernel sets"):
        tessera.flash_attn_bwd(*args, causal=True, causal_align="top_left", softcap=1.0, device=dev)


def test_varlen_launch_arguments(fake_sim):
    fake, dev, launched = fake_sim
    args = varlen_args(cu_q=(0, 3, 3, 7), cu_k=(0, 4, 9, 9), max_q=4, max_k=5)
    dq, dk, dv = tessera.flash_attn_varlen_bwd(*args, causal=True, device=dev)
    assert dq.shape == (7, 2, 64) and dk.shape == dv.shape == (9, 1, 64)
    assert (dq == 0).all() and (dk == 0).all()   # new varlen gradients start at zero (the fake writes nothing)
    name, values = launched[-1]
    assert name == "b_br_varlen"
    assert (values["B"], values["Sq"], values["Sk"], values["Hq"], values["Hkv"]) == (3, 4, 5, 2, 1)
    assert (values["total_q"], values["total_k"]) == (7, 9)
    assert (values["q_stride_b"], values["q_stride_s"], values["q_stride_h"]) == (0, 128, 64)
    assert (values["dk_stride_b"], values["dk_stride_s"], values["dk_stride_h"]) == (0, 64, 64)
    assert (values["lse_stride_b"], values["lse_stride_h"]) == (0, 7)
    tessera.flash_attn_varlen_bwd(*args, causal=True, causal_align="top_left", deterministic=True, device=dev)
    assert launched[-1][0] == "b_tl_varlen_det"


def test_empty_sizes_launch_nothing_and_give_zero_gradients(fake_sim):
    """Sq = 0, Sk = 0, B = 0, Hq = 0 and varlen without query or key rows launch nothing: dk, dv (dq) are zeros,
    given gradients are zero-filled."""
    fake, dev, launched = fake_sim
    dq, dk, dv = tessera.flash_attn_bwd(*bwd_args(Sq=0), device=dev)
    assert dq.shape == (1, 0, 2, 64) and dk.shape == (1, 5, 2, 64) and (dk == 0).all() and (dv == 0).all()
    given = [np.full(s, np.nan, np.float16) for s in ((1, 4, 2, 64), (1, 0, 2, 64), (1, 0, 2, 64))]
    got = tessera.flash_attn_bwd(*bwd_args(Sk=0), dq=given[0], dk=given[1], dv=given[2], device=dev)
    assert all(g is x for g, x in zip(got, given)) and (given[0] == 0).all()
    assert all((g == 0).all() and g.shape == s for g, s in zip(tessera.flash_attn_bwd(*bwd_args(Hq=0), device=dev),
                                                                ((1, 4, 0, 64), (1, 5, 2, 64), (1, 5, 2, 64))))
    assert [g.shape for g in tessera.flash_attn_bwd(*bwd_args(B=0), device=dev)] == [(0, 4, 2, 64), (0, 5, 2, 64),
                                                                                      (0, 5, 2, 64)]
    dq, dk, dv = tessera.flash_attn_varlen_bwd(*varlen_args(total_q=0, cu_q=(0, 0, 0), max_q=0), causal=True,
                                               device=dev)
    assert dq.shape == (0, 2, 64) and (dk == 0).all() and (dv == 0).all()
    dq, dk, dv = tessera.flash_attn_varlen_bwd(*varlen_args(total_k=0, cu_k=(0, 0, 0), max_k=0), causal=True,
                                               device=dev)
    assert (dq == 0).all() and dk.shape == (0, 1, 64)
    assert fake.launches() == [] and launched == []
    with pytest.raises(tessera.KernelNotFoundError, match="head_dim=32"):   # the set must exist all the same
        tessera.flash_attn_bwd(*bwd_args(Sq=0, D=32), device=dev)


def test_kernel_set_choice_is_remembered_per_bundle(fake_sim, monkeypatch):
    fake, dev, launched = fake_sim
    scans, find = [], _attention_bwd.find_kernel_set
    monkeypatch.setattr(_attention_bwd, "find_kernel_set",
                        lambda bundle, p, deterministic: scans.append(p) or find(bundle, p, deterministic))
    for causal in (False, False, True, True, False):
        tessera.flash_attn_bwd(*bwd_args(), causal=causal, device=dev)
    assert len(scans) == 2 and [name for name, _ in launched] == ["b_none", "b_none", "b_br_plain", "b_br_plain",
                                                                      "b_none"]
    for _ in range(2):
        with pytest.raises(tessera.KernelNotFoundError):
            tessera.flash_attn_bwd(*bwd_args(D=32), device=dev)
    assert len(scans) == 4


def test_directive_for_every_variant():
    from tessera import _attention
    p = _attention.Plan("t", True, "bf16", 256, 1, 1, 1, 1, 1, "causal_top_left", 1.0, (-1, -1), 0.0, True, (), ())
    assert _attention_bwd.directive_for(_attention_bwd.variant(p, True), _attention_bwd._needed(p)) == (
        "tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl_varlen_det {dtype = bf16, head_dim = 256, "
        "mask = #tessera.mask<causal_top_left>, sliding_window, softcap, varlen, deterministic}")
    p = p._replace(alibi=True, chunk=64, varlen=False)
    assert _attention_bwd.directive_for(_attention_bwd.variant(p, False), _attention_bwd._needed(p)) == (
        "tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl_alibi_chunk {dtype = bf16, head_dim = 256, "
        "mask = #tessera.mask<causal_top_left>, sliding_window, softcap, alibi, attention_chunk}")
    p = p._replace(alibi=False, chunk=0, dropout_p=0.1)
    assert _attention_bwd.directive_for(_attention_bwd.variant(p, True), _attention_bwd._needed(p)) == (
        "tessera.flash_attn_bwd @fa_bwd_bf16_d256_tl_drop_det {dtype = bf16, head_dim = 256, "
        "mask = #tessera.mask<causal_top_left>, sliding_window, softcap, dropout, deterministic}")


# ---- The reference ------------------------------------------------------------------------------------------------
def numerical_gradients(q, k, v, do, eps=1e-6, **options):
    """Central differences of sum(O * do) in float64: the definition the backward reference must match."""
    def loss():
        return float((testing.attention_reference(q, k, v, **options).o * do).sum())
    grads = []
    for x in (q, k, v):
        g = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            saved = x[index]
            x[index] = saved + eps
            plus = loss()
            x[index] = saved - eps
            g[index] = (plus - loss()) / (2 * eps)
            x[index] = saved
        grads.append(g)
    return grads


@pytest.mark.parametrize("options", [
    {}, {"causal": True}, {"causal": True, "causal_align": "top_left", "window": (1, -1)},
    {"window": (1, 1), "softcap": 0.7}, {"causal": True, "window": (0, 0)}, {"softcap": 2.0, "scale": 0.9},
    {"alibi_slopes": np.array([0.3, 0.9]), "softcap": 0.8}, {"causal": True, "alibi_slopes": np.array([[0.5], [0.2]])},
    {"attention_chunk": 2}, {"causal": True, "causal_align": "top_left", "attention_chunk": 3},
    {"dropout": (7, 0.4)}, {"causal": True, "softcap": 0.9, "dropout": ((1 << 63) + 5, 0.6)}])
@pytest.mark.parametrize("Sq, Sk, Hq, Hkv", [(3, 4, 2, 1), (5, 3, 3, 3), (1, 4, 2, 2), (4, 0, 2, 1)])
def test_backward_reference_matches_central_differences(options, Sq, Sk, Hq, Hkv):
    slopes = options.get("alibi_slopes")
    if slopes is not None:   # a slope per head (Hq,), or per batch item and head (2, Hq)
        options = dict(options, alibi_slopes=np.resize(slopes, slopes.shape[:-1] + (Hq,)))
    rng = np.random.default_rng()
    q, do = rng.standard_normal((2, Sq, Hq, 4)), rng.standard_normal((2, Sq, Hq, 4))
    k, v = rng.standard_normal((2, Sk, Hkv, 4)), rng.standard_normal((2, Sk, Hkv, 4))
    ref = testing.attention_backward_reference(q, k, v, do, **options)
    for got, want in zip(ref[:3], numerical_gradients(q, k, v, do, **options)):
        np.testing.assert_allclose(got, want, atol=1e-7, rtol=1e-6)


def test_backward_reference_varlen_and_the_same_precision_baseline():
    rng = np.random.default_rng()
    cq, ck = [0, 3, 3, 9], [0, 5, 8, 8]                                   # an empty query and an empty key sequence
    q, do = (rng.standard_normal((9, 4, 32)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((8, 2, 32)).astype(np.float16) for _ in range(2))
    ref = testing.attention_backward_reference_varlen(q, k, v, do, cq, ck, causal=True)
    for b in range(3):
        rows_q, rows_k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        one = testing.attention_backward_reference(q[None, rows_q], k[None, rows_k], v[None, rows_k],
                                                   do[None, rows_q], causal=True)
        assert (ref.dq[rows_q] == one.dq[0]).all() and (ref.dk[rows_k] == one.dk[0]).all()
    assert (ref.dk[5:8] == 0).all() and (ref.dk_abs[5:8] == 0).all()     # keys of the empty query sequence
    assert (ref.dq[3:9] == 0).all()                                       # queries of the empty key sequence
    same = testing.attention_backward_reference_varlen(q, k, v, do, cq, ck, causal=True, precision="same")
    assert all((g == g.astype(np.float16)).all() for g in same[:3])       # rounded to f16
    assert testing.check_attention_backward(same[:3], ref, same).ok
    assert testing.check_attention_backward(ref[:3], ref, same).ok
    assert 0 < testing.check_attention_backward(same[:3], ref, same).dq.reference_error < 1e-2


def test_check_attention_backward_catches_what_it_must():
    rng = np.random.default_rng()
    q, do = (rng.standard_normal((1, 6, 2, 32)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, 3, 1, 32)).astype(np.float16) for _ in range(2))
    options = dict(causal=True)                                            # rows 0-2 see no key
    ref = testing.attention_backward_reference(q, k, v, do, **options)
    same = testing.attention_backward_reference(q, k, v, do, **options, precision="same")
    good = [g.astype(np.float16) for g in same[:3]]
    assert testing.check_attention_backward(good, ref, same).ok
    for name, index, value, what in (("dq", (0, 4, 1, 7), np.nan, "NaN"), ("dk", (0, 1, 0, 0), np.nan, "NaN"),
                                     ("dq", (0, 1, 0, 0), 1e-4, "not exactly 0"), ("dv", (0, 2, 0, 5), 0.5, "dv: ")):
        bad = [g.copy() for g in good]
        bad["dq dk dv".split().index(name)][index] = value
        result = testing.check_attention_backward(bad, ref, same)
        assert not result.ok and what in str(result) and str(result).startswith(name), (name, str(result))

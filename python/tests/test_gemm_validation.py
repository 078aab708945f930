"""tessera.gemm argument checks, all made before any device is touched, and kernel dispatch seen through the fake sim plugin (no GPU)."""
import pytest

import support
from support import np, torch
import tessera

# A sim spec whose plugin never loads (see the fixture): reaching the device would raise
# BackendUnavailableError, so an InputError proves the check came first.
NO_DEVICE = "sim:validation-only"


@pytest.fixture(autouse=True)
def no_plugin(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(tmp_path / "no-plugin.so"))


def f16(*shape):
    return np.ones(shape, np.float16)


@pytest.mark.parametrize("a, b, kwargs, message", [
    (f16(3, 4), np.ones((4, 5), np.float32), {}, r"b has dtype float32; supported: float16, bfloat16"),
    (np.ones((3, 4)), f16(4, 5), {}, r"a has dtype float64; supported: float16, bfloat16"),
    (np.ones((3, 4), ">f2"), f16(4, 5), {}, r"a has dtype >f2"),
    (f16(3, 4, 1), f16(4, 5), {}, r"a must be 2-D, got shape \(3, 4, 1\)"),
    (f16(3, 4), f16(4), {}, r"b must be 2-D, got shape \(4,\)"),
    (f16(3, 4), f16(5, 6), {}, r"a is \(M, K\) = \(3, 4\) and b is \(K, N\) = \(5, 6\): K differs"),
    (f16(3, 8)[:, ::2], f16(4, 5), {}, r"a has shape \(3, 4\) and strides \(8, 2\) .*unit stride on the last dim"),
    (f16(4, 10)[:, ::2], f16(5, 5), {}, r"a has shape \(4, 5\) and strides \(10, 2\)"),
    (f16(3, 4), f16(4, 10)[:, ::2], {}, r"b has shape \(4, 5\) and strides \(10, 2\) .*or the transpose"),
    (f16(3, 4), np.broadcast_to(f16(1, 5), (4, 5)), {}, r"b has shape \(4, 5\) and strides \(0, 1\)"),
    (f16(3, 4), f16(4, 5), {"out_dtype": "bf16"}, r"output dtype bfloat16 is not supported for float16 inputs "
                                                  r"\(supported: float16, float32\)"),
    (f16(3, 4), f16(4, 5), {"out_dtype": np.float64}, r"output dtype float64 is not supported"),
    (f16(3, 4), f16(4, 5), {"out_dtype": "int8"}, r"output dtype int8 is not supported"),
    (f16(3, 4), f16(4, 5), {"out_dtype": 3}, r"out_dtype 3 is not a dtype"),
    (f16(3, 4), f16(4, 5), {"out": np.zeros((3, 5), np.float32), "out_dtype": np.float16},
     r"out has dtype float32 but out_dtype is float16"),
    (f16(3, 4), f16(4, 5), {"out": np.zeros((5, 3), np.float16)}, r"out has shape \(5, 3\), expected \(M, N\) = \(3, 5\)"),
    (f16(3, 4), f16(4, 5), {"out": np.zeros((3, 5), np.float16).T.copy().T}, r"out has shape \(3, 5\) and strides \(1, 3\)"),
    (f16(3, 4), f16(4, 5), {"out": np.zeros((3, 5), np.float64)}, r"output dtype float64 is not supported"),
    ([[1.0]], f16(4, 5), {}, r"a is a builtins.list; expected a torch tensor or a numpy array"),
])
def test_rejected_before_the_device(a, b, kwargs, message):
    with pytest.raises(tessera.InputError, match=message) as e:
        tessera.gemm(a, b, device=NO_DEVICE, **kwargs)
    assert isinstance(e.value, ValueError) and str(e.value).startswith("tessera.gemm: ")


def test_numpy_needs_a_sim_device():
    with pytest.raises(tessera.InputError, match=r"numpy arrays run on the simulator: pass device='sim:<target>'"):
        tessera.gemm(f16(3, 4), f16(4, 5))
    with pytest.raises(tessera.InputError, match=r"numpy arrays run on the simulator"):
        tessera.gemm(f16(3, 4), f16(4, 5), device="cuda")


def test_read_only_out_is_rejected():
    out = np.zeros((3, 5), np.float16)
    out.flags.writeable = False
    with pytest.raises(tessera.InputError, match="out is a read-only numpy array"):
        tessera.gemm(f16(3, 4), f16(4, 5), out=out, device=NO_DEVICE)


def test_valid_arguments_reach_the_device():
    # The counterpart of the tests above: the same call with good arguments fails only at the plugin.
    with pytest.raises(tessera.BackendUnavailableError, match="no-plugin.so"):
        tessera.gemm(f16(3, 4), f16(5, 4).T, out_dtype="float32", device=NO_DEVICE)


@support.requires_torch
def test_torch_tensors_checked_before_the_device():
    a, b = torch.ones(3, 4, dtype=torch.float16), torch.ones(4, 5, dtype=torch.bfloat16)
    with pytest.raises(tessera.InputError, match="a and b must have the same dtype, got float16 and bfloat16"):
        tessera.gemm(a, b)
    with pytest.raises(tessera.InputError, match=r"b has shape \(4, 5\) and strides \(10, 2\)"):
        tessera.gemm(a, torch.ones(4, 10, dtype=torch.float16)[:, ::2])
    with pytest.raises(tessera.InputError, match="torch tensors and numpy arrays mixed"):
        tessera.gemm(a, f16(4, 5))
    with pytest.raises(tessera.InputError, match="tensors are on cpu; torch tensors must be on a CUDA"):
        tessera.gemm(a, torch.ones(4, 5, dtype=torch.float16))


# ---- Dispatch through the fake sim plugin: which kernel, which sizes and leading dimensions ----
FAKE = support.fake_driver_path()


@pytest.fixture
def fake_sim(monkeypatch, tmp_path):
    if FAKE is None or not FAKE.is_file():
        pytest.skip("fake driver not built (ninja -C build tessera_fake_driver)")
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(FAKE))
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path))
    support.write_gemm_bundle(tmp_path / "gfx942", "gfx942")
    fake = support.FakeDriver(FAKE)
    return fake, tessera.Device("sim:gfx942")   # not the cached device: this one is the fake


def test_dispatch_contiguous_and_strided(fake_sim):
    fake, dev = fake_sim
    a = np.ones((17, 64), np.float16)[:, :40]          # lda 64
    b = np.ones((40, 33), np.float16)
    out = np.full((17, 48), np.nan, np.float32)[:, :33]   # ldc 48
    out[:, :] = 7.0
    result = tessera.gemm(a, b, out=out, device=dev)
    assert result is out
    (launch,) = fake.launches()
    assert (launch.api, launch.entry) == (b"sim", b"gemm_f16_f32_nn")
    assert tuple(launch.grid) == (1, 1, 1) and launch.stream is None
    assert fake.gemm_args(launch)[3:] == (17, 33, 40, 64, 33, 48)
    # The fake computes nothing: c comes back as it went in, rows and the bytes between them.
    assert (out == 7.0).all() and np.isnan(out.base[:, 33:]).all()


def test_dispatch_transposed_b_uses_the_nt_kernel(fake_sim):
    fake, dev = fake_sim
    bt = np.ones((33, 40), np.float16)
    c = tessera.gemm(np.ones((17, 40), np.float16), bt.T, device=dev)
    assert c.shape == (17, 33) and c.dtype == np.float16
    (launch,) = fake.launches()
    assert launch.entry == b"gemm_f16_f16_nt"
    assert fake.gemm_args(launch)[3:] == (17, 33, 40, 40, 40, 33)


def test_dispatch_sizes_one(fake_sim):
    fake, dev = fake_sim
    # A (1, K) row and a (K, 1) column: their strides do not matter.
    tessera.gemm(np.ones((1, 64), np.float16)[:, ::1], np.ones((64, 3), np.float16)[:, :1], device=dev)
    assert fake.gemm_args(fake.launches()[0])[3:] == (1, 1, 64, 64, 3, 1)


def test_empty_sizes_launch_nothing(fake_sim):
    fake, dev = fake_sim
    assert tessera.gemm(f16(0, 4), f16(4, 5), device=dev).shape == (0, 5)
    zero_k = tessera.gemm(f16(3, 0), f16(0, 5), out_dtype=np.float32, device=dev)
    assert zero_k.dtype == np.float32 and (zero_k == 0).all()
    assert fake.launches() == []


@support.requires_ml_dtypes
def test_dispatch_bf16(fake_sim):
    fake, dev = fake_sim
    bf16 = support.ml_dtypes.bfloat16
    c = tessera.gemm(np.ones((5, 8), bf16), np.ones((8, 3), bf16), device=dev)
    assert c.dtype == bf16
    assert fake.launches()[0].entry == b"gemm_bf16_bf16_nn"
    c = tessera.gemm(np.ones((5, 8), bf16), np.ones((3, 8), bf16).T, out_dtype="float32", device=dev)
    assert fake.launches()[1].entry == b"gemm_bf16_f32_nt" and c.dtype == np.float32


def test_missing_kernel_names_the_variant(fake_sim, tmp_path):
    fake, dev = fake_sim
    manifest = support.write_gemm_bundle(tmp_path / "gfx942", "gfx942")
    manifest["kernels"] = manifest["kernels"][:1]
    (tmp_path / "gfx942" / "manifest.json").write_text(__import__("json").dumps(manifest))
    with pytest.raises(tessera.KernelNotFoundError, match=r"\(gfx942\) has no wmma_gemm kernel with dtype=f16 "
                                                          r"out_type=f32 transpose_a=False transpose_b=True "
                                                          r"\(kernels: gemm_f16_f16_nn\)"):
        tessera.gemm(f16(2, 4), f16(3, 4).T, out_dtype="f32", device=dev)

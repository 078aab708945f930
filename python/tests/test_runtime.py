"""Runtime bindings without a GPU: library loading, status codes, error translation, device specs, bundle discovery, and (with the fake driver of a build tree) every runtime error class."""
import ctypes
import json

import numpy as np
import pytest

import support
import tessera
from tessera import _errors, _lib, _paths
from tessera._device import parse_device


def test_runtime_library_is_found_and_loaded():
    path = tessera.runtime_library()
    assert path.name == "libtessera_runtime.so" and path.is_file()


def test_tessera_home_is_the_only_root_when_set(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_HOME", str(tmp_path))
    assert _paths.homes() == [tmp_path]
    with pytest.raises(tessera.LibraryNotFoundError, match=r"libtessera_runtime.so not found \(tried .*lib/"):
        _paths.runtime_library()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libtessera_runtime.so").write_bytes(b"")
    assert _paths.runtime_library() == tmp_path / "lib" / "libtessera_runtime.so"


def test_python_status_classes_mirror_the_runtime():
    names = {1: "INVALID_ARGUMENT", 2: "BACKEND_UNAVAILABLE", 3: "DRIVER", 4: "TARGET_MISMATCH", 5: "MANIFEST",
             6: "CODE_OBJECT_MISSING", 7: "CODE_OBJECT_CORRUPT", 8: "KERNEL_NOT_FOUND", 9: "ARGUMENT",
             10: "INTERNAL"}
    assert sorted(_errors.STATUS_ERRORS) == sorted(names)
    for status, name in names.items():
        assert _lib.status_name(status) == "TESSERA_ERROR_" + name
        cls = _errors.STATUS_ERRORS[status]
        assert "".join(w.capitalize() for w in name.split("_")) + "Error" == cls.__name__
    assert _lib.status_name(0) == "TESSERA_SUCCESS"
    assert _lib.status_name(99) == "TESSERA_UNKNOWN_STATUS"


def test_runtime_errors_carry_the_runtime_message():
    with pytest.raises(tessera.InvalidArgumentError, match=r"^unknown backend 'bogus' \(expected cuda, hip or sim") as e:
        tessera.Device("bogus")
    assert e.value.status == 1 and isinstance(e.value, tessera.TesseraError)
    with pytest.raises(tessera.InvalidArgumentError, match="device ordinal -1 is negative"):
        tessera.Device("cuda", -1)
    with pytest.raises(tessera.InvalidArgumentError, match=r"backend cuda takes no options \('cuda:x'\)"):
        tessera.Device("cuda:x")
    # An unknown status still raises, as the base class with the status kept.
    err = _errors.error_for_status(42, "something new")
    assert type(err) is tessera.TesseraError and err.status == 42 and str(err) == "something new"


def test_missing_driver_and_plugin_are_backend_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_CUDA_LIBRARY", str(tmp_path / "no-libcuda.so"))
    with pytest.raises(tessera.BackendUnavailableError, match=r"CUDA driver unavailable: cannot load .*no-libcuda.so "
                                                               r"\(from TESSERA_CUDA_LIBRARY\)"):
        tessera.Device("cuda")
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(tmp_path / "no-plugin.so"))
    with pytest.raises(tessera.BackendUnavailableError, match=r"sim backend plugin unavailable: .*no-plugin.so"):
        tessera.Device("sim:gfx942")


def test_device_specs():
    assert parse_device("cuda") == ("cuda", 0)
    assert parse_device("cuda:3") == ("cuda", 3)
    assert parse_device("hip:1") == ("hip", 1)
    assert parse_device("sim") == ("sim", 0)
    assert parse_device("sim:gfx942") == ("sim:gfx942", 0)
    with pytest.raises(tessera.InputError, match=r"device 'cuda:x': expected 'cuda' or 'cuda:<ordinal>'"):
        parse_device("cuda:x")


def _bundle_tree(root, targets):
    for target in targets:
        support.write_gemm_bundle(root / target, target)


def test_bundle_discovery_and_nvidia_compatibility(monkeypatch, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    _bundle_tree(first, ["gfx942", "sm_80"])
    _bundle_tree(second, ["gfx942", "gfx950", "sm_90", "sm_90a", "sm_86"])
    (second / "not-a-bundle").mkdir()
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", f"{first}:{second}")
    monkeypatch.setenv("TESSERA_HOME", str(tmp_path / "home"))   # no other bundles
    assert tessera.bundle_dirs() == [first, second, tmp_path / "home" / "bundles"]
    assert tessera.find_bundle("gfx942") == first / "gfx942"       # earlier folder wins
    assert tessera.find_bundle("gfx950") == second / "gfx950"
    assert tessera.find_bundle("sm_89") == second / "sm_86"        # the newest older PTX (JIT-compiled forward)
    assert tessera.find_bundle("sm_85") == first / "sm_80"
    assert tessera.find_bundle("sm_90") == second / "sm_90a"       # arch-specific (wgmma/TMA) first
    assert tessera.find_bundle("sm_90", simulated=True) == second / "sm_90"   # the simulator has no wgmma
    found = tessera.available_targets()
    assert found["gfx942"] == first / "gfx942" and "not-a-bundle" not in found
    with pytest.raises(tessera.BundleNotFoundError, match=r"no bundle for target gfx1100 \(bundles found for: "
                                                          r"gfx942, gfx950, sm_80, sm_86, sm_90, sm_90a"):
        tessera.find_bundle("gfx1100")
    # AMD code objects are chip-exact; sm_90a runs only on sm_90.
    assert _paths.compatible_targets("gfx942", ["gfx940"]) == ["gfx942"]
    assert _paths.compatible_targets("sm_100", ["sm_90a", "sm_90", "sm_80"]) == ["sm_100a", "sm_100", "sm_90", "sm_80"]


# ---- With the fake driver (unittests/Runtime/libtessera_fake_driver.so; a build tree only) -------
FAKE = support.fake_driver_path()
requires_fake = pytest.mark.skipif(FAKE is None or not FAKE.is_file(),
                                   reason="fake driver not built (ninja -C build tessera_fake_driver)")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("TESSERA_CUDA_LIBRARY", str(FAKE))
    monkeypatch.setenv("TESSERA_SIM_PLUGIN", str(FAKE))
    return support.FakeDriver(FAKE)


@requires_fake
def test_fake_cuda_device_and_target_mismatch(fake, tmp_path):
    dev = tessera.Device("cuda")
    assert (dev.backend, dev.arch) == ("cuda", "sm_90")
    support.write_gemm_bundle(tmp_path / "gfx942", "gfx942")
    with pytest.raises(tessera.TargetMismatchError, match=r"^bundle target gfx942 does not match device sm_90 \(.*gfx942\)"):
        dev.bundle(tmp_path / "gfx942")


@requires_fake
def test_fake_cuda_bundle_errors(fake, tmp_path):
    dev = tessera.Device("cuda")
    with pytest.raises(tessera.ManifestError, match="manifest.json"):
        dev.bundle(tmp_path)
    manifest = support.write_gemm_bundle(tmp_path / "sm_90", "sm_90")
    with pytest.raises(tessera.CodeObjectMissingError, match=r"code object .*gemm_f16_f16_nn.ptx cannot be read"):
        dev.bundle(tmp_path / "sm_90")
    for kernel in manifest["kernels"]:
        support.write_ptx(tmp_path / "sm_90", kernel)
    (tmp_path / "sm_90" / "gemm_bf16_f32_nt.ptx").write_text("garbage")
    with pytest.raises(tessera.CodeObjectCorruptError, match="gemm_bf16_f32_nt.ptx"):
        dev.bundle(tmp_path / "sm_90")
    support.write_ptx(tmp_path / "sm_90", manifest["kernels"][-1])
    bundle = dev.bundle(tmp_path / "sm_90")
    assert bundle.target == "sm_90" and len(bundle.kernels) == 8
    assert dev.bundle(tmp_path / "sm_90") is bundle   # cached per directory


@requires_fake
def test_fake_cuda_kernels_load_on_first_use(fake, tmp_path):
    """Loading a bundle and choosing kernels touch no driver; a kernel's first use loads it, once, and a JIT failure
    is raised there with its log."""
    manifest = support.write_gemm_bundle(tmp_path / "sm_90", "sm_90")
    for entry in manifest["kernels"]:
        support.write_ptx(tmp_path / "sm_90", entry)
    bundle = tessera.Device("cuda").bundle(tmp_path / "sm_90")
    kernel = bundle.find("wmma_gemm", dtype="f16", out_type="f32", transpose_b=True)
    assert kernel.name == "gemm_f16_f32_nt" and "gemm_f16_f16_nn" in bundle.kernels and len(bundle.kernels) == 8
    assert bundle.kernel("gemm_f16_f16_nn").args[0] == ("a", "ptr")
    assert fake.lib.fake_calls(b"cuModuleLoadDataEx") == 0
    values = dict(a=16, b=16, c=16, M=300, N=129, K=1, lda=1, ldb=1, ldc=129)
    assert kernel.grid(**values) == (2, 3, 1)
    kernel.launch(**values)
    assert fake.lib.fake_calls(b"cuModuleLoadDataEx") == 1 and len(fake.launches()) == 1
    fake.lib.fake_fail(b"cuModuleLoadDataEx", 218, 1)   # CUDA_ERROR_INVALID_PTX from now on
    for _ in range(2):   # not cached: each use tries again
        with pytest.raises(tessera.DriverError, match=r"^cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX .*\n"
                                                      r"JIT log: .*fake JIT failure$"):
            bundle.kernel("gemm_f16_f16_nn").launch(**values)
    assert fake.lib.fake_calls(b"cuModuleLoadDataEx") == 3 and len(fake.launches()) == 1


@requires_fake
def test_fake_driver_failure_names_the_call(fake):
    dev = tessera.Device("cuda")
    fake.lib.fake_fail(b"cuMemAlloc_v2", 2, 0)   # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(tessera.DriverError, match="^cuMemAlloc_v2 failed"):
        dev.malloc(256)


@requires_fake
def test_fake_kernel_lookup_and_argument_errors(fake, tmp_path):
    support.write_gemm_bundle(tmp_path / "gfx942", "gfx942")
    bundle = tessera.Device("sim:gfx942").bundle(tmp_path / "gfx942")
    with pytest.raises(tessera.KernelNotFoundError, match=r"has no kernel 'gemm' \(kernels: gemm_f16_f16_nn, "):
        bundle.kernel("gemm")
    kernel = bundle.kernel("gemm_f16_f32_nt")
    assert kernel.matches("wmma_gemm", dtype="f16", out_type="f32", transpose_a=False, transpose_b=True)
    assert not kernel.matches("wmma_gemm", dtype="f16", out_type="f32", transpose_b=False)
    assert json.loads(json.dumps(kernel.info))["entry"] == "gemm_f16_f32_nt"
    with pytest.raises(tessera.ArgumentError, match="argument 'a' of kernel gemm_f16_f32_nt"):
        kernel.launch(a=0)
    with pytest.raises(tessera.ArgumentError, match="alpha"):
        kernel.launch(alpha=1)
    with pytest.raises(tessera.ArgumentError, match="arguments not set: .*ldc"):
        kernel.launch(a=16, b=16, c=16, M=1, N=1, K=1)
    assert kernel.grid(a=16, b=16, c=16, M=300, N=129, K=1, lda=1, ldb=1, ldc=129) == (2, 3, 1)
    assert fake.launches() == []


def _copy_kernel_entry():
    """An sm_90a kernel with every argument type: a (f16, copied with TMA through a_tma), n (i32), scale (f32), M, lda."""
    args = [{"name": "a", "type": "ptr", "dtype": "f16", "role": "input"},
            {"name": "n", "type": "i32", "role": "param"},
            {"name": "scale", "type": "f32", "role": "scale"},
            {"name": "M", "type": "i64", "role": "size"},
            {"name": "lda", "type": "i64", "role": "stride"},
            {"name": "a_tma", "type": "tensor_map", "role": "tensor_map"}]
    return {"name": "copy", "entry": "copy", "directive": "copy", "code_object": "copy.ptx", "block": [128, 1, 1],
            "grid": [["ceil_div", "M", 64], 1, 1], "args": args,
            "tensor_maps": [{"arg": "a_tma", "tensor": "a", "dims": [64, "M"], "strides": ["lda"], "box": [64, 32],
                             "swizzle": "128B"}]}


def _launch_by_name(kernel, values):
    """What Kernel.launch did before tessera_args_set_all: one runtime setter per argument."""
    from tessera import _device
    args = _lib.call_handle("tessera_args_create", kernel._handle)
    try:
        for name, value in values.items():
            setter, ctype = _device._SETTERS[kernel._types[name]]
            _lib.call(setter, args, name.encode(), ctype(value))
        _lib.call("tessera_launch", kernel._handle, args, None)
    finally:
        _lib.library().tessera_args_destroy(args)


@requires_fake
def test_fake_launch_sets_every_argument_in_one_call(fake, monkeypatch, tmp_path):
    """Kernel.launch given every argument sets them with one tessera_args_set_all: the driver sees the bytes the
    by-name setters give (i32 and f32 in 4 bytes, f32 rounded, the tensor map encoded by the runtime), and a
    rejected value gets the setters' message. Other names go by name (test_fake_kernel_lookup_and_argument_errors)."""
    entry = _copy_kernel_entry()
    support.write_bundle(tmp_path / "sm_90a", "sm_90a", [entry])
    support.write_ptx(tmp_path / "sm_90a", entry)
    kernel = tessera.Device("cuda").bundle(tmp_path / "sm_90a").kernel("copy")
    values = dict(a=0x10000, n=-3, scale=0.1, M=300, lda=64)
    called, call = [], _lib.call
    monkeypatch.setattr(_lib, "call", lambda name, *args: called.append(name) or call(name, *args))
    kernel.launch(**values)
    assert [n for n in called if n.startswith("tessera_args_set")] == ["tessera_args_set_all"]
    _launch_by_name(kernel, values)
    fast, by_name = fake.launches()
    assert fast.args_size == by_name.args_size == 64 + 128
    assert bytes(fast.args) == bytes(by_name.args)
    got = support.unpack_args({"args": entry["args"][:5]}, fast.args)
    assert got == dict(values, scale=ctypes.c_float(0.1).value)
    assert support.struct.unpack_from("<Q", bytes(fast.args), 64)[0] == 0x10000   # the encoded map's address
    with pytest.raises(tessera.ArgumentError, match=r"^argument 'a' of kernel copy is a null pointer$"):
        kernel.launch(**dict(values, a=0))
    with pytest.raises(tessera.ArgumentError, match=r"^argument 'M' of kernel copy is a size and must not be "
                                                    r"negative \(got -1\)$"):
        kernel.launch(**dict(values, M=-1))
    assert len(fake.launches()) == 2


@requires_fake
def test_fake_tile_counter_is_the_runtimes(fake, monkeypatch, tmp_path):
    """A tile_counter argument is not the caller's: Kernel.launch sets the others in one tessera_args_set_all and the
    runtime passes the stream's counter (the same one on the next launch)."""
    entry = _copy_kernel_entry()
    entry["args"].append({"name": "tile_counter", "type": "ptr", "dtype": "i32", "role": "tile_counter"})
    support.write_bundle(tmp_path / "sm_90a", "sm_90a", [entry])
    support.write_ptx(tmp_path / "sm_90a", entry)
    kernel = tessera.Device("cuda").bundle(tmp_path / "sm_90a").kernel("copy")
    assert kernel.settable == {"a", "n", "scale", "M", "lda"}
    called, call = [], _lib.call
    monkeypatch.setattr(_lib, "call", lambda name, *args: called.append(name) or call(name, *args))
    for _ in range(2):
        kernel.launch(a=0x10000, n=1, scale=1.0, M=300, lda=64)
    assert [n for n in called if n.startswith("tessera_args_set")] == ["tessera_args_set_all"] * 2
    first, second = (support.struct.unpack_from("<Q", bytes(launch.args), 64 + 128)[0] for launch in fake.launches())
    assert first != 0 and first == second
    with pytest.raises(tessera.ArgumentError, match="is the tile counter the runtime passes at launch"):
        kernel.launch(a=0x10000, n=1, scale=1.0, M=300, lda=64, tile_counter=0x20000)


@requires_fake
def test_fake_gemm_kernel_choice_is_remembered(fake, monkeypatch, tmp_path):
    """tessera.gemm scans the bundle once per variant; a missing variant raises on every call."""
    from tessera import _gemm
    support.write_bundle(tmp_path / "gfx942", "gfx942", [support.gemm_kernel_entry("f16", o, False, "hsaco")
                                                         for o in ("f16", "f32")])
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path))
    dev = tessera.Device("sim:gfx942")
    scans, find = [], _gemm._find
    monkeypatch.setattr(_gemm, "_find", lambda bundle, attrs: scans.append(attrs) or find(bundle, attrs))
    a = np.ones((3, 4), np.float16)
    for out_dtype in (None, None, "f32", None, "f32"):
        tessera.gemm(a, a.T.copy(), out_dtype, device=dev)
    assert len(scans) == 2
    assert [launch.entry for launch in fake.launches()] == [b"gemm_f16_f16_nn"] * 2 + [b"gemm_f16_f32_nn"] + \
        [b"gemm_f16_f16_nn", b"gemm_f16_f32_nn"]
    for _ in range(2):
        with pytest.raises(tessera.KernelNotFoundError, match="has no wmma_gemm kernel with dtype=f16 out_type=f16 "
                                                              "transpose_a=False transpose_b=True"):
            tessera.gemm(a, a.T, device=dev)
    assert len(scans) == 4


@requires_fake
def test_fake_default_bundle_is_searched_once_per_search_path(fake, monkeypatch, tmp_path):
    support.write_gemm_bundle(tmp_path / "one" / "gfx942", "gfx942")
    support.write_gemm_bundle(tmp_path / "two" / "gfx942", "gfx942")
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path / "one"))
    dev = tessera.Device("sim:gfx942")
    searches, find = [], _paths.find_bundle
    monkeypatch.setattr(_paths, "find_bundle", lambda *args, **kw: searches.append(args) or find(*args, **kw))
    first = dev.bundle()
    assert dev.bundle() is first and first.directory == tmp_path / "one" / "gfx942" and len(searches) == 1
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path / "two"))
    assert dev.bundle().directory == tmp_path / "two" / "gfx942" and len(searches) == 2
    monkeypatch.setenv("TESSERA_BUNDLE_PATH", str(tmp_path / "one"))
    assert dev.bundle() is first and len(searches) == 2


def test_default_bundles_have_every_gemm_variant():
    """The bundles found (dist/ or a build tree) hold the eight wmma_gemm kernels tessera.gemm dispatches to."""
    found = tessera.available_targets()
    if not found:
        pytest.skip("no bundles in the search path (scripts/make_dist.sh builds them)")
    for target, directory in found.items():
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["target"] == target
        variants = {(k["attributes"]["dtype"], k["attributes"]["out_type"], k["attributes"].get("transpose_b", False))
                    for k in manifest["kernels"] if k["directive"] == "wmma_gemm"}
        assert variants >= {(d, o, t) for d in support.DTYPES for o in (d, "f32") for t in (False, True)}, target

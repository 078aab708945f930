"""GEMM on the simulator (numpy arrays, device='sim:<target>') against float64, tail shapes; skipped when the sim plugin is not built."""
import os

import pytest

import support
from support import np
import tessera

M, N, K = 17, 33, 40   # no dimension is a tile multiple


@pytest.fixture(scope="module", autouse=True)
def default_bundles(tmp_path_factory):
    """Bundles missing from the search path, or without kernel IR (dist/ leaves it out), are compiled from
    examples/gemm.mlir with a build tree's tessera-compile."""
    missing = [t for t in support.SIM_TARGETS if not support.simulatable(t)]
    try:
        if missing:
            tessera.device("sim:gfx942")
    except tessera.BackendUnavailableError:
        missing = []   # the tests skip
    folder = tmp_path_factory.mktemp("bundles")
    if not missing or not support.compile_default_bundles(missing, folder):
        yield
        return
    saved = os.environ.get("TESSERA_BUNDLE_PATH")
    os.environ["TESSERA_BUNDLE_PATH"] = os.pathsep.join(filter(None, [str(folder), saved]))
    yield
    if saved is None:
        del os.environ["TESSERA_BUNDLE_PATH"]
    else:
        os.environ["TESSERA_BUNDLE_PATH"] = saved


@pytest.fixture(params=support.SIM_TARGETS)
def sim(request):
    target = request.param
    dev = support.sim_device(target)
    if target.startswith("sm_"):
        try:
            tessera.find_bundle(target)
        except tessera.BundleNotFoundError:
            pytest.skip(f"no {target} bundle (the NVIDIA target is optional in dist/)")
    return dev


def _random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(support.numpy_dtype(dtype))


def _check(out, a, b, out_dtype):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = (a.astype(np.float32) @ b.astype(np.float32)).astype(support.numpy_dtype(out_dtype))
    return support.tolerance_report(out.astype(np.float64), a64 @ b64, same.astype(np.float64),
                                    np.abs(a64) @ np.abs(b64))


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("out_kind", ["same", "f32"])
@pytest.mark.parametrize("dtype", support.DTYPES)
def test_gemm_matches_float64(sim, dtype, out_kind, layout):
    if dtype == "bf16" and support.ml_dtypes is None:
        pytest.skip("bf16 numpy arrays need ml_dtypes (not installed)")
    out_dtype = dtype if out_kind == "same" else "f32"
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    a = _random(rng, (M, K), dtype)
    b = _random(rng, (N, K), dtype).T if layout == "nt" else _random(rng, (K, N), dtype)
    out = np.full((M, N), np.nan, support.numpy_dtype(out_dtype))   # poisoned: every element must be written
    assert tessera.gemm(a, b, out=out, device=sim) is out
    problem = _check(out, a, b, out_dtype)
    assert problem is None, f"{sim.arch} {dtype}->{out_dtype} {layout} seed {seed}: {problem}"


def test_leading_dimensions_and_untouched_gaps(sim):
    rng = np.random.default_rng()
    a = _random(rng, (M, 48), "f16")[:, :K]
    b = _random(rng, (K, 40), "f16")[:, :N]
    wide = np.full((M, 35), np.nan, np.float32)
    out = wide[:, :N]
    tessera.gemm(a, b, out=out, device=sim)
    assert _check(out, a, b, "f32") is None
    assert np.isnan(wide[:, N:]).all(), "the kernel wrote past N"


def test_second_call_with_new_inputs(sim):
    rng = np.random.default_rng()
    out = np.full((M, N), np.nan, np.float32)
    for _ in range(2):
        a, b = _random(rng, (M, K), "f16"), _random(rng, (K, N), "f16")
        tessera.gemm(a, b, out=out, device=sim)
        assert _check(out, a, b, "f32") is None

"""scripts/make_dist.sh's dist/ works where docs/gpu.md says it does: copied alone to another folder, its pytest suite
collects without an error and runs to the end (on a machine without a GPU its GPU tests skip with their reason), and
it carries what its tests read; its wheel installs offline and finds the runtime and the bundles inside itself.
Needs a build tree (the compiler makes the bundles); skipped inside a dist."""
import os
import shutil
import subprocess
import sys

import pytest

import support

MAKE_DIST = support.REPO / "scripts" / "make_dist.sh"
TARGET = "gfx1100"   # one target is enough to check the dist's layout; every target compiles in make_dist's CI run


@pytest.fixture(scope="module")
def copied_dist(tmp_path_factory):
    compiler = support.compiler_path()
    if not MAKE_DIST.is_file() or compiler is None:
        pytest.skip("needs a checkout with a build tree (scripts/make_dist.sh and tessera-compile)")
    built = tmp_path_factory.mktemp("built") / "dist"
    env = dict(os.environ, TESSERA_DIST_TARGETS=TARGET)
    r = subprocess.run(["bash", str(MAKE_DIST), str(compiler.parents[1]), str(built)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    copy = tmp_path_factory.mktemp("elsewhere") / "dist"
    shutil.copytree(built, copy, symlinks=True)
    shutil.rmtree(built)   # nothing may point back into the folder it was made in
    return copy


def _pytest_in(dist, *args):
    """pytest on the dist's own tests, from inside the dist, with no build tree or other dist in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    return subprocess.run([sys.executable, "-m", "pytest", str(dist / "python" / "tests"), "-p", "no:cacheprovider",
                           "-q", "-rs", *args], cwd=dist, env=env, capture_output=True, text=True, timeout=900)


def test_copied_dist_carries_what_its_tests_read(copied_dist):
    for path in ("lib/libtessera_runtime.so", f"bundles/{TARGET}/manifest.json", "scripts/gpu_check.sh",
                 "scripts/amd_report.py", "examples/gemm.mlir", "examples/attention.mlir", "examples/decode.mlir",
                 "bench/bench_attn.py", "bench/bench_decode.py",
                 "python/tessera/__init__.py", "BUILD_INFO"):
        assert (copied_dist / path).is_file(), path


def test_copied_dist_collects_its_tests_without_errors(copied_dist):
    r = _pytest_in(copied_dist, "--collect-only")
    assert r.returncode == 0 and " error" not in r.stdout.lower(), r.stdout + r.stderr
    assert "test_attention_gpu.py" in r.stdout and "test_gemm_gpu.py" in r.stdout, r.stdout


def test_copied_dist_runs_its_tests_without_failures(copied_dist):
    """What gpu_check.sh's pytest step runs, here without a GPU: everything passes or skips with a reason."""
    r = _pytest_in(copied_dist)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "passed" in r.stdout.splitlines()[-1], r.stdout[-2000:]


def test_wheel_installs_offline_with_the_runtime_and_bundles(copied_dist, tmp_path):
    """dist/wheels/ holds a platform wheel carrying the runtime and the bundles; installed with no index into a
    folder, the package finds both inside itself with no TESSERA_* variable, from any working directory."""
    [wheel] = (copied_dist / "wheels").glob("tessera-*.whl")
    assert "-py3-none-linux_" in wheel.name, wheel.name   # a platform tag: it carries a native library
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                        str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env.update(PYTHONPATH=str(site), PATH="/usr/bin:/bin")
    r = subprocess.run([sys.executable, "-m", "tessera"], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    inside = site / "tessera" / "_dist"
    assert f"runtime: {inside / 'lib' / 'libtessera_runtime.so'}" in r.stdout, r.stdout
    assert f"{TARGET}: {inside / 'bundles' / TARGET} (" in r.stdout, r.stdout

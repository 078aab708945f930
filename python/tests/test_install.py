"""Installing and inspecting the package: `pip install ./python` into a folder gives an importable tessera that finds
the runtime through TESSERA_HOME; `python -m tessera` reports the runtime, the bundles and their targets, the devices
and the compiler, and says what is missing (always exit 0: it is the diagnosis, not a check)."""
import os
import shutil
import subprocess
import sys

import pytest

import support

BUILD = support.compiler_path().parents[1] if support.compiler_path() else None
requires_build = pytest.mark.skipif(BUILD is None or not (BUILD / "lib" / "libtessera_runtime.so").is_file(),
                                    reason="no build tree with the runtime (TESSERA_BUILD_DIR or build/)")


def run_report(tmp_path, python_path=support.REPO / "python", **env):
    """`python -m tessera` in a clean environment (only the variables given, PATH without a compiler)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    clean.update(PYTHONPATH=str(python_path), PATH="/usr/bin:/bin", **{k: str(v) for k, v in env.items()})
    run = subprocess.run([sys.executable, "-m", "tessera"], capture_output=True, text=True, env=clean,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


@requires_build
def test_report_names_what_it_finds(tmp_path):
    support.write_gemm_bundle(tmp_path / "bundles" / "gfx942", "gfx942")
    (tmp_path / "bundles" / "gfx950").mkdir()
    (tmp_path / "bundles" / "gfx950" / "manifest.json").write_text("{not json")
    env = dict(TESSERA_BUILD_DIR=BUILD, TESSERA_BUNDLE_PATH=tmp_path / "bundles")
    fake = support.fake_driver_path()
    if fake is not None and fake.is_file():
        env.update(TESSERA_CUDA_LIBRARY=fake, TESSERA_HIP_LIBRARY=fake)
    out = run_report(tmp_path, **env)
    assert f"runtime: {BUILD / 'lib' / 'libtessera_runtime.so'}" in out
    assert f"gfx942: {tmp_path / 'bundles' / 'gfx942'} (8 kernels)" in out
    assert "gfx950: " in out and "unreadable manifest" in out
    assert f"compiler: {BUILD / 'bin' / 'tessera-compile'} (" in out
    assert "\ntorch: " in out and ("not installed" in out or "torch.ops.tessera registered" in out)
    if "TESSERA_CUDA_LIBRARY" in env:
        assert "cuda:0: sm_90" in out and "cuda:1" not in out   # the fake driver has one device
    else:
        assert "cuda: none (" in out


def test_report_says_what_is_missing(tmp_path):
    out = run_report(tmp_path, TESSERA_HOME=tmp_path / "empty", TESSERA_COMPILER=tmp_path / "no-compiler")
    assert "runtime: missing (libtessera_runtime.so not found" in out
    assert "bundles: searched" in out and "none found (scripts/make_dist.sh builds them" in out
    assert "devices:\n  unknown without the runtime library" in out
    assert "compiler: none (TESSERA_COMPILER names no file" in out


@requires_build
def test_pip_install_gives_an_importable_package(tmp_path):
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("pip is not installed")
    probe = ("import importlib.util, setuptools; v = tuple(int(x) for x in setuptools.__version__.split('.')[:2]); "
             "raise SystemExit(0 if v >= (70, 1) or importlib.util.find_spec('wheel') else 1)")
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode:
        pytest.skip("building without isolation needs setuptools >= 70.1 or the wheel package")
    source = tmp_path / "src"
    shutil.copytree(support.REPO / "python", source, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--target", str(site), str(source)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    assert (site / "tessera" / "__main__.py").is_file() and not (site / "tests").exists()
    assert (site / "tessera" / "integrations" / "transformers.py").is_file()
    out = run_report(tmp_path, python_path=site, TESSERA_HOME=BUILD)
    assert out.startswith(f"tessera {support.tessera.__version__} ({site / 'tessera'})")
    assert f"runtime: {BUILD / 'lib' / 'libtessera_runtime.so'}" in out

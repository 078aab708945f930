"""Kernels on demand (_ondemand.py) on the simulator: with no bundle at all, a paged_decode call (and a flash_attn
forward and backward) compiles its directive with tessera-compile into the cache and runs it (right against
float64); a second process finds the entry and compiles nothing; a corrupted entry is detected and built again; two
processes racing on an empty cache both run and leave one entry; an unwritable cache and a missing compiler are clear
errors, the latter naming the directive.
The compiler is the build's, behind a script that counts its runs."""
import os
import subprocess
import sys
import textwrap

import pytest

import support

COMPILER = support.compiler_path()
BUILD = COMPILER.parents[1] if COMPILER else None
pytestmark = pytest.mark.skipif(BUILD is None or not (BUILD / "lib" / "libtessera_sim_plugin.so").is_file(),
                                reason="needs a build tree with tessera-compile and the simulator plugin")

CALL = textwrap.dedent("""
    import numpy as np, tessera
    from tessera import testing
    rng = np.random.default_rng(7)
    lens = np.array([37, 5], np.int32)
    k, v = (rng.standard_normal((8, 16, 2, 64)).astype(np.float16) for _ in range(2))
    table = np.array([[3, 1, 6], [0, 2, 7]], np.int32)
    q = rng.standard_normal((2, 1, 8, 64)).astype(np.float16)
    out, lse = tessera.paged_decode(q, k, v, table, lens, num_splits=2, return_lse=True, device="sim:gfx942")
    ref = testing.paged_decode_reference(q, k, v, table, lens)
    same = testing.paged_decode_reference(q, k, v, table, lens, precision="same")
    result = testing.check_attention(out, ref, same, lse=lse)
    print("ok" if result.ok else f"wrong: {result}")
""")
# A contiguous cache with cache_leftpad (Transformers' left-padded StaticCache decode): its block size comes from the
# paged_decode sets with cache_leftpad, wherever on the search path they are.
LEFTPAD = textwrap.dedent("""
    import numpy as np, tessera
    from tessera import testing
    rng = np.random.default_rng(7)
    k, v = (rng.standard_normal((2, 128, 2, 64)).astype(np.float16) for _ in range(2))
    q = rng.standard_normal((2, 1, 8, 64)).astype(np.float16)
    lens, pad = np.array([100, 128], np.int32), np.array([30, 0], np.int32)
    out = tessera.paged_decode(q, k, v, None, lens, cache_leftpad=pad, device="sim:gfx942")
    table = np.arange(16, dtype=np.int32).reshape(2, 8)
    pages = [x.reshape(16, 16, 2, 64) for x in (k, v)]
    ref = testing.paged_decode_reference(q, *pages, table, lens, cache_leftpad=pad)
    same = testing.paged_decode_reference(q, *pages, table, lens, cache_leftpad=pad, precision="same")
    result = testing.check_attention(out, ref, same)
    print("ok" if result.ok else f"wrong: {result}")
""")
ATTENTION = textwrap.dedent("""
    import numpy as np, tessera
    from tessera import testing
    rng = np.random.default_rng(7)
    q, k, v, dout = (rng.standard_normal((1, 20, 2, 32)).astype(np.float16) for _ in range(4))
    out, lse = tessera.flash_attn(q, k, v, causal=True, return_lse=True, device="sim:gfx942")
    ref = testing.attention_reference(q, k, v, causal=True)
    same = testing.attention_reference(q, k, v, causal=True, precision="same")
    forward = testing.check_attention(out, ref, same, lse=lse)
    grads = tessera.flash_attn_bwd(q, k, v, out, dout, lse, causal=True, device="sim:gfx942")
    backward = testing.check_attention_backward(
        grads, testing.attention_backward_reference(q, k, v, dout, causal=True),
        testing.attention_backward_reference(q, k, v, dout, causal=True, precision="same"))
    print("ok" if forward.ok and backward.ok else f"wrong: {forward} {backward}")
""")


@pytest.fixture
def setup(tmp_path):
    """A TESSERA_HOME with the build's runtime and no bundles, an empty cache, and a counting compiler."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "lib").symlink_to(BUILD / "lib")
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "tessera-compile"
    wrapper.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] || echo run >> {log}\nexec {COMPILER} \"$@\"\n")
    wrapper.chmod(0o755)
    (tmp_path / "call.py").write_text(CALL)
    (tmp_path / "attention.py").write_text(ATTENTION)
    (tmp_path / "leftpad.py").write_text(LEFTPAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env.update(PYTHONPATH=str(support.REPO / "python"), TESSERA_HOME=str(home), TESSERA_COMPILER=str(wrapper),
               TESSERA_CACHE_DIR=str(tmp_path / "cache"))
    return tmp_path, env, log


def start(tmp_path, env, script="call.py"):
    return subprocess.Popen([sys.executable, str(tmp_path / script)], env=env, cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def call(tmp_path, env, script="call.py"):
    out, err = start(tmp_path, env, script).communicate(timeout=600)
    return out.strip(), err


def compiles(log):
    return len(log.read_text().split()) if log.exists() else 0


def entries(cache):
    return sorted(p.name for p in cache.iterdir())


def test_first_call_compiles_then_the_cache_serves_and_heals(setup):
    tmp_path, env, log = setup
    assert call(tmp_path, env)[0] == "ok"
    assert compiles(log) == 1
    cache = tmp_path / "cache"
    [entry] = entries(cache)   # one entry, no build folder left behind
    assert call(tmp_path, env)[0] == "ok" and compiles(log) == 1, "a second process compiles nothing"
    manifest = cache / entry / "gfx942" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"kernels"', '"kernelz"'))
    assert call(tmp_path, env)[0] == "ok" and compiles(log) == 2, "a corrupted entry is built again"
    assert entries(cache) == [entry]


def test_attention_forward_and_backward_compile_their_directives(setup):
    tmp_path, env, log = setup
    out, err = call(tmp_path, env, "attention.py")
    assert out == "ok", err
    assert compiles(log) == 2 and len(entries(tmp_path / "cache")) == 2   # flash_attn, then the flash_attn_bwd set
    assert call(tmp_path, env, "attention.py")[0] == "ok" and compiles(log) == 2


def test_racing_processes_share_one_entry(setup):
    tmp_path, env, log = setup
    runs = [start(tmp_path, env) for _ in range(2)]
    results = [r.communicate(timeout=600) for r in runs]
    assert [out.strip() for out, _ in results] == ["ok", "ok"], results
    assert len(entries(tmp_path / "cache")) == 1


def test_an_unwritable_cache_is_a_clear_error(setup):
    tmp_path, env, log = setup
    (tmp_path / "file").write_text("")
    env["TESSERA_CACHE_DIR"] = str(tmp_path / "file" / "cache")
    out, err = call(tmp_path, env)
    assert (f"CompileError: cannot write the cache of kernels compiled on demand, {tmp_path / 'file' / 'cache'} "
            in err and "set TESSERA_CACHE_DIR to a writable folder" in err), err
    assert compiles(log) == 0


def test_without_a_compiler_the_error_names_the_directive(setup):
    tmp_path, env, log = setup
    env["TESSERA_COMPILER"] = str(tmp_path / "none")
    out, err = call(tmp_path, env)
    assert "BundleNotFoundError: no bundle for target gfx942" in err
    assert ("no tessera-compile to build it on demand (set TESSERA_COMPILER or put tessera-compile on PATH); this "
            "directive compiles it: tessera.paged_decode @pd_f16_d64_b16 {dtype = f16, head_dim = 64, block_size = 16, "
            "mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv}") in err
    assert compiles(log) == 0 and not (tmp_path / "cache").exists()


def test_a_later_bundle_of_the_search_path_serves_what_the_first_lacks(setup):
    """Without a compiler: the device's bundle (the search path's first for gfx942) lacks the paged_decode set, a
    later folder's gfx942 bundle has it (as dist's test bundles do): the call runs on it and compiles nothing."""
    tmp_path, env, log = setup
    env["TESSERA_COMPILER"] = str(tmp_path / "none")
    for folder, directive in (("first", "tessera.flash_attn @fa {dtype = f16, head_dim = 32}"),
                              ("later", "tessera.paged_decode @pd {dtype = f16, head_dim = 64, block_size = 16, "
                                        "mask = #tessera.mask<causal_bottom_right>, return_lse, split_kv}")):
        source = tmp_path / f"{folder}.mlir"
        source.write_text(directive + "\n")
        subprocess.run([str(COMPILER), str(source), "--target=gfx942", "-o", str(tmp_path / folder / "gfx942")],
                       check=True, capture_output=True, timeout=600)
    env["TESSERA_BUNDLE_PATH"] = os.pathsep.join(str(tmp_path / f) for f in ("first", "later"))
    out, err = call(tmp_path, env)
    assert out == "ok", err
    assert compiles(log) == 0 and not (tmp_path / "cache").exists()


def test_a_contiguous_cache_takes_the_block_size_of_a_later_bundles_set(setup):
    """Without a compiler: the first bundle's paged_decode set (block 64) lacks cache_leftpad, a later bundle's
    (block 16) has it: a contiguous cache with cache_leftpad runs as pages of 16 on the later one (the block size
    chosen from the first bundle alone, 64, has no cache_leftpad set and nothing could compile one)."""
    tmp_path, env, log = setup
    env["TESSERA_COMPILER"] = str(tmp_path / "none")
    common = "dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, return_lse, split_kv"
    for folder, directive in (("first", f"tessera.paged_decode @pd {{{common}, block_size = 64}}"),
                              ("later", f"tessera.paged_decode @pd_lp {{{common}, block_size = 16, cache_leftpad}}")):
        source = tmp_path / f"{folder}.mlir"
        source.write_text(directive + "\n")
        subprocess.run([str(COMPILER), str(source), "--target=gfx942", "-o", str(tmp_path / folder / "gfx942")],
                       check=True, capture_output=True, timeout=600)
    env["TESSERA_BUNDLE_PATH"] = os.pathsep.join(str(tmp_path / f) for f in ("first", "later"))
    out, err = call(tmp_path, env, "leftpad.py")
    assert out == "ok", err
    assert compiles(log) == 0

"""Kernels on demand: where the device's bundle lacks a variant (or there is no bundle) and tessera-compile is found
(_paths.compiler()), the op's directive is compiled for the device's target into an on-disk cache and the variant is
taken from there.

The cache ($TESSERA_CACHE_DIR, default ~/.cache/tessera) holds one entry per (compiler, target, directive): a folder
named by the SHA-256 of the compiler's identity (its --version line, size and modification time), the target and the
directive text, holding the bundle (<target>/) and complete.json (the SHA-256 of every file, written last). An entry
is used only when every file matches; a partial or corrupted one is removed and built again. Builds go to a private
temporary folder renamed into place, so concurrent processes never see half an entry (the first rename wins)."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from . import _paths
from ._errors import BundleNotFoundError, CompileError, KernelNotFoundError

COMPLETE = "complete.json"
NO_COMPILER = "no tessera-compile to build it on demand (set TESSERA_COMPILER or put tessera-compile on PATH)"
COMPILE_TIMEOUT_S = 600

_lock = threading.Lock()
_identities = {}   # compiler path -> identity text
_verified = {}     # entry folder -> its bundle folder, checked once per process
_chosen = {}       # (device, search path, cache, compiler, key) -> the kernel or kernel set found (no device bundle)


def cache_dir():
    return Path(os.environ.get("TESSERA_CACHE_DIR") or Path.home() / ".cache" / "tessera")


def lookup(device, key, find_in, directive):
    """find_in(bundle) on the device's bundle, then on the same target's later bundles of the search path; where
    none has the variant (find_in raises KernelNotFoundError) or the device has no bundle: with a compiler, find_in
    on the bundle that `directive` compiles for the device's target (cached on disk); without one the error says
    what is missing and names the directive. Which bundle serves the directive is remembered per device bundle, so
    a kernel of a later or compiled bundle costs no failed search per call; the choice in it is remembered per key
    (with key None, find_in remembers what it needs itself). An error is not remembered."""
    try:
        bundle = device.bundle()
    except BundleNotFoundError as e:
        return _built(device, e, key, find_in, directive)

    found = []   # what find_in found while the serving bundle was searched for, in this call

    def serving():
        try:
            found.append(find_in(bundle))
            return bundle
        except KernelNotFoundError as e:
            missing = e
        for later in _paths.later_bundles(bundle.directory):   # the same target's bundles further on the path
            candidate = device.bundle(later)
            try:
                found.append(find_in(candidate))
                return candidate
            except KernelNotFoundError:
                pass
        return _compiled(device, bundle.target, missing, directive)
    server = bundle.remember(("bundle serving", directive), serving)
    if key is None:
        return found[0] if found else find_in(server)
    return server.remember(key, lambda: found[0] if found else find_in(server))


def _compiled(device, target, missing, directive):
    """The bundle `directive` compiles for `target` (lookup), or `missing` raised with what is lacking."""
    compiler = _paths.compiler()
    if compiler is None:
        raise type(missing)(f"{missing.message}; {NO_COMPILER}") from None
    return device.bundle(compiled_bundle(compiler, target, directive))


def _built(device, missing, key, find_in, directive):
    """lookup without a device bundle: find_in on the bundle `directive` compiles, remembered here per key."""
    if _paths.compiler() is None:
        raise type(missing)(f"{missing.message}; {NO_COMPILER}; this directive compiles it: {directive}") from None
    memo = (device, _paths.search_path(), str(cache_dir()), str(_paths.compiler()), key)
    with _lock:
        if key is not None and memo in _chosen:
            return _chosen[memo]
    chosen = find_in(_compiled(device, device.arch, missing, directive))
    if key is not None:
        with _lock:
            _chosen[memo] = chosen
    return chosen


def compiled_bundle(compiler, target, directive):
    """The bundle folder `directive` compiles into for `target` with `compiler`: the cache's entry when complete and
    intact, else built now (a corrupted or partial entry removed first). CompileError carries the compiler's log."""
    cache = cache_dir()
    identity = _identity(compiler)
    key = hashlib.sha256(json.dumps([identity, target, directive]).encode()).hexdigest()
    entry = cache / key
    with _lock:
        if entry in _verified:
            return _verified[entry]
    if not _intact(entry):
        shutil.rmtree(entry, ignore_errors=True)
        _build(compiler, target, directive, cache, entry)
        if not _intact(entry):
            raise CompileError(f"the on-demand cache entry {entry} for {directive} (target {target}) is incomplete "
                               "after its build; remove it and retry")
    with _lock:
        _verified[entry] = entry / target
    return entry / target


def _identity(compiler):
    with _lock:
        if compiler in _identities:
            return _identities[compiler]
    stat = compiler.stat()
    try:
        run = subprocess.run([str(compiler), "--version"], capture_output=True, text=True, timeout=60)
        version = run.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError(f"{compiler} --version does not run: {e}") from None
    identity = f"{compiler} {stat.st_size} {stat.st_mtime_ns} {version}"
    with _lock:
        _identities[compiler] = identity
    return identity


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _intact(entry):
    """Every file complete.json lists is there with its digest, and it lists a manifest."""
    try:
        files = json.loads((entry / COMPLETE).read_text())
        return any(name.endswith("manifest.json") for name in files) and \
            all(_digest(entry / name) == digest for name, digest in files.items())
    except (OSError, ValueError, AttributeError):
        return False


def _build(compiler, target, directive, cache, entry):
    try:
        cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{entry.name[:16]}-", dir=cache))
    except OSError as e:
        raise CompileError(f"cannot write the cache of kernels compiled on demand, {cache} ({e}); set "
                           "TESSERA_CACHE_DIR to a writable folder") from None
    try:
        (work / "directive.mlir").write_text(directive + "\n")
        try:
            run = subprocess.run([str(compiler), str(work / "directive.mlir"), f"--target={target}", "-o",
                                  str(work / target)], capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            raise CompileError(f"{compiler} did not run for {directive} (target {target}): {e}") from None
        if run.returncode:
            log = (run.stderr + run.stdout).strip()[-4000:]
            raise CompileError(f"{compiler} --target={target} failed on {directive}:\n{log}")
        files = {str(p.relative_to(work)): _digest(p) for p in sorted(work.rglob("*")) if p.is_file()}
        (work / COMPLETE).write_text(json.dumps(files))   # last: the entry is complete
        try:
            os.rename(work, entry)
        except OSError:   # another process renamed its build into place first: use that one
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)

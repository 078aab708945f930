"""`python -m tessera`: what this installation finds — the package, the runtime library, the bundles and their
targets, the devices, the compiler — and what is missing, with what to do about it."""
import json
import os
import subprocess
import sys
from pathlib import Path

from . import __version__, _paths
from ._device import Device
from ._errors import TesseraError

MAX_ORDINALS = 16   # devices probed per backend


def _kernels(bundle_dir):
    try:
        manifest = json.loads((bundle_dir / "manifest.json").read_text())
        return f"{len(manifest.get('kernels', []))} kernels"
    except (OSError, ValueError) as e:
        return f"unreadable manifest: {e}"


def _devices():
    """One line per device the runtime opens: CUDA and HIP ordinals until the first that fails (its reason is
    the line when no device of that backend opens), and whether the simulator's plugin loads."""
    lines = []
    for backend in ("cuda", "hip"):
        opened, reason = [], None
        for ordinal in range(MAX_ORDINALS):
            try:
                opened.append(Device(backend, ordinal))
            except TesseraError as e:
                reason = str(e).splitlines()[0]
                break
        lines += [f"  {backend}:{d.ordinal}: {d.arch}" for d in opened]
        if not opened:
            lines.append(f"  {backend}: none ({reason})")
    try:
        Device("sim:gfx942")
        lines.append("  sim: available (device='sim:<target>')")
    except TesseraError as e:
        lines.append(f"  sim: unavailable ({str(e).splitlines()[0]})")
    return lines


def _compiler():
    path = _paths.compiler()
    if path is None:
        where = ("TESSERA_COMPILER names no file" if os.environ.get("TESSERA_COMPILER")
                 else f"not in bin/ of {', '.join(map(str, _paths.homes()))} nor on PATH")
        return f"compiler: none ({where}; kernels come from the bundles only)"
    try:
        run = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
        version = next((line.strip() for line in run.stdout.splitlines() if line.strip()), "no version printed")
    except (OSError, subprocess.SubprocessError) as e:
        version = f"does not run: {e}"
    return f"compiler: {path} ({version})"


def _frameworks():
    """torch (and whether the torch.ops.tessera operators are registered) and transformers, as imported here."""
    from . import _arrays
    try:
        import torch
    except ImportError:
        return ["torch: not installed (numpy arrays run on the simulator)"]
    ops = "torch.ops.tessera registered" if _arrays.torch_ops is not None else "no custom operators: needs torch >= 2.4"
    lines = [f"torch: {torch.__version__} ({ops})"]
    try:
        import transformers
        lines.append(f"transformers: {transformers.__version__} (import tessera.integrations.transformers for "
                     "attn_implementation=\"tessera\")")
    except ImportError:
        lines.append("transformers: not installed")
    return lines


def report():
    """The report as lines."""
    lines = [f"tessera {__version__} ({Path(__file__).resolve().parent})"]
    try:
        lines.append(f"runtime: {_paths.runtime_library()}")
        runtime = True
    except TesseraError as e:
        lines.append(f"runtime: missing ({e})")
        runtime = False
    searched = list(dict.fromkeys(map(str, _paths.bundle_dirs())))
    lines.append("bundles: searched " + ", ".join(searched))
    found = _paths.available_targets()
    lines += [f"  {target}: {folder} ({_kernels(folder)})" for target, folder in sorted(found.items())]
    if not found:
        lines.append("  none found (scripts/make_dist.sh builds them; TESSERA_HOME or TESSERA_BUNDLE_PATH "
                     "points to them)")
    lines.append("devices:")
    lines += _devices() if runtime else ["  unknown without the runtime library"]
    lines.append(_compiler())
    lines += _frameworks()
    return lines


if __name__ == "__main__":
    print("\n".join(report()))
    sys.exit(0)

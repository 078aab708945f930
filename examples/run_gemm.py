#!/usr/bin/env python3
"""Runs the example GEMM bundles: on the GPU for its own target when one is present, on the simulator otherwise."""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import tessera  # noqa: E402

SHAPES = [(17, 33, 40), (128, 128, 128), (255, 64, 1000)]


def cuda_arch():
    """The GPU's target ('sm_90'), or None without torch or a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def run(target, gpu, m, n, k, rng):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if gpu:
        import torch
        c = tessera.gemm(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(),
                         out_dtype=torch.float32).cpu().numpy()
    else:
        c = tessera.gemm(a, b, out_dtype=np.float32, device=f"sim:{target}")
    return float(np.abs(c - ref).max() / max(1.0, np.abs(ref).max()))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("targets", nargs="+")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    gpu_arch = cuda_arch()
    rows, ok = [], True
    for target in args.targets:
        gpu = gpu_arch is not None and target == gpu_arch
        for m, n, k in SHAPES:
            err = run(target, gpu, m, n, k, rng)
            passed = err < 1e-3
            ok &= passed
            rows.append((target, "gpu" if gpu else "sim", f"{m}x{n}x{k}", err, passed))
    print(f"{'target':8} {'where':5} {'MxNxK':14} {'rel. max error':>14}  result")
    for target, where, shape, err, passed in rows:
        print(f"{target:8} {where:5} {shape:14} {err:14.2e}  {'ok' if passed else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

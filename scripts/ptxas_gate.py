#!/usr/bin/env python3
"""The ptxas gate of the sm_90a lane: every wgmma/TMA kernel of a bundle (manifest entries with tensor_maps) must
assemble with 0 spill bytes and without any "Potential Performance Loss" (C75xx) line. ptxas only reports those as
information, and each one means serialised wgmma or a broken pipeline (../shared/toolchain/examples/hopper-fa).

  ptxas_gate.py BUNDLE_DIR     check; exit 1 listing the offending kernels
  ptxas_gate.py --all BUNDLE_DIR   the same over every kernel of the bundle (the portable lane too)
  ptxas_gate.py --all --spill-budget N BUNDLE_DIR   up to N spill bytes a kernel (where a measured schedule that
                                   keeps more registers live beat the spill-free one)
  ptxas_gate.py --find         print the ptxas path (exit 1 when there is none)

ptxas is looked up in $TESSERA_PTXAS, PATH, /usr/local/cuda/bin, then the nvidia-cuda-nvcc wheel (pip)."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def find_ptxas():
    candidates = [os.environ.get("TESSERA_PTXAS"), shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"]
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(str(Path(folder) / "bin" / "ptxas"))
    except ModuleNotFoundError:
        pass
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return None


SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
PERF = re.compile(r"C75\d\d|Potential Performance Loss")


def check(bundle, ptxas, every=False, budget=0):
    manifest = json.loads((Path(bundle) / "manifest.json").read_text())
    target = manifest["target"]
    bad, checked = [], 0
    for k in manifest["kernels"]:
        if not (every or k.get("tensor_maps")):
            continue
        checked += 1
        run = subprocess.run([ptxas, f"-arch={target}", "-v", str(Path(bundle) / k["code_object"]), "-o", os.devnull],
                             capture_output=True, text=True)
        log = run.stdout + run.stderr
        spills = [int(a) + int(b) for a, b in SPILLS.findall(log)]
        perf = [line.strip() for line in log.splitlines() if PERF.search(line)]
        if run.returncode or not spills or sum(spills) > budget or perf:
            reason = (f"ptxas exit {run.returncode}" if run.returncode else
                      f"{sum(spills)} spill bytes" if spills and sum(spills) else
                      "; ".join(perf) if perf else "no ptxas report")
            bad.append(f"{k['name']}: {reason}")
    allowed = f" (spill budget {budget} bytes)" if budget else ""
    print(f"ptxas gate ({target}): {checked} {'' if every else 'wgmma '}kernels, {len(bad)} failing{allowed}")
    for line in bad:
        print(f"  FAIL {line}")
    return 0 if checked and not bad else 1


def main():
    if sys.argv[1:] == ["--find"]:
        path = find_ptxas()
        print(path or "no ptxas found ($TESSERA_PTXAS, PATH, /usr/local/cuda/bin, pip nvidia-cuda-nvcc-cu12)")
        return 0 if path else 1
    args = sys.argv[1:]
    every = args[:1] == ["--all"]
    args = args[1:] if every else args
    budget = 0
    if args[:1] == ["--spill-budget"] and len(args) > 1 and args[1].isdigit():
        budget, args = int(args[1]), args[2:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    ptxas = find_ptxas()
    if not ptxas:
        print("ptxas gate: no ptxas found (install nvidia-cuda-nvcc-cu12 or set TESSERA_PTXAS)", file=sys.stderr)
        return 2
    return check(args[0], ptxas, every, budget)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Before/after on a CUDA GPU: bench_attn.py (or bench_gemm.py) of two dists (scripts/make_dist.sh), alternating in one
run, one process per round and dist, so clock and power drift falls on both. Per case: the median over rounds of each
dist's tessera TFLOP/s, its ratio to cuDNN (attention) or torch (GEMM) measured in the same process, and after/before.
JSON of every round and the summary to $TESSERA_BENCH_OUT (else ./bench-out). Extra arguments go to the benchmark.

  python3 bench/ab_dists.py --before DIST_A --after DIST_B --rounds 5 [--bench bench_attn] [-- --rep-ms 50]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, type=Path, help="dist folder of the baseline")
    p.add_argument("--after", required=True, type=Path, help="dist folder of the change")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--first-round", type=int, default=0, help="number the rounds from here (a run split in calls)")
    p.add_argument("--bench", default="bench_attn", choices=("bench_attn", "bench_gemm"))
    p.add_argument("--summarize-only", action="store_true", help="only combine the rounds already in the output")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="arguments for the benchmark, after --")
    return p.parse_args()


def case_key(row):
    keys = ("B", "S", "Hq", "Hkv", "D", "dtype", "causal") if "S" in row else ("M", "N", "K", "dtype", "layout")
    return tuple(row.get(k) for k in keys)


def peer_of(bench):
    return "cudnn" if bench == "bench_attn" else "torch"


def run_round(args, out, label, dist, index):
    folder = out / f"{args.bench}-{label}-{index}"
    env = dict(os.environ, TESSERA_HOME=str(dist.resolve()), TESSERA_BENCH_OUT=str(folder))
    env.pop("TESSERA_BUILD_DIR", None)
    extra = [a for a in args.extra if a != "--"]
    cmd = [sys.executable, str(dist / "bench" / f"{args.bench}.py"), "--rounds", "1", *extra]
    print(f"=== round {index} {label}: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    (out / f"{args.bench}-{label}-{index}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        print(f"    exit {r.returncode}: see {args.bench}-{label}-{index}.log", flush=True)


def summarize(args, out):
    peer = peer_of(args.bench)
    rows = {}   # key -> label -> list of (tessera, peer) TFLOP/s
    for label in ("before", "after"):
        for path in sorted(out.glob(f"{args.bench}-{label}-*/{args.bench}.json")):
            for row in json.loads(path.read_text())["rows"]:
                if "tessera_tflops" in row and row.get("correct", True):
                    rows.setdefault(case_key(row), {}).setdefault(label, []).append(
                        (row["tessera_tflops"], row.get(f"{peer}_tflops")))
    lines = [f"{args.bench}: tessera TFLOP/s, median over rounds (one process per round and dist, alternating); "
             f"t/{peer} from the same process",
             f"{'case':>34} {'rounds':>6} {'before':>8} {'after':>8} {'after/before':>12} "
             f"{'before/' + peer:>13} {'after/' + peer:>12}"]
    summary = []
    for key, by in rows.items():
        if "before" not in by or "after" not in by:
            continue
        med = {label: statistics.median(t for t, _ in by[label]) for label in by}
        ratio = {label: statistics.median(t / p for t, p in by[label] if p) for label in by if
                 any(p for _, p in by[label])}
        change = med["after"] / med["before"]
        summary.append({"case": key, "rounds": min(len(by["before"]), len(by["after"])), "before": med["before"],
                        "after": med["after"], "after_over_before": change,
                        f"before_over_{peer}": ratio.get("before"), f"after_over_{peer}": ratio.get("after")})
        name = "x".join(str(k) for k in key if k is not None and not isinstance(k, bool)) + \
            (" causal" if key[-1] is True else "")
        lines.append(f"{name:>34} {summary[-1]['rounds']:>6} {med['before']:8.1f} {med['after']:8.1f} {change:12.3f} "
                     f"{ratio.get('before', float('nan')):13.3f} {ratio.get('after', float('nan')):12.3f}")
    worst = min((s["after_over_before"] for s in summary), default=float("nan"))
    lines.append(f"lowest after/before: {worst:.3f} over {len(summary)} cases")
    (out / f"ab_{args.bench}.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))


def main():
    args = parse_args()
    out = Path(os.environ.get("TESSERA_BENCH_OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    if not args.summarize_only:
        for i in range(args.first_round, args.first_round + args.rounds):
            for label, dist in (("before", args.before), ("after", args.after)) if i % 2 == 0 else \
                    (("after", args.after), ("before", args.before)):
                run_round(args, out, label, dist, i)
    summarize(args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GEMM benchmark on a CUDA GPU: tessera.gemm vs torch.matmul on the same inputs in one run, checked against float64; table last, JSON to $TESSERA_BENCH_OUT."""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))   # repo or dist layout
import tessera  # noqa: E402
from _common import begin, finish, median_ms  # noqa: E402
from tessera.testing import check_tolerance  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1000, 4096, 4096), (4096, 1000, 4096), (4096, 4096, 1000),
          (255, 4096, 4096), (8192, 8192, 1024), (2048, 2048, 8192)]
TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", help="MxNxK,... (default: a fixed list incl. 4096^3 and 8192^3)")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--layouts", default="nn,nt", help="nn: B is (K, N) row-major; nt: B = Bt.T with Bt (N, K)")
    p.add_argument("--rep-ms", type=int, default=200, help="time spent timing each function")
    args = p.parse_args()
    args.shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    args.dtypes, args.layouts = args.dtypes.split(","), args.layouts.split(",")
    return args


def check(out, a, b):
    """tessera.testing.check_tolerance (CORRECTNESS.md) against float64 and fp32-accumulated torch."""
    a64, b64 = a.double(), b.double()
    same = (a.float() @ b.float()).to(out.dtype).double()
    return check_tolerance(out.double(), a64 @ b64, same, a64.abs() @ b64.abs())


def run_case(M, N, K, dtype, layout, rep_ms):
    row = {"M": M, "N": N, "K": K, "dtype": dtype, "layout": layout, "flops": 2 * M * N * K}
    dt = TORCH_DTYPES[dtype]
    a = torch.randn(M, K, device="cuda").to(dt)
    b = torch.randn(N, K, device="cuda").to(dt).t() if layout == "nt" else torch.randn(K, N, device="cuda").to(dt)
    out = torch.full((M, N), float("nan"), dtype=dt, device="cuda")
    ref_out = torch.empty((M, N), dtype=dt, device="cuda")
    try:
        tessera.gemm(a, b, out=out)
        torch.cuda.synchronize()
        result = check(out, a, b)
        row.update(correct=result.ok, max_error=result.max_error, torch_max_error=result.reference_error)
        row["tessera_ms"] = median_ms(lambda: tessera.gemm(a, b, out=out), rep_ms)
    except tessera.TesseraError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    row["torch_ms"] = median_ms(lambda: torch.matmul(a, b, out=ref_out), rep_ms)
    for who in ("tessera", "torch"):
        if f"{who}_ms" in row:
            row[f"{who}_tflops"] = row["flops"] / (row[f"{who}_ms"] * 1e-3) / 1e12
    if "tessera_tflops" in row:
        row["ratio"] = row["tessera_tflops"] / row["torch_tflops"]
    return row


def table(meta, rows):
    lines = [f"GEMM: tessera vs torch.matmul, same inputs, median ms ({meta['gpu']}, torch {meta['torch']}, "
             f"commit {meta['commit']}, {meta['date']})",
             f"{'M x N x K':>20} {'dtype':>5} {'B':>3} {'tessera ms':>10} {'TFLOP/s':>8} {'torch ms':>9} "
             f"{'TFLOP/s':>8} {'ratio':>6}  check"]
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "error" in r:
            lines.append(f"{shape:>20} {r['dtype']:>5} {r['layout']:>3} {'-':>10} {'-':>8} {r['torch_ms']:>9.3f} "
                         f"{r['torch_tflops']:>8.1f} {'-':>6}  {r['error']}")
            continue
        verdict = "ok" if r["correct"] else f"FAIL (max error {r['max_error']:.3g}, torch {r['torch_max_error']:.3g})"
        lines.append(f"{shape:>20} {r['dtype']:>5} {r['layout']:>3} {r['tessera_ms']:>10.3f} {r['tessera_tflops']:>8.1f} "
                     f"{r['torch_ms']:>9.3f} {r['torch_tflops']:>8.1f} {r['ratio']:>6.2f}  {verdict}")
    return "\n".join(lines)


def main():
    args = parse_args()
    meta = begin("bench_gemm")
    if meta is None:
        return 2
    rows = []
    for M, N, K in args.shapes:
        for dtype in args.dtypes:
            for layout in args.layouts:
                rows.append(run_case(M, N, K, dtype, layout, args.rep_ms))
                r = rows[-1]
                print(f"  {M}x{N}x{K} {dtype} {layout}: " + (r.get("error") or
                      f"tessera {r['tessera_tflops']:.1f} TFLOP/s, torch {r['torch_tflops']:.1f}, "
                      f"{'ok' if r['correct'] else 'WRONG'}"), flush=True)
                torch.cuda.empty_cache()
    return finish("bench_gemm", meta, rows, table(meta, rows))


if __name__ == "__main__":
    sys.exit(main())

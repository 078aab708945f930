"""Timing and provenance shared by the benchmarks (GEMM, attention)."""
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import tessera


def begin(name):
    """The common start of a benchmark: a CUDA GPU (else a message and None), exact fp32 matmuls for the references,
    the GPU warmed up; returns the provenance dict of the run."""
    if not torch.cuda.is_available():
        print(f"{name}: no CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = provenance()
    warm_up_gpu()
    return meta


def warm_up_gpu(seconds=1.0):
    """Keeps the GPU busy for `seconds` so clocks have ramped up before the first timed case (the first case of a
    process measured up to 1.5x slow otherwise, bench/NOTES.md)."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def median_ms(fn, rep_ms):
    """Median time of fn in ms: triton.testing.do_bench (clears L2 between runs), else CUDA events."""
    try:
        from triton.testing import do_bench
        return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")
    except ImportError:
        pass
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(5):
        fn()
    times = []
    for _ in range(max(10, rep_ms // 5)):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def provenance():
    """Date, commit (dist/BUILD_INFO from scripts/make_dist.sh, else git), GPU, torch, runtime and bundle used."""
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": "unknown",
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}
    try:
        meta["runtime"] = str(tessera.runtime_library())
        meta["bundle"] = str(tessera.device("cuda").bundle().directory)
    except tessera.TesseraError as e:
        meta.setdefault("runtime", None)
        meta["bundle"] = f"unavailable: {e}"
    info = Path(meta["runtime"]).parents[1] / "BUILD_INFO" if meta["runtime"] else None
    if info is not None and info.is_file():
        meta["commit"] = dict(line.split(" ", 1) for line in info.read_text().splitlines() if " " in line)["commit"]
    else:
        try:
            meta["commit"] = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return meta


def finish(name, meta, rows, table_text):
    """Writes {meta, rows} as $TESSERA_BENCH_OUT/<name>.json, prints the table last; exit status 0
    only if every row was checked correct."""
    out_dir = Path(os.environ.get("TESSERA_BENCH_OUT", "bench-out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {json_path}")
    try:
        from plot import plot_file      # bench/plot.py, beside this file
        png = plot_file(json_path)
        if png:
            print(f"wrote {png}")
    except ImportError as e:
        print(f"no plot ({e}): install matplotlib, or run bench/plot.py on the JSON elsewhere")
    print(table_text)
    return 0 if all(r.get("correct") for r in rows) else 1


def num(row, key, fmt):
    """row[key] formatted, or '-' right-aligned to the format's width (a table cell)."""
    width = int(fmt.split(".")[0] or 0)
    return format(row[key], fmt) if key in row else "-".rjust(width)

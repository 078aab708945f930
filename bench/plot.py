"""PNG plots of the benchmarks' JSON: one figure per table (GEMM, attention forward and backward, decode), a group of
horizontal bars per shape, one bar per implementation (tessera and each peer measured in the same run), in the
table's unit (TFLOP/s; decode: time per call); the title names the GPU, date and commit of the run.

    python3 bench/plot.py bench-out/*.json [-o DIR]     # writes DIR/<name>.png (default: beside each JSON)

The benchmarks call plot_file() after writing their JSON when matplotlib is installed."""
import argparse
import json
import sys
from pathlib import Path

# What each table's bars show: (key suffix, axis label). Decode plots time per call (its fp8 columns read half the
# bytes, so GB/s would hide their gain).
UNITS = {"bench_decode": ("_us", "µs per call (lower is better)"),
         "bench_attn_features": ("_ms", "ms per call (lower is better)")}
DEFAULT_UNIT = ("_tflops", "TFLOP/s")
LEGEND = {"fp8": "tessera, fp8 cache", "fp8t": "tessera, fp8 cache with per-token scales",
          "with": "tessera with the option", "without": "tessera without it",
          "flash": "SDPA FlashAttention-2", "cudnn": "SDPA cuDNN", "torch": "torch.matmul (cuBLAS)"}
SHAPE_KEYS = ("M", "N", "K", "B", "S", "Hq", "Hkv", "D", "dtype", "layout", "causal", "deterministic", "Sq",
              "max_len", "block_size", "kv_dtype")
TITLES = {"bench_gemm": "GEMM", "bench_attn": "Attention forward", "bench_attn_bwd": "Attention backward",
          "bench_decode": "Paged decode", "bench_attn_features": "Attention forward options"}


def _label(row):
    if "case" in row:    # a named case: its name says the shape
        return " ".join([str(row["case"])] + ([f"block {row['block_size']}"] if "block_size" in row else []))
    parts = []
    for key in SHAPE_KEYS:
        if key not in row or isinstance(row[key], (list, dict)):
            continue
        value = row[key]
        if isinstance(value, bool):
            if value:
                parts.append(key)
        else:
            parts.append(str(value) if key in ("dtype", "layout", "kv_dtype") else f"{key}{value}")
    return " ".join(parts)


def series(rows, name=None):
    """(unit label, [implementation names], [(row label, {name: value})]) for the metric of table `name`."""
    suffix, unit = UNITS.get(name, DEFAULT_UNIT)
    names = []
    for row in rows:
        for key in row:
            if key.endswith(suffix) and key[:-len(suffix)] not in names:
                names.append(key[:-len(suffix)])
    if not names:
        return None, [], []
    names.sort(key=lambda n: (n != "tessera", n))
    points = [(_label(r), {n: r[n + suffix] for n in names if isinstance(r.get(n + suffix), (int, float))})
              for r in rows]
    return unit, names, points


def plot(name, meta, rows, png):
    """Writes the figure of one benchmark table to `png`; False when the rows have no throughput to plot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unit, names, points = series(rows, name)
    if not points:
        return False
    height = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.28 * len(points) * len(names) + 0.2 * len(points)))
    for i, who in enumerate(names):
        ys = [p - 0.4 + height * (i + 0.5) for p in range(len(points))]
        ax.barh(ys, [values.get(who, 0.0) for _, values in points], height, label=LEGEND.get(who, who))
    for p, (_, values) in enumerate(points):
        if not values:
            ax.text(0, p, " no result (failed; see the table)", va="center", fontsize=8)
    ax.set_yticks(range(len(points)), [label for label, _ in points], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"{TITLES.get(name, name)} — {meta.get('gpu', '?')}, {meta.get('date', '?')[:10]}, "
                 f"commit {meta.get('commit', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def plot_file(json_path, out_dir=None):
    """Plots one benchmark JSON ({meta, rows}) as <out_dir or its folder>/<stem>.png; returns the path or None."""
    json_path = Path(json_path)
    data = json.loads(json_path.read_text())
    if not (isinstance(data, dict) and isinstance(data.get("meta"), dict) and isinstance(data.get("rows"), list)
            and all(isinstance(r, dict) for r in data["rows"])):
        raise ValueError("expected {\"meta\": {...}, \"rows\": [{...}, ...]}")
    png = Path(out_dir or json_path.parent) / f"{json_path.stem}.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    return png if plot(json_path.stem, data["meta"], data["rows"], png) else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="benchmark JSON files ({meta, rows})")
    parser.add_argument("-o", "--out", help="folder for the PNGs (default: beside each JSON)")
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot.py needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    status = 0
    for path in args.json:
        try:
            png = plot_file(path, args.out)
        except (OSError, ValueError) as e:
            print(f"{path}: not a benchmark JSON ({type(e).__name__}: {e})", file=sys.stderr)
            status = 1
            continue
        print(f"wrote {png}" if png else f"{path}: no throughput to plot")
    return status


if __name__ == "__main__":
    sys.exit(main())

"""bench/plot.py: a figure per benchmark table from its JSON (tessera's bars first, then each peer's, in the table's
unit (decode: time per call), shapes labelled from the row's fields or its case name), through the module and its command line; rows without a
throughput (failed cases) still plot; a file that is no benchmark JSON is an error naming it. Skipped without
matplotlib."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import plot  # noqa: E402

META = {"date": "2026-12-03T09:00:00+00:00", "commit": "abc1234", "gpu": "NVIDIA H200"}
ATTN = [{"B": 4, "S": 4096, "Hq": 32, "Hkv": 32, "D": 128, "dtype": "bf16", "causal": True, "tessera_tflops": 400.0,
         "flash_tflops": 350.0, "cudnn_tflops": 420.0, "correct": True},
        {"B": 4, "S": 1024, "Hq": 32, "Hkv": 8, "D": 64, "dtype": "f16", "causal": False, "error": "failed"}]
DECODE = [{"case": "B128 ctx4096", "B": 128, "block_size": 16, "cudnn_gbs": 3000.0, "tessera_gbs": 2900.0,
           "tessera_us": 10.0, "fp8_us": 7.0}]


def png_ok(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_series_puts_tessera_first_in_the_tables_unit():
    unit, names, points = plot.series(ATTN)
    assert unit == "TFLOP/s" and names == ["tessera", "cudnn", "flash"]
    assert points[0] == ("B4 S4096 Hq32 Hkv32 D128 bf16 causal", {"tessera": 400.0, "flash": 350.0, "cudnn": 420.0})
    assert points[1][1] == {}                      # a failed case keeps its place, with no bars
    unit, names, points = plot.series(DECODE, "bench_decode")
    assert unit.startswith("µs per call") and names == ["tessera", "fp8"]
    assert points[0] == ("B128 ctx4096 block 16", {"tessera": 10.0, "fp8": 7.0})
    assert plot.series([{"M": 1, "correct": True}]) == (None, [], [])


def test_plot_file_and_command_line(tmp_path):
    for name, rows in (("bench_attn", ATTN), ("bench_decode", DECODE)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"meta": META, "rows": rows}))
    assert plot.plot_file(tmp_path / "bench_attn.json") == tmp_path / "bench_attn.png"
    assert png_ok(tmp_path / "bench_attn.png")
    out = tmp_path / "plots"
    done = subprocess.run([sys.executable, str(BENCH / "plot.py"), str(tmp_path / "bench_attn.json"),
                           str(tmp_path / "bench_decode.json"), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert png_ok(out / "bench_attn.png") and png_ok(out / "bench_decode.png")


def test_not_a_benchmark_json_is_named(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    done = subprocess.run([sys.executable, str(BENCH / "plot.py"), str(bad)], capture_output=True, text=True)
    assert done.returncode == 1 and f"{bad}: not a benchmark JSON" in done.stderr

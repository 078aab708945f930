"""scripts/amd_report.py (the AMD static report, docs/amd-report.md): the KV-loop finder on a
hand-written ISA fragment, and one real run on a small flash_attn directive (CPU only)."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "amd_report.py"
if not SCRIPT.is_file():
    pytest.skip(f"{SCRIPT} is not here (a checkout or scripts/make_dist.sh's dist carries it)", allow_module_level=True)

spec = importlib.util.spec_from_file_location("amd_report", SCRIPT)
amd_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(amd_report)


def compiler_path():
    build = os.environ.get("TESSERA_BUILD_DIR")
    candidates = ([Path(build) / "bin" / "tessera-compile"] if build else []) + \
        sorted(REPO.glob("build*/bin/tessera-compile"))
    return next((c for c in candidates if c.is_file()), None)


# A loop the shape of ours: header, a tail-guarded copy (exec if/else: element path vs vector
# path), matrix work, a runtime-uniform block (softcap), the mask-free back edge, then the
# edge-tile path with its own back edge. A second, smaller loop without matrix work precedes it.
ISA = """\
k:
\ts_mov_b32 s0, 0
.LBB0_1:
\tv_add_f32_e32 v1, v1, v2
\ts_cbranch_scc1 .LBB0_1
.LBB0_2:                       ; loop header
\tv_max_f32_e32 v3, v3, v4
\ts_and_saveexec_b64 s[4:5], vcc
\ts_xor_b64 s[4:5], exec, s[4:5]
\ts_cbranch_execz .LBB0_4
\tglobal_load_ushort v5, v[6:7], off
\tglobal_load_ushort v8, v[6:7], off offset:2
\tglobal_load_ushort v9, v[6:7], off offset:4
.LBB0_4:
\ts_andn2_saveexec_b64 s[4:5], s[4:5]
\ts_cbranch_execz .LBB0_5
\tglobal_load_dwordx4 v[10:13], v[6:7], off
.LBB0_5:
\ts_or_b64 exec, exec, s[4:5]
\tv_mfma_f32_32x32x8_f16 v[16:31], v[0:1], v[2:3], v[16:31]
\tv_mfma_f32_32x32x8_f16 v[16:31], v[0:1], v[2:3], v[16:31]
\ts_cbranch_vccnz .LBB0_6
\tv_exp_f32_e32 v3, v3
\tv_rcp_f32_e32 v3, v3
.LBB0_6:
\ts_cmp_lg_u32 s1, 0
\ts_cbranch_vccnz .LBB0_2
\tv_cndmask_b32_e32 v16, v40, v16, vcc
\ts_branch .LBB0_2
.Lfunc_end0:
"""


def test_kv_loop_and_steady_state_path():
    items = amd_report.parse_isa(amd_report.function_lines(ISA, "k"))
    loop = amd_report.find_kv_loop(items)
    assert loop["header"] == ".LBB0_2" and loop["mat"] == 2
    st = amd_report.loop_stats(items, loop)
    # header .. first back edge: 18 instructions; the edge path adds v_cndmask + s_branch
    assert (st["loop_insts"], st["edge_insts"], st["mat"]) == (18, 2, 2)
    assert st["macs"] == 2 * 32 * 32 * 8
    hot = st["_hot"]
    # the steady state runs the vector copy, skips the element copy and the softcap block
    assert "global_load_dwordx4 v[10:13], v[6:7], off" in hot
    assert not any(t.startswith(("global_load_ushort", "v_exp_f32", "v_rcp_f32")) for t in hot)
    assert sum(1 for t in hot if t.startswith("v_mfma")) == 2
    assert st["hot_insts"] == 18 - 3 - 2


def test_occupancy_matches_target_table():
    # 256 VGPRs, 32 KiB LDS, 4 waves on gfx942: 2 waves per SIMD either way
    assert amd_report.occupancy("gfx942", 256, 32768, 4) == 2
    assert amd_report.occupancy("gfx942", 134, 53760, 4) == 1


ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<vgpr>\d+) \| (?P<agpr>\d+|-) \| (?P<sgpr>\d+) \| "
                 r"(?P<spills>\d+/\d+) \| (?P<scratch>\d+) \| (?P<lds>\d+) \| (?P<occ>\d+) \| "
                 r"(?P<mat>\d+) \| (?P<loop>\d+( / \d+)?) \| (?P<share>[\d.]+%( / [\d.]+%)?) \| "
                 r"(?P<cyc>[\d]+( / \d+)?|-) \| (?P<per>[\d.]+( / [\d.]+)?|-) \| (?P<mac>\d+|-) \| "
                 r"(?P<load>\d+/\d+|-) \|$")


@pytest.mark.skipif(compiler_path() is None, reason="build/bin/tessera-compile not built")
def test_report_on_one_directive(tmp_path):
    src = tmp_path / "one.mlir"
    src.write_text("tessera.flash_attn @fa_f16_d64_none {dtype = f16, head_dim = 64, "
                   "mask = #tessera.mask<none>, return_lse}\n")
    out, js = tmp_path / "report.md", tmp_path / "rows.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--build", str(compiler_path().parents[1]),
                        "--out", str(out), "--input", str(src), "--targets", "gfx942", "--json", str(js)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert re.search(r"at commit `[0-9a-f]{7,}", text) and "## Method" in text
    rows = [m for m in map(ROW.match, text.splitlines()) if m]
    assert [m["name"] for m in rows] == ["fa_f16_d64_none"]
    row = rows[0]
    assert row["spills"] == "0/0" and int(row["mat"]) > 0 and int(row["vgpr"]) > 0
    data = json.loads(js.read_text())["rows"][0]
    assert data["mat_ops"] and all(o.startswith("v_mfma") for o in data["mat_ops"])
    assert data["hot_mat"] == data["mat"] and data["hot_insts"] <= data["loop_insts"]
    # The forward's K/V tiles come in as 16-byte vectors on the steady-state path.
    assert row["load"] == f"{data['hot_loads']}/{data['hot_loads']}" and data["hot_loads"] > 0
    if data["note"] is None:  # llvm-mca found and ran
        assert data["mca_cycles"] > 0 and row["cyc"] != "-"

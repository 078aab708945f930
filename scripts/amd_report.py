#!/usr/bin/env python3
"""AMD static report: registers, spills, LDS, occupancy, the KV loop's matrix instructions and an
llvm-mca estimate of that loop, for every flash_attn, flash_attn_bwd and paged_decode kernel of the input files on gfx942, gfx950
and gfx1100, optionally side by side with Triton's tutorial forward kernel. No GPU needed.

    python3 scripts/amd_report.py --build build --out docs/amd-report.md [--triton]

Standard library only (the Triton rows run scripts/triton_fa_fwd.py in a Python that has triton).
The method is written down in the report itself (see METHOD below) and in docs/amd-report.md.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("gfx942", "gfx950", "gfx1100")
MCA_DEFAULT = "/usr/lib/llvm-22/bin/llvm-mca"
MATRIX_RE = re.compile(r"^v_(mfma|smfmac|wmma|swmmac)\w*")
BRANCH_RE = re.compile(r"^(s_branch|s_cbranch_\w+)\s+(\S+)")
LABEL_RE = re.compile(r"^([.\w$]+):")

# The comparison kernel for Triton's tutorial forward: same work as the tutorial (no softcap,
# no sliding window, no varlen; LSE written, as the tutorial writes M), f16, head_dim 128.
REFERENCE_MLIR = (
    "tessera.flash_attn @ref_f16_d128_none {dtype = f16, head_dim = 128, "
    "mask = #tessera.mask<none>, return_lse}\n"
    "tessera.flash_attn @ref_f16_d128_causal {dtype = f16, head_dim = 128, "
    "mask = #tessera.mask<causal_top_left>, return_lse}\n")

# Per-chip facts for the occupancy of the Triton kernels: the formula and numbers of
# lib/Target/TargetInfo.cpp (TargetInfo::occupancy), so both sides are counted alike.
# (LDS bytes per CU, VGPRs per SIMD lane, allocation granule, max waves per SIMD, SIMDs per CU)
CHIP = {"gfx942": (64 * 1024, 512, 8, 8, 4), "gfx950": (160 * 1024, 512, 8, 8, 4),
        "gfx1100": (64 * 1024, 1536, 24, 16, 4)}

METHOD = """\
## Method

- **Kernels**: every `tessera.flash_attn`, `tessera.flash_attn_bwd` and `tessera.paged_decode`
  directive of the inputs is compiled with
  `tessera-compile --target=<chip>` into a temporary bundle per chip; VGPR/AGPR/SGPR, spills,
  scratch, LDS bytes and occupancy (waves per SIMD) are the bundle manifest's (`docs/bundle.md`).
- **Finding the KV loop** in the ISA (`<kernel>.s`, comments and directives dropped): every
  branch (`s_branch`, `s_cbranch_*`) to a label defined *earlier* in the function is a back
  edge, and that label is a loop header. A header's loop body spans from the header to its last
  back edge. The KV loop is the loop whose body holds the most matrix instructions (`v_mfma*`,
  `v_wmma*`; the shortest such loop on a tie); a backward branch around other loops whose matrix
  instructions all lie in those loops is not a loop of its own. The AMD forward walks its key
  tiles in up to three loops with the same products: the tiles before the first one that needs
  no mask, those that need none (no mask, bounds check or soft cap, plain vector loads; taken
  when the strides keep every load aligned and the soft cap is off), and the rest; the tie rule
  picks the middle one, which runs every tile of a long sequence but the edge ones. In the
  backward kernels that loop is the main
  kernel's walk over query blocks (S^T, dP^T, dV, dK and dQ products per iteration) and the
  deterministic dQ kernel's walk over key blocks; the preprocess and dQ-convert kernels have no
  matrix instructions.
- **One iteration** is the range from the header to its *first* back edge after which the body
  holds no further matrix instruction. In a loop that also serves edge tiles (the backward, the
  decode, forward kernels without the mask-free loop) the later back edge closes the edge-tile
  path (causal/window/sequence-end masking: `v_cndmask` on S) that falls through after the
  mask-free back edge and runs only on edge tiles; it is left out (`edge_insts` in `--json`).
  Triton's loops have one back edge.
- **Two views of that range** (`a / b` in the tables):
  *a*, the whole range as straight-line code: every block counted once, also blocks skipped at
  run time (what llvm-mca sees when handed the range);
  *b*, the steady-state path: the path from the header to the back edge that keeps every matrix
  instruction and executes the fewest instructions, where an exec-masked if/else
  (`s_cbranch_execz` to a block opening with `s_andn2_saveexec`/`s_and_not1_saveexec`/
  `s_or_saveexec`) runs exactly one of its sides, a one-sided exec-masked block always runs,
  and runtime-uniform conditional branches (`s_cbranch_scc*`, `s_cbranch_vcc*`) may go either
  way. In a loop that also serves edge tiles this drops the element-wise tail copies of K/V (the
  vector copy is kept) and the runtime softcap block, i.e. it is the iteration of an interior
  tile with softcap off; the forward's mask-free loop has neither, so there the views agree.
- **Counts**: `mat/it` = matrix instructions per iteration; `mat share` = their fraction of the
  iteration's instructions; MACs per matrix instruction from its shape (`32x32x8` = 8192).
- **llvm-mca**: each view, instructions only, is fed to
  `llvm-mca -mtriple=amdgcn-amd-amdhsa -mcpu=<chip> -iterations=100`; `mca cyc/it` = Total
  Cycles / Iterations, `cyc/mat` = cyc/it / mat/it, `MAC/cyc` = MACs per iteration / cyc/it
  (steady-state view). The bar table normalises to the same tile work: cycles per 8192 MACs (one
  `v_mfma_f32_32x32x8` of work), which is cyc/mat wherever both sides use that instruction.
  `v_permlane16/32_swap` is given to llvm-mca as a `v_mov_b32` of the same registers (llvm-mca
  22 does not finish on it).
  llvm-mca's AMDGPU model issues one instruction per cycle in order, gives `s_barrier` a long
  fixed latency, treats `s_nop N` as one instruction and knows nothing of the latency hiding
  across waves that occupancy buys: read the figures as relative, for comparing loops of the
  same chip, not as run time.
- **Triton** (`--triton`): `scripts/triton_fa_fwd.py` is the tutorial's forward kernel
  (06-fused-attention: FA-2, exp2 online softmax with the scale folded in, M = LSE written,
  causal split into an off-band and an on-band loop) compiled with
  `triton.compile(ASTSource(...), target=GPUTarget("hip", chip, wave))`, no GPU, under the
  tutorial's HIP launch options (BLOCK_M 128, BLOCK_N 64, 4 warps, num_stages 1,
  waves_per_eu 2 at D128, allow_flush_denorm) and the specialisation the tutorial's launch gets
  (16-byte aligned pointers within 2 GiB, N_CTX % 16 == 0). Registers, spills and scratch come
  from its `.amdgpu_metadata`, LDS from the compiled kernel's `shared` (Triton's LDS is
  dynamic), occupancy from the same formula as ours (`TargetInfo::occupancy`). Its loop is found
  and measured exactly like ours; for causal, that is the off-band (mask-free) loop, the one
  with the most matrix instructions.
- **Comparison rows** (`ref_*`): D128 f16 flash_attn directives with the tutorial's feature set
  (LSE output; no runtime softcap or sliding window, no varlen; non-causal and causal), compiled
  for each chip, shown next to the D128 kernels of the input and Triton's kernel.
"""


# --------------------------------------------------------------------------------------------
# ISA analysis


def function_lines(asm, name):
    """The lines of function `name` (its label to .Lfunc_end), or the whole text."""
    lines = asm.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip() == f"{name}:"), 0)
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(".Lfunc_end")), len(lines))
    return lines[start:end]


def parse_isa(lines):
    """Items ('label', name) and ('inst', text) in order, without comments and directives."""
    items = []
    for raw in lines:
        s = raw.split(";")[0].strip()
        if not s:
            continue
        m = LABEL_RE.match(s)
        if m:
            items.append(("label", m.group(1)))
            s = s[m.end():].strip()
            if not s:
                continue
        if s.startswith("."):
            continue
        items.append(("inst", s))
    return items


def find_kv_loop(items):
    """The KV loop: dict(header, start, end, full_end, ...) over `items` indices, or None."""
    labels = {}
    back = {}  # header label -> indices of back edges
    for i, (kind, text) in enumerate(items):
        if kind == "label":
            labels[text] = i
            continue
        m = BRANCH_RE.match(text)
        if m and m.group(2) in labels:
            back.setdefault(m.group(2), []).append(i)

    def mats(a, b):
        return sum(1 for k, t in items[a:b + 1] if k == "inst" and MATRIX_RE.match(t))

    loops = []
    for hdr, edges in back.items():
        h, last = labels[hdr], max(edges)
        total = mats(h, last)
        first = next(e for e in sorted(edges) if mats(h, e) == total)
        loops.append({"header": hdr, "start": h, "end": first, "full_end": last, "mat": total})
    # A backward branch around other loops whose matrix instructions all lie in them (a block
    # laid out late jumping back over the walk's loops) is not the KV loop.
    def own_mats(lp):
        nested = [o for o in loops if o is not lp and lp["start"] <= o["start"] and o["full_end"] <= lp["full_end"]]
        return sum(1 for i in range(lp["start"], lp["full_end"] + 1)
                   if items[i][0] == "inst" and MATRIX_RE.match(items[i][1])
                   and not any(o["start"] <= i <= o["full_end"] for o in nested))
    loops = [lp for lp in loops if own_mats(lp)]
    if not loops:
        return None
    return max(loops, key=lambda lp: (lp["mat"], -(lp["full_end"] - lp["start"])))


def hot_path(items, start, end):
    """The instructions of the least-work path from the loop header to the back edge at `end`,
    under the steady-state rules of METHOD: uniform branches (s_cbranch_scc*/vcc*) may go either
    way; an exec-masked if/else (`s_cbranch_execz` to a block opening with
    `s_andn2_saveexec`/`s_or_saveexec`) runs exactly one of its sides; a one-sided exec-masked
    block runs."""
    blocks, cur = [], {"labels": [], "insts": []}
    for kind, text in items[start:end + 1]:
        if kind == "label":
            if cur["insts"]:
                blocks.append(cur)
                cur = {"labels": [], "insts": []}
            cur["labels"].append(text)
            continue
        cur["insts"].append(text)
        if BRANCH_RE.match(text):
            blocks.append(cur)
            cur = {"labels": [], "insts": []}
    if cur["insts"]:
        blocks.append(cur)
    at = {lab: i for i, b in enumerate(blocks) for lab in b["labels"]}
    last = len(blocks) - 1

    def opens_else(i):
        return bool(blocks[i]["insts"]) and re.match(r"s_(andn2|and_not1|or)_saveexec", blocks[i]["insts"][0])

    def succs(i, variant):
        """(block, variant) successors of block i entered as `variant` (None, 'run' or 'skip')."""
        if i == last:
            return []
        term = blocks[i]["insts"][-1] if blocks[i]["insts"] else ""
        m = BRANCH_RE.match(term)
        tgt = at.get(m.group(2)) if m else None
        fwd = tgt is not None and tgt > i
        def arrive(j):  # entering a block normally; an else side entered so is skipped
            return (j, "skip" if opens_else(j) else None)

        if not m:
            return [arrive(i + 1)]
        op = m.group(1)
        if op == "s_branch":
            return [arrive(tgt)] if fwd else []
        if op == "s_cbranch_execz":
            if variant == "run":  # the else side of an if/else whose then side was skipped
                return [(i + 1, None)]
            if variant == "skip":  # the then side ran: the else side is empty
                return [arrive(tgt)] if fwd else [arrive(i + 1)]
            if fwd and opens_else(tgt):  # if/else: run the then side, or skip it and run the else
                return [arrive(i + 1), (tgt, "run")]
            return [arrive(i + 1)]  # one-sided exec-masked block: runs
        return [arrive(i + 1)] + ([arrive(tgt)] if fwd else [])

    def cost(j):  # paths keep every matrix instruction first, then do the least work
        return len(blocks[j]["insts"]) - 10**6 * sum(1 for t in blocks[j]["insts"] if MATRIX_RE.match(t))

    dist, prev = {(0, None): cost(0)}, {}
    for i in range(len(blocks)):
        for variant in (None, "run", "skip"):
            node = (i, variant)
            if node not in dist:
                continue
            for nb in succs(i, variant):
                d = dist[node] + cost(nb[0])
                if d < dist.get(nb, float("inf")):
                    dist[nb], prev[nb] = d, node
    ends = [(last, v) for v in (None, "run", "skip") if (last, v) in dist]
    if not ends:
        return None
    node, path = min(ends, key=lambda n: dist[n]), []
    while True:
        path.append(node[0])
        if node not in prev:
            break
        node = prev[node]
    return [t for i in reversed(path) for t in blocks[i]["insts"]]


def macs(inst):
    m = re.search(r"_(\d+)x(\d+)x(\d+)", inst.split()[0])
    return int(m.group(1)) * int(m.group(2)) * int(m.group(3)) if m else 0


def load_bytes(inst):
    """Bytes a global or buffer load instruction reads per lane (0 for anything else)."""
    m = re.match(r"(?:global|buffer)_load_(?:lds_)?(\w+)", inst)
    if not m:
        return 0
    width = m.group(1)
    for pattern, size in ((r"dwordx4|b128", 16), (r"dwordx3|b96", 12), (r"dwordx2|b64", 8), (r"dword|b32", 4),
                          (r"short|u16|i16|b16", 2), (r"byte|u8|i8", 1)):
        if re.search(pattern, width):
            return size
    return 0


def loop_stats(items, loop):
    insts = [t for k, t in items[loop["start"]:loop["end"] + 1] if k == "inst"]
    full = [t for k, t in items[loop["start"]:loop["full_end"] + 1] if k == "inst"]
    hot = hot_path(items, loop["start"], loop["end"]) or insts
    mat = [t for t in insts if MATRIX_RE.match(t)]
    hot_mat = [t for t in hot if MATRIX_RE.match(t)]
    hot_loads = [n for n in map(load_bytes, hot) if n]
    return {"loop_header": loop["header"], "loop_insts": len(insts), "edge_insts": len(full) - len(insts),
            "mat": len(mat), "share": len(mat) / len(insts) if insts else 0.0,
            "mat_ops": sorted({MATRIX_RE.match(t).group(0) for t in mat}),
            "macs": sum(macs(t) for t in mat),
            "hot_insts": len(hot), "hot_mat": len(hot_mat), "hot_share": len(hot_mat) / len(hot) if hot else 0.0,
            "barriers": sum(1 for t in insts if t.startswith("s_barrier")),
            "hot_loads": len(hot_loads), "hot_loads_16": hot_loads.count(16),
            "hot_barriers": sum(1 for t in hot if t.startswith("s_barrier")), "_body": insts, "_hot": hot}


def mca_stand_in(inst):
    """llvm-mca 22 does not finish on gfx950's v_permlane32_swap (minutes per loop even at 10
    iterations); it is fed a v_mov_b32 of the same registers instead, a one-pass VALU op like it.
    Nor on a gfx942 loop where v_mad_u64_u32 meets MFMAs and outstanding LDS reads (it hangs at
    one iteration); it is fed the two quarter-rate multiplies that write the same halves."""
    m = re.match(r"v_permlane(16|32)_swap_b32(?:_e32|_e64)?\s+(v\d+),\s*(v\d+)", inst)
    if m:
        return f"v_mov_b32_e32 {m.group(2)}, {m.group(3)}"
    m = re.match(r"v_mad_u64_u32(?:_e64)?\s+v\[(\d+):(\d+)\],\s*[^,]+,\s*([^,]+),\s*([^,]+),", inst)
    if m:
        lo, hi, a, b = m.groups()
        return f"v_mul_lo_u32 v{lo}, {a}, {b}\n\tv_mul_hi_u32 v{hi}, {a}, {b}"
    return inst


def run_mca(mca, chip, insts, workdir, stem):
    """(cycles per iteration, error) from llvm-mca over the straight-line instructions."""
    if not mca:
        return None, "llvm-mca not found"
    path = Path(workdir) / f"{stem}.s"
    path.write_text("".join(f"\t{mca_stand_in(t)}\n" for t in insts))
    try:
        r = subprocess.run([mca, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={chip}", "-iterations=100",
                            str(path)], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"llvm-mca: {e}"
    it = re.search(r"^Iterations:\s+(\d+)", r.stdout, re.M)
    cyc = re.search(r"^Total Cycles:\s+(\d+)", r.stdout, re.M)
    if r.returncode != 0 or not it or not cyc:
        err = (r.stderr.strip().splitlines() or ["no output"])[0]
        return None, f"llvm-mca failed: {err}"
    return int(cyc.group(1)) / int(it.group(1)), None


EMPTY = {"loop_header": None, "loop_insts": None, "edge_insts": None, "mat": 0, "share": None,
         "mat_ops": [], "macs": 0, "hot_insts": None, "hot_mat": 0, "hot_share": None, "barriers": None,
         "hot_barriers": None, "mca_cycles": None, "mca_per_mat": None, "hot_mca_cycles": None,
         "hot_mca_per_mat": None, "hot_macs_per_cycle": None, "hot_loads": None, "hot_loads_16": None}


def analyze(asm, name, chip, mca, workdir):
    items = parse_isa(function_lines(asm, name))
    if not any(kind == "inst" and MATRIX_RE.match(t) for kind, t in items):
        return dict(EMPTY)  # an element-wise kernel (backward preprocess, dQ convert)
    loop = find_kv_loop(items)
    if loop is None:
        return dict(EMPTY, note="no loop found in the ISA")
    st = loop_stats(items, loop)
    stem = f"{chip}_{name}"
    cyc, err = run_mca(mca, chip, st.pop("_body"), workdir, stem + ".loop")
    hot, err2 = run_mca(mca, chip, st.pop("_hot"), workdir, stem + ".hot")
    st["mca_cycles"], st["hot_mca_cycles"] = cyc, hot
    st["mca_per_mat"] = cyc / st["mat"] if cyc and st["mat"] else None
    st["hot_mca_per_mat"] = hot / st["hot_mat"] if hot and st["hot_mat"] else None
    st["hot_macs_per_cycle"] = st["macs"] / hot if hot and st["hot_mat"] == st["mat"] else None
    st["note"] = err or err2
    return st


# --------------------------------------------------------------------------------------------
# Our kernels


def snapshot(compiler, work):
    """A private copy of tessera-compile, so that a rebuild of the build tree while the report
    runs cannot swap the compiler between targets (it finds LLVM through its absolute RUNPATH)."""
    dst = Path(work) / "bin" / "tessera-compile"
    dst.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(10):
        try:
            shutil.copy2(compiler, dst)
            if subprocess.run([str(dst), "--version"], capture_output=True).returncode == 0:
                return dst
        except OSError:
            pass
        time.sleep(3)  # being relinked right now
    sys.exit(f"amd_report: {compiler} is not runnable")


def compile_bundle(compiler, src, chip, outdir):
    r = subprocess.run([str(compiler), str(src), f"--target={chip}", "-o", str(outdir)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tessera-compile {src} --target={chip} failed:\n{r.stderr}")
    return json.loads((Path(outdir) / "manifest.json").read_text())


def bundle_rows(manifest, bundle, chip, mca, workdir, kind="tessera"):
    rows = []
    for k in manifest["kernels"]:
        if k.get("directive") not in ("flash_attn", "flash_attn_bwd", "paged_decode"):
            continue
        a = k.get("attributes", {})
        asm = (Path(bundle) / k["isa"]).read_text()
        row = {"kind": kind, "chip": chip, "kernel": k["name"], "dtype": a.get("dtype"),
               "head_dim": a.get("head_dim"), "mask": a.get("mask"), "varlen": bool(a.get("varlen")),
               "block": k["block"][0], "vgpr": k["registers"].get("vgpr"),
               "agpr": k["registers"].get("agpr"), "sgpr": k["registers"].get("sgpr"),
               "spill_vgpr": (k.get("spills") or {}).get("vgpr"),
               "spill_sgpr": (k.get("spills") or {}).get("sgpr"), "scratch": k.get("scratch_bytes"),
               "lds": k.get("lds_bytes"), "occupancy": k.get("occupancy_waves_per_simd")}
        rows.append((row, asm, k["entry"]))

    def stats_of(item):
        _, asm, entry = item
        return analyze(asm, entry, chip, mca, workdir)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as ex:
        stats = list(ex.map(stats_of, rows))
    for (row, _, _), st in zip(rows, stats):
        row.update(st)
    return [row for row, _, _ in rows]


# --------------------------------------------------------------------------------------------
# Triton


def occupancy(chip, vgprs, lds, waves):
    lds_cu, per_simd, granule, max_waves, simds = CHIP[chip]
    alloc = (max(vgprs, 1) + granule - 1) // granule * granule
    by_regs = min(max_waves, per_simd // alloc)
    if lds <= 0:
        return by_regs
    groups = lds_cu // lds
    return 0 if groups == 0 else min(by_regs, max(1, groups * waves // simds))


def amdgpu_metadata(asm):
    def num(key):
        m = re.search(rf"^\s*(?:-\s+)?\.{key}:\s+(\d+)", asm, re.M)
        return int(m.group(1)) if m else None
    return {k: num(k) for k in ("vgpr_count", "agpr_count", "sgpr_count", "vgpr_spill_count",
                                 "sgpr_spill_count", "group_segment_fixed_size",
                                 "private_segment_fixed_size")}


def find_triton_python(explicit):
    cands = [explicit] if explicit else [sys.executable, shutil.which("python3"),
                                         os.path.expanduser("~/.pyenv/shims/python3")]
    for py in cands:
        if py and os.path.exists(py):
            r = subprocess.run([py, "-c", "import triton; print(triton.__version__)"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                return py, r.stdout.strip()
    return None, None


def triton_rows(py, chips, mca, workdir, errors):
    rows = []
    for chip in chips:
        for causal in (False, True):
            out = Path(workdir) / "triton"
            cmd = [py, str(ROOT / "scripts" / "triton_fa_fwd.py"), "--arch", chip, "--out", str(out)]
            if causal:
                cmd.append("--causal")
            r = subprocess.run(cmd, capture_output=True, text=True,
                               env=dict(os.environ, TRITON_DEFAULT_FP_FUSION="1"))
            name = f"triton tutorial fwd {'causal' if causal else 'none'}"
            if r.returncode != 0:
                last = [l for l in r.stderr.strip().splitlines() if l.strip()][-1:] or ["?"]
                errors.append(f"Triton {chip} {'causal' if causal else 'non-causal'}: {last[0]}")
                continue
            meta = json.loads(r.stdout.strip().splitlines()[-1])
            asm = (out / meta["isa"]).read_text()
            md = amdgpu_metadata(asm)
            waves = meta["num_warps"]
            vg = (md["vgpr_count"] or 0) + (md["agpr_count"] or 0 if chip != "gfx1100" else 0)
            lds = max(meta.get("lds_bytes") or 0, md["group_segment_fixed_size"] or 0)
            row = {"kind": "triton", "chip": chip, "kernel": name, "dtype": "f16",
                   "head_dim": meta["head_dim"], "mask": "causal" if causal else "none",
                   "varlen": False, "block": waves * (32 if chip.startswith("gfx1") else 64),
                   "vgpr": md["vgpr_count"], "agpr": md["agpr_count"], "sgpr": md["sgpr_count"],
                   "spill_vgpr": md["vgpr_spill_count"], "spill_sgpr": md["sgpr_spill_count"],
                   "scratch": md["private_segment_fixed_size"], "lds": lds,
                   "occupancy": occupancy(chip, vg, lds, waves),
                   "triton": {k: meta[k] for k in ("triton_version", "block_m", "block_n", "num_warps",
                                                  "num_stages", "waves_per_eu")}}
            row.update(analyze(asm, meta["name"], chip, mca, workdir))
            rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Report


def fmt(v, spec="{}"):
    return "-" if v is None else spec.format(v)


HEADER = ("| kernel | VGPR | AGPR | SGPR | spills v/s | scratch | LDS | occ | mat/it | loop instr | "
          "mat share | mca cyc/it | cyc/mat | MAC/cyc | 16B loads |")
RULE = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"


def per_load(r):
    """'16-byte loads / global loads' on the steady-state path, '-' without loads there."""
    loads = r.get("hot_loads")
    return f"{r['hot_loads_16']}/{loads}" if loads else "-"


def pair(a, b, spec="{}"):
    """'a / b' (straight-line range / steady-state path), or one figure when both agree."""
    fa, fb = fmt(a, spec), fmt(b, spec)
    return fa if fa == fb else f"{fa} / {fb}"


def row_line(r, label=None):
    pct = lambda v: None if v is None else 100 * v
    mat = fmt(r["mat"]) if r["hot_mat"] == r["mat"] else f"{fmt(r['mat'])} / {fmt(r['hot_mat'])}"
    cells = [label or f"`{r['kernel']}`", fmt(r["vgpr"]), fmt(r["agpr"]), fmt(r["sgpr"]),
             f"{fmt(r['spill_vgpr'])}/{fmt(r['spill_sgpr'])}", fmt(r["scratch"]), fmt(r["lds"]),
             fmt(r["occupancy"]), mat, pair(r["loop_insts"], r["hot_insts"]),
             pair(pct(r["share"]), pct(r["hot_share"]), "{:.1f}%"),
             pair(r["mca_cycles"], r["hot_mca_cycles"], "{:.0f}"),
             pair(r["mca_per_mat"], r["hot_mca_per_mat"], "{:.1f}"),
             fmt(r["hot_macs_per_cycle"], "{:.0f}"), per_load(r)]
    return "| " + " | ".join(cells) + " |"


def git_commit(inputs):
    """HEAD, and whether the compiler sources or the input differ from it."""
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                       capture_output=True, text=True)
    paths = ["lib", "include", "tools", "cmake", "CMakeLists.txt"] + [str(p) for p in inputs]
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--"] + paths,
                           capture_output=True, text=True).stdout.strip()
    return (r.stdout.strip() or "unknown") + (" + uncommitted compiler sources or input" if dirty else "")


def label_of(r):
    if r["kind"] == "triton":
        t = r.get("triton", {})
        return f"Triton tutorial, {r['mask']} (BM {t.get('block_m')}, BN {t.get('block_n')})"
    return f"ours `{r['kernel']}`"


def per_8k(r, cycles, mat):
    """Cycles per 8192 MACs (one v_mfma_f32_32x32x8 of work): cyc/mat normalised by tile work."""
    if cycles is None or not r["macs"] or mat != r["mat"]:
        return None
    return cycles * 8192 / r["macs"]


def bar_table(rows, chips):
    out = ["## The bar: Triton's tutorial forward kernel vs ours, D128 f16 non-causal", "",
           "Spills must be 0 on our side; the llvm-mca figure compared is cycles per 8192 MACs "
           "(the work of one `v_mfma_f32_32x32x8`), i.e. cycles per matrix instruction for the same "
           "tile work, over the whole iteration range / over the steady-state path.", "",
           "| chip | Triton VGPR, spills | ours VGPR, spills | Triton cyc/8K MAC | ours cyc/8K MAC | "
           "ours fewer? |", "|---|---|---|---:|---:|---|"]
    for chip in chips:
        tri = next((r for r in rows if r["chip"] == chip and r["kind"] == "triton" and r["mask"] == "none"), None)
        ref = next((r for r in rows if r["chip"] == chip and r["kind"] == "reference" and r["mask"] == "none"), None)
        if not tri or not ref:
            continue
        t_all, t_hot = per_8k(tri, tri["mca_cycles"], tri["mat"]), per_8k(tri, tri["hot_mca_cycles"], tri["hot_mat"])
        o_all, o_hot = per_8k(ref, ref["mca_cycles"], ref["mat"]), per_8k(ref, ref["hot_mca_cycles"], ref["hot_mat"])
        verdict = []
        for what, o, t in (("range", o_all, t_all), ("steady", o_hot, t_hot)):
            if o is not None and t is not None:
                verdict.append(f"{what}: {'yes' if o < t else 'no'} ({o / t:.2f}x)")
        out.append(f"| {chip} | {fmt(tri['vgpr'])}, {fmt(tri['spill_vgpr'])} | {fmt(ref['vgpr'])}, "
                   f"{fmt(ref['spill_vgpr'])} | {pair(t_all, t_hot, '{:.1f}')} | {pair(o_all, o_hot, '{:.1f}')} | "
                   f"{'; '.join(verdict) or '-'} |")
    return out + [""]


def render(rows, args, meta):
    out = ["# AMD static report: attention kernels (flash_attn, flash_attn_bwd, paged_decode)", "",
           f"Generated {meta['date']} at commit `{meta['commit']}` by "
           f"`python3 scripts/amd_report.py --build {args.build} --out {args.out}"
           + "".join(f" --input {i}" for i in args.given_inputs)
           + (" --triton" if args.triton else "") + f"` from `{meta['input']}` (regenerate with the "
           "same command; nothing here is edited by hand).",
           f"Compiler: {meta['compiler']}. llvm-mca: `{meta['mca'] or 'not found'}`. "
           f"Triton: {meta['triton']}.", "",
           "Columns: VGPR/AGPR/SGPR per lane and spills (vgpr/sgpr) from the code object "
           "metadata; scratch = private bytes per lane; LDS = bytes per workgroup; occ = waves per "
           "SIMD; mat/it = matrix instructions (`v_mfma*`/`v_wmma*`) per KV-loop iteration; "
           "loop instr = instructions per iteration; mat share = mat/it over loop instr; mca cyc/it "
           "= llvm-mca cycles per iteration; cyc/mat = cycles per matrix instruction; MAC/cyc = "
           "multiply-accumulates (per wave) per llvm-mca cycle on the steady-state path; 16B loads = the global/buffer "
           "loads on the steady-state path that read 16 bytes a lane, of all its global loads (the others read "
           "block-table entries and other scalars; conditional blocks, such as prefetches, are off that path). "
           "`a / b` = over the whole iteration range (every block counted, as llvm-mca sees "
           "straight-line code) / over the steady-state path (no tail, softcap or masking blocks); "
           "one figure where both agree. Method and caveats below the tables.", ""]
    if any(r["kind"] == "triton" for r in rows):
        out += bar_table(rows, args.targets)
    for chip in args.targets:
        cmp_rows = [r for r in rows if r["chip"] == chip and (r["kind"] in ("triton", "reference") or (
            r["kind"] == "tessera" and r["head_dim"] == 128 and not r["varlen"]))]
        if any(r["kind"] != "tessera" for r in cmp_rows):
            ops = sorted({o for r in cmp_rows for o in r["mat_ops"]})
            out += [f"### {chip}: D128 side by side", "",
                    f"Matrix instructions: {', '.join('`' + o + '`' for o in ops) or '-'}.", "",
                    HEADER, RULE] + [row_line(r, label_of(r)) for r in cmp_rows] + [""]
    for chip in args.targets:
        ours = [r for r in rows if r["chip"] == chip and r["kind"] == "tessera"]
        ops = sorted({o for r in ours for o in r["mat_ops"]})
        out += [f"## {chip}: all kernels ({len(ours)})", "",
                f"Matrix instructions in the loops: {', '.join('`' + o + '`' for o in ops) or '-'}.", "",
                HEADER, RULE] + [row_line(r) for r in ours] + [""]
    notes = [f"- {r['chip']} `{r['kernel']}`: {r['note']}" for r in rows if r.get("note")]
    notes += [f"- {e}" for e in meta["errors"]]
    out += ["## Problems", ""] + (notes or ["None: every kernel compiled and every loop was measured."]) + [""]
    out += [METHOD]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="build directory with bin/tessera-compile")
    ap.add_argument("--out", default="docs/amd-report.md", help="the Markdown report to write")
    ap.add_argument("--input", action="append",
                    help="directive file (repeatable; default examples/attention.mlir, decode.mlir and "
                         "decode_fp8.mlir, whose fp8 caches each chip gets in its own e4m3 format)")
    ap.add_argument("--targets", default=",".join(TARGETS), type=lambda s: s.split(","))
    ap.add_argument("--triton", action="store_true",
                    help="add Triton's tutorial forward kernel (D128 f16, each target) and the comparison rows")
    ap.add_argument("--triton-python", help="a Python with triton installed (default: search)")
    ap.add_argument("--mca", default=MCA_DEFAULT if os.path.exists(MCA_DEFAULT) else shutil.which("llvm-mca"))
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--keep", help="keep bundles and loop files in this directory")
    args = ap.parse_args(argv)
    args.given_inputs = args.input or []
    args.input = args.input or [str(ROOT / "examples" / f)
                                for f in ("attention.mlir", "decode.mlir", "decode_fp8.mlir")]

    compiler = Path(args.build) / "bin" / "tessera-compile"
    if not compiler.exists():
        sys.exit(f"amd_report: {compiler} not found (build first)")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="amd_report_"))
    work.mkdir(parents=True, exist_ok=True)
    compiler = snapshot(compiler, work)
    errors = []
    ref_src = work / "reference.mlir"
    ref_src.write_text(REFERENCE_MLIR)
    # One bundle per chip from every input, fp8 KV caches in the chip's e4m3 format (scripts/examples.sh's rule).
    text = "\n".join(Path(p).read_text() for p in args.input)
    jobs = []
    for chip in args.targets:
        src = work / f"input_{chip}.mlir"
        src.write_text(text.replace("kv_dtype = f8E4M3FN,", "kv_dtype = f8E4M3FNUZ,") if chip == "gfx942" else text)
        jobs.append((src, chip, work / f"bundle_{chip}", "tessera"))
    if args.triton:
        jobs += [(ref_src, chip, work / f"reference_{chip}", "reference") for chip in args.targets]
    compiler_name = "?"
    rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as ex:
        futs = [(j, ex.submit(compile_bundle, compiler, j[0], j[1], j[2])) for j in jobs]
        for (src, chip, bundle, kind), f in futs:
            try:
                manifest = f.result()
            except RuntimeError as e:
                errors.append(str(e).strip().replace("\n", " "))
                continue
            compiler_name = manifest.get("compiler", compiler_name)
            rows += bundle_rows(manifest, bundle, chip, args.mca, work, kind)

    triton_note = "not requested (`--triton`)"
    if args.triton:
        py, ver = find_triton_python(args.triton_python)
        if not py:
            triton_note = "not available (no Python with `import triton` found)"
            errors.append("Triton rows missing: no Python with triton installed "
                          "(pip install triton; pass --triton-python)")
        else:
            triton_note = f"{ver} (PyPI wheel, compiled offline, `{py}`)"
            rows += triton_rows(py, [c for c in args.targets if c in ("gfx942", "gfx950", "gfx1100")],
                                args.mca, work, errors)
    order = {"triton": 0, "reference": 1, "tessera": 2}
    rows.sort(key=lambda r: (args.targets.index(r["chip"]), order[r["kind"]]))

    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit([Path(p).resolve() for p in args.input]), "compiler": compiler_name,
            "mca": args.mca, "triton": triton_note, "errors": errors,
            "input": ", ".join(os.path.relpath(p, ROOT) if Path(p).is_absolute() else p for p in args.input)}
    text = render(rows, args, meta)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}: {len(rows)} rows" + (f", {len(errors)} problems" if errors else ""))
    return 1 if not rows else 0


if __name__ == "__main__":
    sys.exit(main())

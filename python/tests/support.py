"""Test support: skip conditions (CUDA GPU, sim plugin, fake driver), synthetic bundles, and the tolerance rule of CORRECTNESS.md."""
import contextlib
import ctypes
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

try:
    import torch
except ImportError:
    torch = None
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

import tessera
from tessera.testing import check_tolerance

REPO = Path(__file__).resolve().parents[2]

if torch is None:
    CUDA_REASON = "no CUDA GPU: torch is not installed"
elif not torch.cuda.is_available():
    CUDA_REASON = "no CUDA GPU: torch.cuda.is_available() is False"
else:
    CUDA_REASON = None
requires_cuda = pytest.mark.skipif(CUDA_REASON is not None, reason=CUDA_REASON or "")
requires_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
requires_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="bf16 numpy arrays need ml_dtypes (not installed)")

DTYPES = ("f16", "bf16")
SIM_TARGETS = ("gfx942", "gfx950", "gfx1100", "sm_90")


def numpy_dtype(name):
    return {"f16": np.float16, "f32": np.float32, "bf16": ml_dtypes and ml_dtypes.bfloat16}[name]


def dropout_options(rng, dropout_p):
    """A call's dropout arguments: the rate and a random (seed, offset) whose words use all 64 bits (none for 0)."""
    if not dropout_p:
        return {}
    return dict(dropout_p=dropout_p, dropout_seed=tuple(int(x) for x in rng.integers(0, 1 << 64, 2, dtype=np.uint64)))


def torch_dtype(name):
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[name]


def sim_device(target):
    """The cached sim device for `target`, or a skip naming why the simulator is unavailable."""
    try:
        return tessera.device(f"sim:{target}")
    except tessera.BackendUnavailableError as e:
        pytest.skip(str(e).splitlines()[0])   # "sim backend plugin unavailable: cannot load ..."


def simulatable(target):
    """True when the bundle found for `target` has the kernel IR the simulator runs (dist/ leaves it out unless
    made with TESSERA_DIST_KERNEL_IR=1)."""
    directory = tessera.available_targets().get(target)
    if directory is None:
        return False
    manifest = json.loads((directory / "manifest.json").read_text())
    return all((directory / k.get("kernel_ir", "")).is_file() for k in manifest["kernels"])


def compiler_path():
    """tessera-compile of a build tree (TESSERA_BUILD_DIR, else build*/ in the checkout) as an absolute path (tests
    link to the build tree from elsewhere), or None."""
    build = os.environ.get("TESSERA_BUILD_DIR")
    candidates = ([Path(build) / "bin" / "tessera-compile"] if build else []) + \
        sorted(REPO.glob("build*/bin/tessera-compile"))
    return next((c.resolve() for c in candidates if c.is_file()), None)


def compile_bundles(folder, modules):
    """Compiles modules {target: MLIR text} with the build's tessera-compile, one process per target in parallel,
    into folder/<target>. Returns {target: error text} for the targets that failed."""
    procs = {}
    for target, text in modules.items():
        module = Path(folder) / f"{target}.mlir"
        module.write_text(text)
        procs[target] = subprocess.Popen([str(compiler_path()), str(module), f"--target={target}", "-o",
                                          str(Path(folder) / target)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
    errors = {}
    for target, proc in procs.items():
        stderr = proc.communicate()[1]
        if proc.returncode != 0 or not (Path(folder) / target / "manifest.json").is_file():
            errors[target] = f"exit status {proc.returncode}\n{stderr}"
    return errors


def sim_bundles(tmp_path_factory, name, modules):
    """The body of a sim suite's module fixture: skips without the sim plugin or a build tree's compiler, compiles
    `modules` ({target: MLIR text}) into a temporary folder searched first (TESSERA_BUNDLE_PATH) for the duration,
    and yields {target: compile error}."""
    try:
        tessera.device("sim:gfx942")
    except tessera.BackendUnavailableError as e:
        pytest.skip(str(e).splitlines()[0])
    if compiler_path() is None:
        pytest.skip("no tessera-compile in a build tree (TESSERA_BUILD_DIR or build*/) to compile the kernels")
    folder = tmp_path_factory.mktemp(name)
    errors = compile_bundles(folder, modules() if callable(modules) else modules)
    with bundles_searched_first(folder):
        yield errors


@contextlib.contextmanager
def bundles_searched_first(folder):
    """TESSERA_BUNDLE_PATH with `folder` first for the duration, then as it was."""
    saved = os.environ.get("TESSERA_BUNDLE_PATH")
    os.environ["TESSERA_BUNDLE_PATH"] = os.pathsep.join(filter(None, [str(folder), saved]))
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TESSERA_BUNDLE_PATH"]
        else:
            os.environ["TESSERA_BUNDLE_PATH"] = saved


def compile_default_bundles(targets, folder):
    """Compiles examples/gemm.mlir for each target into folder/<target>; a failing target is left out."""
    compiler, source = compiler_path(), REPO / "examples" / "gemm.mlir"
    if compiler is None or not source.is_file():
        return False
    for target in targets:
        subprocess.run([str(compiler), str(source), f"--target={target}", "-o", str(Path(folder) / target)],
                       capture_output=True, check=False)
    return True


def tolerance_report(out64, ref64, same64, abs_ab64):
    """None when the GEMM output passes tessera.testing.check_tolerance (CORRECTNESS.md), else why not."""
    result = check_tolerance(out64, ref64, same64, abs_ab64)
    return None if result.ok else f"{tuple(out64.shape)}: {result}"


# ---- Synthetic bundles and the fake driver (build tree only) ------------------------------------
def fake_driver_path():
    """libtessera_fake_driver.so (unittests/Runtime) from TESSERA_FAKE_DRIVER or a build tree, else None."""
    env, build = os.environ.get("TESSERA_FAKE_DRIVER"), os.environ.get("TESSERA_BUILD_DIR")
    if env:
        return Path(env)
    found = [Path(build) / "unittests/Runtime/libtessera_fake_driver.so"] if build else []
    found = [p for p in found if p.is_file()] + sorted(REPO.glob("build*/unittests/Runtime/libtessera_fake_driver.so"))
    return found[0] if found else None


def gemm_kernel_entry(dtype, out_type, transpose_b, code_ext):
    name = f"gemm_{dtype}_{out_type}_{'nt' if transpose_b else 'nn'}"
    attributes = {"dtype": dtype, "out_type": out_type}
    if transpose_b:
        attributes["transpose_b"] = True
    args = [{"name": "a", "type": "ptr", "dtype": dtype, "role": "input"},
            {"name": "b", "type": "ptr", "dtype": dtype, "role": "input"},
            {"name": "c", "type": "ptr", "dtype": out_type, "role": "output"}]
    args += [{"name": n, "type": "i64", "role": "size"} for n in ("M", "N", "K")]
    args += [{"name": n, "type": "i64", "role": "stride"} for n in ("lda", "ldb", "ldc")]
    return {"name": name, "entry": name, "directive": "wmma_gemm", "attributes": attributes,
            "code_object": f"{name}.{code_ext}", "block": [256, 1, 1],
            "grid": [["ceil_div", "N", 128], ["ceil_div", "M", 128], 1], "lds_bytes": 0, "args": args}


def write_gemm_bundle(directory, target):
    """A manifest with the eight default GEMM kernels (no code objects: enough for the sim backend)."""
    ext = "ptx" if target.startswith("sm_") else "hsaco"
    return write_bundle(directory, target,
                        [gemm_kernel_entry(d, o, t, ext) for d in DTYPES for o in (d, "f32") for t in (False, True)])


def write_bundle(directory, target, kernels, kernel_sets=()):
    """A manifest (no code objects: enough for the fake sim plugin) holding the given kernel and kernel set entries."""
    nvidia = target.startswith("sm_")
    manifest = {"format": "tessera-bundle", "version": 1, "target": target,
                "vendor": "nvidia" if nvidia else "amd", "code_object_format": "ptx" if nvidia else "hsaco",
                "kernels": kernels}
    if kernel_sets:
        manifest["kernel_sets"] = list(kernel_sets)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _ptx_param(kernel, arg):
    name = f"{kernel['entry']}_param_{arg['name']}"
    if arg["type"] == "tensor_map":   # a TMA descriptor, passed by value
        return f".align 64 .b8 {name}[128]"
    return f"{'.u64' if arg['type'] in ('ptr', 'i64') else '.u32'} {name}"


def write_ptx(directory, kernel):
    """A PTX stand-in the fake CUDA driver accepts: the entry with the kernel's parameters."""
    params = ",\n".join(f"  .param {_ptx_param(kernel, a)}" for a in kernel["args"])
    text = (f".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry {kernel['entry']}(\n{params}\n)\n"
            "{\n  ret;\n}\n")
    (Path(directory) / kernel["code_object"]).write_text(text)


class FakeLaunch(ctypes.Structure):
    """unittests/Runtime/FakeDriver.h: fake_launch."""
    _fields_ = [("api", ctypes.c_char * 8), ("entry", ctypes.c_char * 64), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("args", ctypes.c_ubyte * 256), ("args_size", ctypes.c_size_t)]


class FakeDriver:
    """The fake driver's recording interface (the runtime dlopens the same file, so both see one state)."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.fake_launch_at.restype = ctypes.POINTER(FakeLaunch)
        self.lib.fake_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        self.lib.fake_calls.argtypes = [ctypes.c_char_p]
        self.lib.fake_reset()

    def launches(self):
        return [self.lib.fake_launch_at(i).contents for i in range(self.lib.fake_launch_count())]

    @staticmethod
    def gemm_args(launch):
        """(a, b, c, M, N, K, lda, ldb, ldc) from a recorded GEMM launch."""
        return struct.unpack_from("<3Q6q", bytes(launch.args), 0)


# ---- Attention: synthetic flash_attn manifest entries (docs/flash_attn-abi.md) -------------------------------------
ATTN_MASKS = {"none": "none", "tl": "causal_top_left", "br": "causal_bottom_right"}


def flash_attn_args(dtype, varlen=False, features=("sliding_window", "softcap", "return_lse")):
    """The ABI's argument list for a flash_attn kernel with these features, as manifest entries."""
    args = [{"name": n, "type": "ptr", "dtype": dtype, "role": "input"} for n in ("q", "k", "v")]
    args.append({"name": "o", "type": "ptr", "dtype": dtype, "role": "output"})
    if "return_lse" in features:
        args.append({"name": "lse", "type": "ptr", "dtype": "f32", "role": "output"})
    if varlen:
        args += [{"name": n, "type": "ptr", "dtype": "i32", "role": "input"} for n in ("cu_seqlens_q", "cu_seqlens_k")]
    if "seqused" in features:
        args += [{"name": n, "type": "ptr", "dtype": "i32", "role": "input"} for n in ("seqused_q", "seqused_k")]
    if "paged_kv" in features:
        args.append({"name": "block_table", "type": "ptr", "dtype": "i32", "role": "input"})
    if "dropout" in features:
        args.append({"name": "rng_state", "type": "ptr", "dtype": "i32", "role": "input"})
    args += [{"name": n, "type": "i64", "role": "size"} for n in ("B", "Sq", "Sk", "Hq", "Hkv")]
    args += [{"name": f"{t}_stride_{a}", "type": "i64", "role": "stride"} for t in "qkvo" for a in "bsh"]
    if "return_lse" in features:
        args += [{"name": f"lse_stride_{a}", "type": "i64", "role": "stride"} for a in "bh"]
    if "paged_kv" in features:
        args += [{"name": "block_table_stride", "type": "i64", "role": "stride"},
                 {"name": "page_size", "type": "i64", "role": "size"}]
    args.append({"name": "scale", "type": "f32", "role": "scale"})
    if "sliding_window" in features:
        args += [{"name": n, "type": "i64", "role": "param"} for n in ("window_left", "window_right")]
    if "softcap" in features:
        args.append({"name": "softcap", "type": "f32", "role": "param"})
    if "dropout" in features:
        args.append({"name": "dropout_p", "type": "f32", "role": "param"})
    return args


def flash_attn_kernel_entry(name, dtype, head_dim, mask="none", varlen=False,
                            features=("sliding_window", "softcap", "return_lse"), code_ext="hsaco", tile_m=64):
    attributes = {"dtype": dtype, "head_dim": head_dim, "mask": mask}
    attributes.update({f: True for f in features})
    if varlen:
        attributes["varlen"] = True
    return {"name": name, "entry": name, "directive": "flash_attn", "attributes": attributes,
            "code_object": f"{name}.{code_ext}", "block": [256, 1, 1],
            "grid": [["ceil_div", "Sq", tile_m], "Hq", "B"], "lds_bytes": 0,
            "args": flash_attn_args(dtype, varlen, features)}


BWD_FEATURES = ("sliding_window", "softcap")


def flash_attn_bwd_kernel_set(name, dtype, head_dim, mask="none", varlen=False, deterministic=False,
                              features=BWD_FEATURES, code_ext="hsaco", vector_rows=False):
    """(kernel entries, kernel set entry) of a flash_attn_bwd kernel set with the ABI's arguments (docs/python.md):
    name_pre, name_main, then name_dq (deterministic) or name_dq_convert, sharing the workspaces bwd_stats and,
    unless deterministic, dq_accum (zeroed). Which kernel takes which argument is this fake's own choice; the set's
    union is the ABI. vector_rows: the main kernel streams q and do with 16-byte copies, as on sm_90 (their strides
    must be multiples of 8: the manifest's `divisible`)."""
    def ptrs(names, dt, role):
        return [{"name": n, "type": "ptr", "dtype": dt, "role": role} for n in names]

    def strides(tensors):
        return [{"name": f"{t}_stride_{a}", "type": "i64", "role": "stride"} for t in tensors for a in "bsh"]

    def sizes(names):
        return [{"name": n, "type": "i64", "role": "size"} for n in names + (("total_q", "total_k") if varlen else ())]
    rows = "total_q" if varlen else ["mul", "B", "Sq"]
    workspaces = [{"name": "bwd_stats", "type": "ptr", "dtype": "f32", "role": "workspace",
                   "bytes": ["mul", "Hq", ["mul", rows, 8]]}]
    if not deterministic:
        workspaces.append({"name": "dq_accum", "type": "ptr", "dtype": "f32", "role": "workspace",
                           "bytes": ["mul", "Hq", ["mul", rows, 4 * head_dim]], "zero": True})
    cu_q = ptrs(["cu_seqlens_q"] * varlen, "i32", "input")
    cu = ptrs(["cu_seqlens_q", "cu_seqlens_k"] if varlen else [], "i32", "input")
    lse_strides = [{"name": f"lse_stride_{a}", "type": "i64", "role": "stride"} for a in "bh"]
    params = [{"name": "scale", "type": "f32", "role": "scale"}]
    if "sliding_window" in features:
        params += [{"name": n, "type": "i64", "role": "param"} for n in ("window_left", "window_right")]
    if "softcap" in features:
        params.append({"name": "softcap", "type": "f32", "role": "param"})
    everything = ptrs("qkv", dtype, "input") + ptrs(["do"], dtype, "input") + ptrs(["lse"], "f32", "input")
    pre = ptrs(["o", "do"], dtype, "input") + ptrs(["lse"], "f32", "input") + cu_q + workspaces + \
        sizes(("B", "Sq", "Hq")) + strides(("o", "do")) + lse_strides
    main = everything + ptrs(["dk", "dv"], dtype, "output") + cu + workspaces + \
        sizes(("B", "Sq", "Sk", "Hq", "Hkv")) + strides("qkv") + strides(("do", "dk", "dv")) + lse_strides + params
    if deterministic:
        last, last_args = "dq", everything + ptrs(["dq"], dtype, "output") + cu + workspaces + \
            sizes(("B", "Sq", "Sk", "Hq", "Hkv")) + strides(("q", "k", "v", "do", "dq")) + lse_strides + params
    else:
        last, last_args = "dq_convert", workspaces + ptrs(["dq"], dtype, "output") + cu_q + \
            sizes(("B", "Sq", "Hq")) + strides(["dq"]) + params[:1]
    attributes = {"dtype": dtype, "head_dim": head_dim, "mask": mask, **{f: True for f in features}}
    attributes.update({a: True for a, on in (("varlen", varlen), ("deterministic", deterministic)) if on})
    kernels = []
    for part, args, grid in (("pre", pre, [["ceil_div", "Sq", 64], "Hq", "B"]),
                             ("main", main, [["ceil_div", "Sk", 64], "Hkv", "B"]),
                             (last, last_args, [["ceil_div", "Sq", 64], "Hq", "B"])):
        kernel = f"{name}_{part}"
        kernels.append({"name": kernel, "entry": kernel, "directive": "flash_attn_bwd", "attributes": attributes,
                        "code_object": f"{kernel}.{code_ext}", "block": [256, 1, 1], "grid": grid, "lds_bytes": 0,
                        "args": args})
        if part == "main" and vector_rows:
            kernels[-1]["divisible"] = [{"arg": f"{t}_stride_{a}", "by": 8} for t in ("q", "do") for a in "bsh"]
    return kernels, {"name": name, "directive": "flash_attn_bwd", "attributes": attributes,
                     "kernels": [k["name"] for k in kernels]}


def unpack_args(kernel_entry, data):
    """{name: value} from a recorded argument buffer: the manifest's args at their natural alignment."""
    sizes = {"ptr": ("Q", 8), "i64": ("q", 8), "i32": ("i", 4), "f32": ("f", 4)}
    values, offset = {}, 0
    for arg in kernel_entry["args"]:
        fmt, size = sizes[arg["type"]]
        offset = (offset + size - 1) // size * size
        values[arg["name"]] = struct.unpack_from("<" + fmt, bytes(data), offset)[0]
        offset += size
    return values


# ---- Decode: synthetic paged_decode kernel sets (docs/decode.md) ----------------------------------------------------
DECODE_FEATURES = ("sliding_window", "softcap", "return_lse", "split_kv")


def paged_decode_kernel_set(name, dtype, head_dim, block_size, mask="causal_bottom_right", features=DECODE_FEATURES,
                            rows=16, code_ext="hsaco", vector_rows=False, cache_writer=False, kv_dtype=None):
    """(kernel entries, kernel set entry) of a paged_decode kernel set with docs/decode.md's ABI: name_decode, then
    with split_kv name_combine, sharing the workspace decode_partials (not zeroed). Grids and workspace bytes are the
    ABI's; `rows` is the decode kernel's query rows per workgroup (the divisor of its grid's ceil_div). With
    `cache_writer`, the kernel entries end with the plain kernel name_cache_write (not in the set). `kv_dtype`: an
    fp8 cache format (per-tensor scales k_scale and v_scale)."""
    split, has_lse = "split_kv" in features, "return_lse" in features

    def arg(names, kind, role, dt=None, **extra):
        return [{"name": n, "type": kind, "role": role, **({"dtype": dt} if dt else {}), **extra} for n in names]

    def strides(tensor, axes):
        return arg([f"{tensor}_stride_{a}" for a in axes], "i64", "stride")
    partials = arg(["decode_partials"] * split, "ptr", "workspace", "f32",   # 4 * num_splits * B * Hq * Sq * (D + 1)
                   bytes=["mul", "num_splits", ["mul", ["mul", "B", "Hq"], ["mul", "Sq", 4 * (head_dim + 1)]]])
    outputs = arg(["o"], "ptr", "output", dtype) + arg(["lse"] * has_lse, "ptr", "output", "f32")
    output_strides = strides("o", "bsh") + (strides("lse", "bh") if has_lse else [])
    decode = (arg(["q"], "ptr", "input", dtype) + arg(["k_cache", "v_cache"], "ptr", "input", kv_dtype or dtype) +
              arg(["block_table", "cache_seqlens"], "ptr", "input", "i32") +
              arg(["k_scale", "v_scale"] * bool(kv_dtype), "ptr", "input", "f32") + outputs + partials +
              arg(["B", "Sq", "Hq", "Hkv"] + ["num_splits"] * split, "i64", "size") + strides("q", "bsh") +
              strides("k", ("page", "token", "head")) + strides("v", ("page", "token", "head")) +
              arg(["block_table_stride"], "i64", "stride") + output_strides + arg(["scale"], "f32", "scale") +
              arg(["window_left"] * ("sliding_window" in features), "i64", "param") +
              arg(["softcap"] * ("softcap" in features), "f32", "param"))
    parts = {"decode": (decode, ["num_splits" if split else 1,
                                 ["mul", "Hkv", ["ceil_div", ["mul", ["div", "Hq", "Hkv"], "Sq"], rows]], "B"])}
    if split:   # with one split, _decode writes o and lse itself and _combine's grid is empty
        # min(max(num_splits - 1, 0), 1) of docs/decode.md: manifest literals are >= 0, so min(num_splits / 2, 1)
        combine = partials + outputs + arg(["B", "Sq", "Hq", "num_splits"], "i64", "size") + output_strides
        parts["combine"] = (combine, [["ceil_div", ["mul", "Hq", "Sq"], 4], "B",
                                      ["min", ["div", "num_splits", 2], 1]])
    attributes = {"dtype": dtype, "head_dim": head_dim, "block_size": block_size, "mask": mask,
                  **{f: True for f in features}}
    if kv_dtype:
        attributes.update(kv_dtype=kv_dtype, kv_scale="per_tensor")
    kernels = [{"name": f"{name}_{part}", "entry": f"{name}_{part}", "directive": "paged_decode",
                "attributes": attributes, "code_object": f"{name}_{part}.{code_ext}", "block": [256, 1, 1],
                "grid": grid, "lds_bytes": 0, "args": args} for part, (args, grid) in parts.items()]
    kernels[0]["divisible"] = [{"arg": "Hq", "by": "Hkv"}]
    if vector_rows:   # the cache's rows copied as 16-byte vectors (sm_90)
        kernels[0]["divisible"] += [{"arg": f"{t}_stride_{a}", "by": 8} for t in "kv" for a in ("page", "token", "head")]
    kernel_set = {"name": name, "directive": "paged_decode", "attributes": attributes,
                  "kernels": [k["name"] for k in kernels]}
    if cache_writer:
        args = (arg(["key", "value"], "ptr", "input", dtype) + arg(["k_cache", "v_cache"], "ptr", "inout", dtype) +
                arg(["slot_mapping"], "ptr", "input", "i64") + arg(["num_tokens", "Hkv"], "i64", "size") +
                strides("key", "th") + strides("value", "th") + strides("k", ("page", "token", "head")) +
                strides("v", ("page", "token", "head")))
        kernels.append({"name": f"{name}_cache_write", "entry": f"{name}_cache_write", "directive": "paged_decode",
                        "attributes": attributes, "code_object": f"{name}_cache_write.{code_ext}",
                        "block": [128, 1, 1], "grid": ["num_tokens", 1, 1], "lds_bytes": 0, "args": args})
    return kernels, kernel_set

#!/usr/bin/env python3
"""Runs the example bundles (GEMM, attention forward and backward, paged decode, the combine of attention over parts
of the keys): on the GPU for its own target when present, else on the simulator."""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import tessera  # noqa: E402

SHAPES = [(17, 33, 40), (128, 128, 128), (255, 64, 1000)]
# (B, Sq, Sk, Hq, Hkv, D, causal): tails, Sq != Sk both ways, GQA.
ATTENTION = [(1, 17, 33, 2, 1, 64, True), (2, 70, 50, 4, 2, 128, False), (1, 130, 130, 3, 3, 32, True)]
# (B, Sq, Sk, Hq, Hkv, D, causal, deterministic): the backward, judged by CORRECTNESS.md's rule (3x).
BACKWARD = [(1, 37, 53, 3, 1, 64, True, False), (1, 40, 23, 2, 2, 32, False, True)]
# (cache_seqlens, Sq, Hq, Hkv, D, block_size, num_splits, fp8): paged decode, judged by CORRECTNESS.md's rule (2x);
# fp8 "token": the caches and their per-token scales written by tessera.paged_cache_write, as a server fills them;
# "products": written with per-tensor scales, decoded with fp8_products (gfx942, gfx950, sm_90, sm_90a:
# FP8_PRODUCTS_TARGETS).
DECODE = [((37, 1, 80), 1, 8, 2, 128, 16, 3, None), ((9, 70), 2, 4, 1, 64, 64, 1, None),
          ((37, 1, 80), 1, 8, 2, 128, 16, 3, "token"), ((37, 1, 80), 1, 8, 2, 128, 16, 3, "products")]
FP8_PRODUCTS_TARGETS = ("gfx942", "gfx950", "sm_90", "sm_90a")
# (B, Sq, key parts, H, D): attention over each part of the keys (flash_attn with its LSE) merged by attn_combine,
# against attention over all of them (context parallelism's combine step).
COMBINE = [(2, 9, (20, 0, 37), 4, 64)]


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


def run_attention(target, gpu, B, Sq, Sk, Hq, Hkv, D, causal, rng):
    q = rng.standard_normal((B, Sq, Hq, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, Sk, Hkv, D)).astype(np.float16) for _ in range(2))
    ref = tessera.testing.attention_reference(q, k, v, causal=causal)[0]
    if gpu:
        import torch
        o = tessera.flash_attn(*(torch.from_numpy(x).cuda() for x in (q, k, v)), causal=causal).cpu().numpy()
    else:
        o = tessera.flash_attn(q, k, v, causal=causal, device=f"sim:{target}")
    return float(np.abs(o.astype(np.float64) - ref).max())


def run_backward(target, gpu, B, Sq, Sk, Hq, Hkv, D, causal, deterministic, rng):
    """(max error of dq, dk, dv against float64, whether each is within the tolerance rule)."""
    q, do = (rng.standard_normal((B, Sq, Hq, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((B, Sk, Hkv, D)).astype(np.float16) for _ in range(2))
    ref = tessera.testing.attention_backward_reference(q, k, v, do, causal=causal)
    same = tessera.testing.attention_backward_reference(q, k, v, do, causal=causal, precision="same")
    if gpu:
        import torch
        q, k, v, do = (torch.from_numpy(x).cuda() for x in (q, k, v, do))
        with torch.no_grad():
            o, lse = tessera.flash_attn(q, k, v, causal=causal, return_lse=True)
            grads = [g.cpu().numpy() for g in tessera.flash_attn_bwd(q, k, v, o, do, lse, causal=causal,
                                                                     deterministic=deterministic)]
    else:
        device = f"sim:{target}"
        o, lse = tessera.flash_attn(q, k, v, causal=causal, return_lse=True, device=device)
        grads = tessera.flash_attn_bwd(q, k, v, o, do, lse, causal=causal, deterministic=deterministic, device=device)
    check = tessera.testing.check_attention_backward(grads, ref, same)
    err = max(float(np.abs(g.astype(np.float64) - r).max()) for g, r in zip(grads, ref[:3]))
    return err, check.ok


def run_decode(target, gpu, lens, Sq, Hq, Hkv, D, block_size, num_splits, fp8, rng):
    """(max error against float64, whether it is within the tolerance rule) of tessera.paged_decode over a cache
    whose pages are a random choice of three times the needed ones (fp8: e4m3 pages that tessera.paged_cache_write
    fills from f16 rows, with per-token scales it computes, or for "products" per-tensor ones)."""
    blocks = max(-(-n // block_size) for n in lens)
    pages = 3 * len(lens) * blocks
    table = rng.permutation(pages)[:len(lens) * blocks].reshape(len(lens), blocks).astype(np.int32)
    q = rng.standard_normal((len(lens), Sq, Hq, D)).astype(np.float16)
    device = None if gpu else f"sim:{target}"
    torch = __import__("torch") if gpu else None
    cuda = (lambda x: torch.from_numpy(x).cuda()) if gpu else (lambda x: x)   # noqa: E731
    host = (lambda x: x.cpu().numpy()) if gpu else (lambda x: x)            # noqa: E731
    scales = {}
    if fp8:
        import ml_dtypes
        fp8_type = ml_dtypes.float8_e4m3fnuz if target == "gfx942" else ml_dtypes.float8_e4m3fn
        # Every token's key and value rows, written into their slots with their own scales.
        slots = []
        for b, n in enumerate(lens):
            t = np.arange(n)
            slots.append(table[b, t // block_size] * block_size + t % block_size)
        slots = np.concatenate(slots).astype(np.int64)
        rows = [rng.standard_normal((len(slots), Hkv, D)).astype(np.float16) for _ in range(2)]
        k, v = (cuda(np.zeros((pages, block_size, Hkv, D), np.uint8)) for _ in range(2))
        k, v = (x.view(torch.float8_e4m3fn if gpu else fp8_type) for x in (k, v))
        shape = (pages, Hkv, block_size) if fp8 == "token" else (1,)
        scales = {name: cuda(np.full(shape, 0.02, np.float32)) for name in ("k_scale", "v_scale")}
        tessera.paged_cache_write(*(cuda(x) for x in rows), k, v, cuda(slots), **scales, device=device)
    else:
        k, v = (cuda(rng.standard_normal((pages, block_size, Hkv, D)).astype(np.float16)) for _ in range(2))
    lens = np.array(lens, np.int32)
    products = fp8 == "products"
    o = host(tessera.paged_decode(cuda(q), k, v, cuda(table), cuda(lens), num_splits=num_splits, **scales,
                                  fp8_products=products, device=device))
    k, v = (host(x.view(torch.uint8)).view(fp8_type) if gpu and fp8 else host(x) for x in (k, v))
    scales = {name: host(x) for name, x in scales.items()}
    ref = tessera.testing.paged_decode_reference(q, k, v, table, lens, **scales)
    same = tessera.testing.paged_decode_reference(q, k, v, table, lens, **scales, precision="same",
                                                  fp8_products=products)
    return float(np.abs(o.astype(np.float64) - ref.o).max()), tessera.testing.check_attention(o, ref, same).ok


def run_combine(target, gpu, B, Sq, parts, H, D, rng):
    """Max error against float64 attention over every key of attn_combine merging flash_attn over each part."""
    q = rng.standard_normal((B, Sq, H, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, sum(parts), H, D)).astype(np.float16) for _ in range(2))
    device = None if gpu else f"sim:{target}"
    torch = __import__("torch") if gpu else None
    cuda = (lambda x: torch.from_numpy(x).cuda()) if gpu else (lambda x: x)   # noqa: E731
    host = (lambda x: x.cpu().numpy()) if gpu else (lambda x: x)            # noqa: E731
    outs, lses, start = [], [], 0
    for n in parts:
        if n:
            part = (cuda(np.ascontiguousarray(x[:, start:start + n])) for x in (k, v))
            o, lse = (host(x) for x in tessera.flash_attn(cuda(q), *part, return_lse=True, device=device))
        else:   # a device without keys: nothing to contribute
            o, lse = np.zeros(q.shape, np.float16), np.full((B, H, Sq), -np.inf, np.float32)
        outs.append(o.astype(np.float32))
        lses.append(np.swapaxes(lse, 1, 2))
        start += n
    o, _ = tessera.attn_combine(cuda(np.stack(outs)), cuda(np.ascontiguousarray(np.stack(lses))), device=device)
    ref = tessera.testing.attention_reference(q, k, v).o
    return float(np.abs(host(o).astype(np.float64) - ref).max())


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
    skipped = []
    for target in args.targets:
        arch_specific = target.startswith("sm_") and target.endswith("a")   # sm_90a: wgmma/TMA
        gpu = gpu_arch is not None and target in (gpu_arch, gpu_arch + "a")
        if arch_specific and not gpu:
            skipped.append(f"{target}: compiled; its wgmma/TMA kernels run on an {target[:-1]} GPU only (the "
                           "simulator has neither)")
            continue
        for m, n, k in SHAPES:
            err = run(target, gpu, m, n, k, rng)
            passed = err < 1e-3
            ok &= passed
            rows.append((target, "gpu" if gpu else "sim", f"gemm {m}x{n}x{k}", err, passed))
        for B, Sq, Sk, Hq, Hkv, D, causal in ATTENTION:
            err = run_attention(target, gpu, B, Sq, Sk, Hq, Hkv, D, causal, rng)
            passed = err < 5e-3  # f16 output rounding of values of magnitude ~1
            ok &= passed
            shape = f"attn {B}x{Sq}x{Sk} H{Hq}/{Hkv} D{D}{' causal' if causal else ''}"
            rows.append((target, "gpu" if gpu else "sim", shape, err, passed))
        for B, Sq, Sk, Hq, Hkv, D, causal, det in BACKWARD:
            err, passed = run_backward(target, gpu, B, Sq, Sk, Hq, Hkv, D, causal, det, rng)
            ok &= passed
            shape = f"attn bwd {B}x{Sq}x{Sk} H{Hq}/{Hkv} D{D}{' causal' if causal else ''}{' det' if det else ''}"
            rows.append((target, "gpu" if gpu else "sim", shape, err, passed))
        for lens, Sq, Hq, Hkv, D, block_size, splits, fp8 in DECODE:
            if fp8 == "products" and target not in FP8_PRODUCTS_TARGETS:
                continue
            err, passed = run_decode(target, gpu, lens, Sq, Hq, Hkv, D, block_size, splits, fp8, rng)
            ok &= passed
            shape = f"decode {len(lens)}x{Sq} H{Hq}/{Hkv} D{D} b{block_size} s{splits}{' fp8/' + fp8 if fp8 else ''}"
            rows.append((target, "gpu" if gpu else "sim", shape, err, passed))
        for B, Sq, parts, H, D in COMBINE:
            err = run_combine(target, gpu, B, Sq, parts, H, D, rng)
            passed = err < 5e-3  # the parts' f16 outputs
            ok &= passed
            shape = f"combine {B}x{Sq} keys {'+'.join(map(str, parts))} H{H} D{D}"
            rows.append((target, "gpu" if gpu else "sim", shape, err, passed))
    print(f"{'target':8} {'where':5} {'kernel':40} {'max error':>10}  result")
    for target, where, shape, err, passed in rows:
        print(f"{target:8} {where:5} {shape:40} {err:10.2e}  {'ok' if passed else 'FAIL'}")
    for line in skipped:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

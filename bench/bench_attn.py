#!/usr/bin/env python3
"""Attention benchmark on a CUDA GPU: tessera.flash_attn vs torch SDPA's FlashAttention-2 and cuDNN backends on the same
inputs in one run, each output checked, after the host time per call of each; table last, JSON to $TESSERA_BENCH_OUT.
--backward: the backward instead (tessera.flash_attn_bwd, non-deterministic and deterministic, against the SDPA
backends' backward through autograd), gradients checked against FlashAttention-2's.
--features: what each of FlashAttention's options costs: tessera.flash_attn with it against the same call without it
(alternating rounds, one run), its output checked against float64 on sampled rows.
--dropout: dropout's cost, forward and backward: tessera with dropout_p against itself without and against SDPA's
FlashAttention-2 with and without dropout, in one run (the forward's output checked against float64 with the mask)."""
import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))   # repo or dist layout
import tessera  # noqa: E402
from _common import begin, finish, median_ms, num as _num  # noqa: E402
from tessera import testing  # noqa: E402

TOKENS, HEADS = 16384, 32
SEQS = (1024, 2048, 4096, 8192, 16384)
TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
PEERS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
SAMPLE_ROWS = 48   # query rows checked against float64 per case (first, last, random)
HOST_CASE = (1, 128, 8, 128, "bf16")   # B, S, H, D, dtype: a kernel of a few µs, so each call costs its host time
HOST_CALLS = 200


def default_cases():
    """(B, S, Hq, Hkv, D, dtype, causal): B*S = 16k tokens, H 32, S 1k..16k, D 64/128, bf16/fp16, causal or not;
    then B1 Hq128 Hkv8 S8192 D128 causal (GQA)."""
    cases = [(TOKENS // S, S, HEADS, HEADS, D, dtype, causal)
             for dtype in ("bf16", "f16") for D in (128, 64) for causal in (False, True) for S in SEQS]
    return cases + [(1, 8192, 128, 8, 128, "bf16", True)]


def default_backward_cases():
    """The backward table: B4 S4096 and B2 S8192 at H32, D64 and D128, causal and full, bf16; GQA Hq128/Hkv8 S8192
    causal; each deterministic and not (the last field)."""
    cases = [(B, S, HEADS, HEADS, D, "bf16", causal) for D in (128, 64) for causal in (True, False)
             for B, S in ((4, 4096), (2, 8192))]
    cases.append((1, 8192, 128, 8, 128, "bf16", True))
    return [c + (det,) for c in cases for det in (False, True)]


# --features: (name, the call's options, the baseline's) on FEATURE_CASE: each timed against the same call without
# the option (head_dim 72, on tiles 80 wide with the columns past 72 masked, against head_dim 80 itself; V's head_dim
# 128 under Q's and K's 192 against 192 for all three; a paged cache: flash_attn_varlen on the pages against
# flash_attn_varlen on the packed keys).
FEATURE_CASE = (2, 4096, 32, 32, 128, "bf16", True)
FEATURES = (("window 1024 left", dict(window=(1024, 0)), {}), ("softcap 30", dict(softcap=30.0), {}),
            ("sinks", dict(sinks="per head"), {}), ("alibi", dict(alibi_slopes="per head"), {}),
            ("chunk 1024", dict(attention_chunk=1024), {}),
            ("head_dim 72 (tiles of 80)", dict(head_dim=72), dict(head_dim=80)),
            ("paged KV, pages of 16", dict(paged=16), {}), ("paged KV, pages of 256", dict(paged=256), {}),
            ("MLA head dims 192/128 (padded)", dict(head_dim=192, head_dim_v=128), dict(head_dim=192)))


# --dropout: (B, S, Hq, Hkv, D, dtype, causal), each forward and backward with DROPOUT_P and without.
DROPOUT_CASES = ((4, 4096, 32, 32, 128, "bf16", True), (4, 4096, 32, 32, 128, "bf16", False),
                 (4, 4096, 32, 32, 64, "bf16", True))
DROPOUT_P = 0.1


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", help="BxSxHqxHkvxD:dtype:causal|full,... e.g. 4x4096x32x32x128:bf16:causal "
                                   "(default: the fixed list incl. the GQA case)")
    p.add_argument("--rep-ms", type=int, default=100, help="time spent timing each function in a round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of timing, the functions alternating")
    p.add_argument("--backward", action="store_true", help="the backward table (--cases take a 4th field det|nondet)")
    p.add_argument("--features", action="store_true", help="the cost of each FlashAttention option (FEATURES)")
    p.add_argument("--dropout", action="store_true", help="dropout's cost against FlashAttention-2's (DROPOUT_CASES)")
    args = p.parse_args()
    if args.cases:
        cases = []
        for spec in args.cases.split(","):
            shape, dtype, mask, *mode = spec.split(":")
            B, S, Hq, Hkv, D = (int(x) for x in shape.split("x"))
            cases.append((B, S, Hq, Hkv, D, dtype, mask == "causal") + ((mode == ["det"],) if args.backward else ()))
        args.cases = cases
    else:
        args.cases = default_backward_cases() if args.backward else default_cases()
    return args


def peer_fn(backend, q, k, v, causal, gqa):
    """SDPA on (B, H, S, D) views of the (B, S, H, D) tensors with one backend. GQA: enable_gqa=True."""
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    kwargs = {"enable_gqa": True} if gqa else {}

    def run():
        with sdpa_kernel(PEERS[backend]):
            return sdpa(qt, kt, vt, is_causal=causal, **kwargs)
    return run


def host_us(fn, calls=HOST_CALLS, warmup=20):
    """Host µs per call of fn: `calls` back-to-back calls after a warm-up, timed with perf_counter without waiting for
    the GPU (it runs behind), then one synchronize outside the timing. A case whose GPU time is below this measures
    the host, not the kernel."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def host_overhead():
    """{case, calls, <who>_us or <who>_error} for tessera.flash_attn and each SDPA backend on HOST_CASE (not causal),
    called as the table times them. Unseeded inputs: the cases' generator stays as the seed gives it."""
    B, S, H, D, dtype = HOST_CASE
    q, k, v = (torch.randn(B, S, H, D, device="cuda").to(TORCH_DTYPES[dtype]) for _ in range(3))
    out = torch.empty_like(q)
    fns = {"tessera": lambda: tessera.flash_attn(q, k, v, out=out)}
    fns.update((name, peer_fn(name, q, k, v, False, False)) for name in PEERS)
    result = {"case": f"B{B} S{S} H{H} D{D} {dtype} full", "calls": HOST_CALLS}
    for who, fn in fns.items():
        try:
            result[f"{who}_us"] = host_us(fn)
        except (RuntimeError, tessera.TesseraError) as e:
            result[f"{who}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            torch.cuda.synchronize()
    return result


def host_line(h):
    times = [f"{who} {h[who + '_us']:.1f} µs" if who + "_us" in h else f"{who} failed ({h[who + '_error']})"
             for who in ("tessera", *PEERS)]
    return f"Host time per call ({h['case']}, {h['calls']} calls back to back): " + ", ".join(times)


def check(out, peer_out, q, k, v, causal, gen):
    """The tolerance rule of CORRECTNESS.md on a sample of query rows (float64 and same-precision references
    computed for those rows), no NaN/Inf anywhere, and agreement with the SDPA output everywhere: both within the
    bound of the reference means |tessera - SDPA| <= 2 x bound, plus one output ulp for their rounding."""
    S = q.shape[1]
    rows = torch.cat([torch.arange(0, 8), torch.arange(S - 8, S), torch.randint(0, S, (SAMPLE_ROWS - 16,),
                                                                                generator=gen)]).cuda()
    ref = testing.attention_reference(q, k, v, causal=causal, rows=rows)
    same = testing.attention_reference(q, k, v, causal=causal, rows=rows, precision="same")
    sample = testing.check_attention(out[:, rows], ref, same)
    bound = 2 * sample.o.reference_error + 1e-5 * float(ref.o_abs.max())
    finite = bool(torch.isfinite(out).all())
    diff = float((out.double() - peer_out.double()).abs().max()) if peer_out is not None else None
    peer_sample = testing.check_attention(peer_out[:, rows], ref, same) if peer_out is not None else None
    # Two correctly rounded outputs may sit one output ulp apart (bf16 2^-8, f16 2^-11 relative) on top of the
    # error bound (a 4096-token bf16 row once differed from FA-2 by exactly that, 0.00195 at |O| < 0.5).
    ulp = (2.0 ** -8 if out.dtype == torch.bfloat16 else 2.0 ** -11) * float(out.float().abs().max())
    agree = diff is None or diff <= 2 * bound + ulp
    return {"correct": sample.ok and finite and agree, "max_error_sampled": sample.o.max_error,
            "same_precision_error_sampled": sample.o.reference_error, "finite": finite,
            "max_diff_vs_peer": diff, "peer_max_error_sampled": peer_sample and peer_sample.o.max_error,
            "check": str(sample)}


def time_rounds(row, timed, flops, rep_ms, rounds):
    """row with each function's median time over `rounds` rounds that alternate the functions, so a clock or power
    state of the GPU that lasts a few hundred milliseconds falls on all of them; TFLOP/s and tessera/peer ratios."""
    for _ in range(rounds):
        for who, fn in timed.items():
            row.setdefault(f"{who}_ms_rounds", []).append(median_ms(fn, rep_ms))
    for who in timed:
        row[f"{who}_ms"] = statistics.median(row[f"{who}_ms_rounds"])
        row[f"{who}_tflops"] = flops / (row[f"{who}_ms"] * 1e-3) / 1e12
    for peer in PEERS:
        if "tessera_tflops" in row and f"{peer}_tflops" in row:
            row[f"ratio_{peer}"] = row["tessera_tflops"] / row[f"{peer}_tflops"]
    return row


def run_case(B, S, Hq, Hkv, D, dtype, causal, rep_ms, rounds, gen, row_gen):
    flops = 4 * B * Hq * S * S * D // (2 if causal else 1)
    row = {"B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "D": D, "dtype": dtype, "causal": causal, "flops": flops}
    dt = TORCH_DTYPES[dtype]
    q = torch.randn(B, S, Hq, D, device="cuda", generator=gen).to(dt)
    k = torch.randn(B, S, Hkv, D, device="cuda", generator=gen).to(dt)
    v = torch.randn(B, S, Hkv, D, device="cuda", generator=gen).to(dt)
    gqa = Hq != Hkv
    timed, peer_out = {}, {}
    for name in PEERS:
        fn = peer_fn(name, q, k, v, causal, gqa)
        try:
            peer_out[name] = fn().transpose(1, 2)
            torch.cuda.synchronize()
            timed[name] = fn
        except RuntimeError as e:   # a backend that does not take this case (it says why)
            row[f"{name}_error"] = str(e).splitlines()[0][:160]
            torch.cuda.synchronize()
    out = torch.full_like(q, float("nan"))
    try:
        tessera.flash_attn(q, k, v, causal=causal, out=out)
        torch.cuda.synchronize()
        checked_against = next((n for n in ("flash", "cudnn") if n in peer_out), None)
        row.update(check(out, peer_out.get(checked_against), q, k, v, causal, row_gen), checked_against=checked_against)
        timed["tessera"] = lambda: tessera.flash_attn(q, k, v, causal=causal, out=out)
    except tessera.TesseraError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    return time_rounds(row, timed, flops, rep_ms, rounds)


def peer_backward_fn(backend, q, k, v, do, causal, gqa):
    """The SDPA backend's backward alone: its forward recorded once, then autograd.grad of it (retain_graph)."""
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    kwargs = {"enable_gqa": True} if gqa else {}
    with sdpa_kernel(PEERS[backend]):
        o = sdpa(qt, kt, vt, is_causal=causal, **kwargs)
    dot = do.transpose(1, 2)

    def run():
        return torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True)
    return run


def check_gradients(grads, peer_grads):
    """No NaN/Inf, and each of dq, dk, dv within 2% of the largest FlashAttention-2 gradient element of its kind plus
    twice the difference that rounding both to the input type allows (a same-precision agreement test; the float64
    rule of CORRECTNESS.md is the GPU test suite's, at sizes a reference can take)."""
    out = {"finite": all(bool(torch.isfinite(g).all()) for g in grads)}
    ok = out["finite"]
    for name, g, peer in zip(("dq", "dk", "dv"), grads, peer_grads):
        peer = peer.transpose(1, 2)
        diff = float((g.double() - peer.double()).abs().max())
        scale = float(peer.double().abs().max())
        out[f"{name}_max_diff_vs_peer"] = diff
        ok &= diff <= 0.02 * scale + 1e-6
    out["correct"] = ok
    return out


def run_backward_case(B, S, Hq, Hkv, D, dtype, causal, deterministic, rep_ms, rounds, gen):
    flops = int(2.5 * 4 * B * Hq * S * S * D) // (2 if causal else 1)
    row = {"B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "D": D, "dtype": dtype, "causal": causal,
           "deterministic": deterministic, "flops": flops}
    dt = TORCH_DTYPES[dtype]
    q = torch.randn(B, S, Hq, D, device="cuda", generator=gen).to(dt)
    k = torch.randn(B, S, Hkv, D, device="cuda", generator=gen).to(dt)
    v = torch.randn(B, S, Hkv, D, device="cuda", generator=gen).to(dt)
    do = torch.randn(B, S, Hq, D, device="cuda", generator=gen).to(dt)
    timed, peer_grads = {}, {}
    for name in PEERS:
        try:
            fn = peer_backward_fn(name, q, k, v, do, causal, Hq != Hkv)
            peer_grads[name] = fn()
            torch.cuda.synchronize()
            timed[name] = fn
        except RuntimeError as e:
            row[f"{name}_error"] = str(e).splitlines()[0][:160]
            torch.cuda.synchronize()
    try:
        with torch.no_grad():
            o, lse = tessera.flash_attn(q, k, v, causal=causal, return_lse=True)
        grads = tuple(torch.full_like(x, float("nan")) for x in (q, k, v))

        def run():
            return tessera.flash_attn_bwd(q, k, v, o, do, lse, causal=causal, deterministic=deterministic,
                                          dq=grads[0], dk=grads[1], dv=grads[2])
        run()
        torch.cuda.synchronize()
        peer = next((n for n in ("flash", "cudnn") if n in peer_grads), None)
        if peer:
            row.update(check_gradients(grads, peer_grads[peer]), checked_against=peer)
        else:
            row.update(correct=all(bool(torch.isfinite(g).all()) for g in grads), checked_against=None)
        timed["tessera"] = run
    except tessera.TesseraError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    return time_rounds(row, timed, flops, rep_ms, rounds)


def backward_table(meta, rows):
    lines = [f"Attention backward: tessera.flash_attn_bwd vs SDPA FlashAttention-2 (flash) and cuDNN backward, same "
             f"inputs, TFLOP/s from the median of {meta.get('rounds', 1)} alternating rounds' median times "
             f"({meta['gpu']}, torch {meta['torch']}, cuDNN {meta['cudnn']}, commit {meta['commit']}, {meta['date']}); "
             "FLOPs = 2.5 x forward (10·B·Hq·S²·D), halved for causal; peers are non-deterministic",
             f"{'B x S x Hq/Hkv x D':>22} {'dtype':>5} {'mask':>6} {'mode':>6} {'tessera':>8} {'flash':>7} "
             f"{'cudnn':>7} {'t/flash':>7} {'t/cudnn':>7}  check"]
    for r in rows:
        shape = f"{r['B']}x{r['S']}x{r['Hq']}/{r['Hkv']}x{r['D']}"
        if "error" in r:
            verdict = r["error"]
        elif r["correct"]:
            verdict = "ok" + (f" (vs {r['checked_against']}: " + ", ".join(
                f"{g} {r[g + '_max_diff_vs_peer']:.3g}" for g in ("dq", "dk", "dv")) + ")" if r["checked_against"] else "")
        else:
            verdict = "WRONG (" + ", ".join(f"{g} {r.get(g + '_max_diff_vs_peer')}" for g in ("dq", "dk", "dv")) + \
                f"; finite {r['finite']})"
        notes = "".join(f"; {p}: {r[p + '_error']}" for p in PEERS if p + "_error" in r)
        lines.append(f"{shape:>22} {r['dtype']:>5} {'causal' if r['causal'] else 'full':>6} "
                     f"{'det' if r['deterministic'] else 'atomic':>6} {_num(r, 'tessera_tflops', '8.1f')} "
                     f"{_num(r, 'flash_tflops', '7.1f')} {_num(r, 'cudnn_tflops', '7.1f')} "
                     f"{_num(r, 'ratio_flash', '7.2f')} {_num(r, 'ratio_cudnn', '7.2f')}  {verdict}{notes}")
    return "\n".join(lines)


def main_backward(args, meta):
    gen = torch.Generator(device="cuda").manual_seed(meta["seed"])
    rows = []
    for case in args.cases:
        r = run_backward_case(*case, args.rep_ms, args.rounds, gen)
        rows.append(r)
        B, S, Hq, Hkv, D, dtype, causal, det = case
        print(f"  bwd B{B} S{S} H{Hq}/{Hkv} D{D} {dtype} {'causal' if causal else 'full'} "
              f"{'det' if det else 'atomic'}: " + (r.get("error") or (
                  f"tessera {r['tessera_tflops']:.1f} TFLOP/s, flash {_num(r, 'flash_tflops', '.1f')}, "
                  f"cudnn {_num(r, 'cudnn_tflops', '.1f')}, {'ok' if r['correct'] else 'WRONG'}")), flush=True)
        torch.cuda.empty_cache()
    return finish("bench_attn_bwd", meta, rows, backward_table(meta, rows))


def table(meta, rows):
    lines = [f"Attention forward: tessera vs SDPA FlashAttention-2 (flash) and cuDNN, same inputs, TFLOP/s from the "
             f"median of {meta.get('rounds', 1)} alternating rounds' median times ({meta['gpu']}, torch {meta['torch']}, cuDNN {meta['cudnn']}, commit {meta['commit']}, "
             f"{meta['date']}); FLOPs = 4·B·Hq·S²·D, halved for causal",
             host_line(meta["host_us_per_call"]),
             f"{'B x S x Hq/Hkv x D':>22} {'dtype':>5} {'mask':>6} {'tessera':>8} {'flash':>7} {'cudnn':>7} "
             f"{'t/flash':>7} {'t/cudnn':>7}  check"]
    for r in rows:
        shape = f"{r['B']}x{r['S']}x{r['Hq']}/{r['Hkv']}x{r['D']}"
        if "error" in r:
            verdict = r["error"]
        elif r["correct"]:
            verdict = f"ok (max err {r['max_error_sampled']:.3g}, vs {r['checked_against']} {r['max_diff_vs_peer']:.3g})"
        else:
            verdict = (f"WRONG ({r['check']}; finite {r['finite']}; max diff vs {r['checked_against']} "
                       f"{r['max_diff_vs_peer']})")
        notes = "".join(f"; {p}: {r[p + '_error']}" for p in PEERS if p + "_error" in r)
        lines.append(f"{shape:>22} {r['dtype']:>5} {'causal' if r['causal'] else 'full':>6} "
                     f"{_num(r, 'tessera_tflops', '8.1f')} {_num(r, 'flash_tflops', '7.1f')} "
                     f"{_num(r, 'cudnn_tflops', '7.1f')} {_num(r, 'ratio_flash', '7.2f')} "
                     f"{_num(r, 'ratio_cudnn', '7.2f')}  {verdict}{notes}")
    return "\n".join(lines)


def feature_inputs(B, S, Hq, Hkv, D, dtype, gen, options):
    """q, k, v and the call's keyword arguments, per-head tensors made for 'per head' and head_dim overridden."""
    D = options.get("head_dim", D)
    dt = TORCH_DTYPES[dtype]
    q, k, v = (torch.randn(B, S, H, d, device="cuda", generator=gen).to(dt)
               for H, d in ((Hq, D), (Hkv, D), (Hkv, options.get("head_dim_v", D))))
    kwargs = {}
    for name, value in options.items():
        if value == "per head":   # sinks: standard normal; ALiBi: the paper's slopes 2^(-8 h / H)
            value = (torch.randn(Hq, device="cuda", generator=gen) if name == "sinks" else
                     2.0 ** (-8.0 * torch.arange(1, Hq + 1, device="cuda") / Hq)).float()
        if name not in ("head_dim", "head_dim_v", "paged"):
            kwargs[name] = value
    return q, k, v, kwargs


def paged_calls(q, k, v, page_size, causal, gen):
    """tessera.flash_attn_varlen of (B, S) q, k, v with k and v as pages of page_size at shuffled places, and the
    same call on the packed k and v: (paged, packed) callables, each giving O as (B, S, Hq, D)."""
    B, S, Hq, D = q.shape
    cu = torch.arange(0, B + 1, device="cuda", dtype=torch.int32) * S
    qp, kp, vp = (x.reshape(B * S, x.shape[2], D) for x in (q, k, v))
    n = B * S // page_size
    perm = torch.randperm(n, generator=gen).cuda()    # the cache's page i holds the keys' page perm[i]
    k_pages, v_pages = (x.reshape(n, page_size, *x.shape[1:])[perm] for x in (kp, vp))
    table = torch.empty(n, dtype=torch.int32, device="cuda")
    table[perm] = torch.arange(n, dtype=torch.int32, device="cuda")
    table = table.view(B, S // page_size)

    def paged():
        return tessera.flash_attn_varlen(qp, k_pages, v_pages, cu, cu, S, S, causal=causal,
                                         block_table=table).view(B, S, Hq, D)

    def packed():
        return tessera.flash_attn_varlen(qp, kp, vp, cu, cu, S, S, causal=causal).view(B, S, Hq, D)
    return paged, packed


def run_feature(name, options, baseline, case, rep_ms, rounds, gen, row_gen):
    """tessera.flash_attn with `options` against the call with `baseline`'s instead, alternating; the featured
    output checked on sampled rows against float64."""
    B, S, Hq, Hkv, D, dtype, causal = case
    row = {"case": name, "B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "D": options.get("head_dim", D), "dtype": dtype,
           "causal": causal}
    q, k, v, kwargs = feature_inputs(B, S, Hq, Hkv, D, dtype, gen, options)
    q0, k0, v0, _ = feature_inputs(B, S, Hq, Hkv, D, dtype, gen, baseline)
    rows = torch.cat([torch.arange(0, 8), torch.randint(0, S, (SAMPLE_ROWS - 8,), generator=row_gen)]).cuda()
    if "paged" in options:
        featured, plain = paged_calls(q, k, v, options["paged"], causal, row_gen)
    else:
        featured, plain = (partial(tessera.flash_attn, q, k, v, causal=causal, **kwargs),
                           partial(tessera.flash_attn, q0, k0, v0, causal=causal))
    try:
        out = featured()
        torch.cuda.synchronize()
        ref = testing.attention_reference(q, k, v, causal=causal, rows=rows, **kwargs)
        same = testing.attention_reference(q, k, v, causal=causal, rows=rows, precision="same", **kwargs)
        result = testing.check_attention(out[:, rows], ref, same)
        row.update(correct=result.ok and bool(torch.isfinite(out).all()), check=str(result))
        timed = {"with": featured, "without": plain}
        for _ in range(rounds):
            for who, fn in timed.items():
                row.setdefault(f"{who}_ms_rounds", []).append(median_ms(fn, rep_ms))
        for who in timed:
            row[f"{who}_ms"] = statistics.median(row[f"{who}_ms_rounds"])
        row["cost"] = row["with_ms"] / row["without_ms"]
    except tessera.TesseraError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    return row


def features_table(meta, rows):
    B, S, Hq, Hkv, D, dtype, causal = FEATURE_CASE
    lines = [f"Attention forward options: tessera.flash_attn with each against the same call without it, "
             f"B{B} S{S} H{Hq} D{D} {dtype} {'causal' if causal else 'full'}, median of {meta.get('rounds', 1)} "
             f"alternating rounds ({meta['gpu']}, commit {meta['commit']}, {meta['date']})",
             f"{'option':>26} {'with ms':>8} {'without':>8} {'cost':>6}  check"]
    for r in rows:
        verdict = r.get("error") or ("ok" if r["correct"] else f"WRONG ({r['check']})")
        lines.append(f"{r['case']:>26} {_num(r, 'with_ms', '8.3f')} {_num(r, 'without_ms', '8.3f')} "
                     f"{_num(r, 'cost', '6.2f')}  {verdict}")
    return "\n".join(lines)


def main_features(args, meta):
    gen, row_gen = torch.Generator(device="cuda").manual_seed(meta["seed"]), torch.Generator().manual_seed(meta["seed"])
    rows = []
    for name, options, baseline in FEATURES:
        r = run_feature(name, options, baseline, FEATURE_CASE, args.rep_ms, args.rounds, gen, row_gen)
        rows.append(r)
        print(f"  {name}: " + (r.get("error") or f"{r['with_ms']:.3f} ms vs {r['without_ms']:.3f} ms "
                                                 f"({r['cost']:.2f}x), {'ok' if r['correct'] else 'WRONG'}"),
              flush=True)
        torch.cuda.empty_cache()
    return finish("bench_attn_features", meta, rows, features_table(meta, rows))


def run_dropout_case(B, S, Hq, Hkv, D, dtype, causal, rep_ms, rounds, gen, row_gen):
    """Forward and backward, each with DROPOUT_P and without, tessera's and SDPA FlashAttention-2's, alternating;
    tessera's dropout output checked on sampled rows of the first batch item against float64 with its mask."""
    row = {"B": B, "S": S, "Hq": Hq, "Hkv": Hkv, "D": D, "dtype": dtype, "causal": causal, "p": DROPOUT_P}
    dt = TORCH_DTYPES[dtype]
    q, k, v, do = (torch.randn(B, S, H, D, device="cuda", generator=gen).to(dt) for H in (Hq, Hkv, Hkv, Hq))
    seed = (int(torch.randint(0, 1 << 62, (1,), generator=row_gen)), 0)
    drop = dict(dropout_p=DROPOUT_P, dropout_seed=seed)
    timed = {}
    try:
        out, lse = tessera.flash_attn(q, k, v, causal=causal, return_lse=True, **drop)
        rows = torch.cat([torch.arange(0, 8), torch.randint(0, S, (SAMPLE_ROWS - 8,), generator=row_gen)])
        reference = dict(causal=causal, rows=rows.cuda(), dropout=(seed, DROPOUT_P))
        ref = testing.attention_reference(q[:1], k[:1], v[:1], **reference)
        same = testing.attention_reference(q[:1], k[:1], v[:1], **reference, precision="same")
        result = testing.check_attention(out[:1, rows.cuda()], ref, same)
        row.update(correct=result.ok and bool(torch.isfinite(out).all()), check=str(result))
        out0, lse0 = tessera.flash_attn(q, k, v, causal=causal, return_lse=True)
        grads = tuple(torch.empty_like(x) for x in (q, k, v))
        timed["tessera_fwd_drop"] = partial(tessera.flash_attn, q, k, v, causal=causal, **drop)
        timed["tessera_fwd"] = partial(tessera.flash_attn, q, k, v, causal=causal)
        timed["tessera_bwd_drop"] = partial(tessera.flash_attn_bwd, q, k, v, out, do, lse, causal=causal, **drop,
                                            dq=grads[0], dk=grads[1], dv=grads[2])
        timed["tessera_bwd"] = partial(tessera.flash_attn_bwd, q, k, v, out0, do, lse0, causal=causal,
                                       dq=grads[0], dk=grads[1], dv=grads[2])
    except tessera.TesseraError as e:
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    qt, kt, vt, dot = (x.transpose(1, 2) for x in (q, k, v, do))
    for p in (DROPOUT_P, 0.0):
        name = "flash" + ("_drop" if p else "")
        leaves = [x.detach().requires_grad_() for x in (qt, kt, vt)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = sdpa(*leaves, is_causal=causal, dropout_p=p)
        timed[name.replace("flash", "flash_fwd")] = partial(
            lambda p: sdpa_with(SDPBackend.FLASH_ATTENTION, qt, kt, vt, causal, p), p)
        timed[name.replace("flash", "flash_bwd")] = partial(torch.autograd.grad, o, leaves, dot, retain_graph=True)
    for _ in range(rounds):
        for who, fn in timed.items():
            row.setdefault(f"{who}_ms_rounds", []).append(median_ms(fn, rep_ms))
    for who in timed:
        row[f"{who}_ms"] = statistics.median(row[f"{who}_ms_rounds"])
    for part in ("fwd", "bwd"):
        row[f"{part}_cost"] = row[f"tessera_{part}_drop_ms"] / row[f"tessera_{part}_ms"]
        row[f"{part}_flash_cost"] = row[f"flash_{part}_drop_ms"] / row[f"flash_{part}_ms"]
        row[f"{part}_vs_flash"] = row[f"flash_{part}_drop_ms"] / row[f"tessera_{part}_drop_ms"]
    return row


def sdpa_with(backend, qt, kt, vt, causal, p):
    with sdpa_kernel(backend):
        return sdpa(qt, kt, vt, is_causal=causal, dropout_p=p)


def dropout_table(meta, rows):
    lines = [f"Dropout (p {DROPOUT_P}): tessera with and without it against SDPA FlashAttention-2 with and without it, "
             f"ms, median of {meta.get('rounds', 1)} alternating rounds ({meta['gpu']}, torch {meta['torch']}, commit "
             f"{meta['commit']}, {meta['date']}); cost = with / without, t/flash = FlashAttention-2's time with dropout "
             "over tessera's",
             f"{'B x S x Hq/Hkv x D':>22} {'mask':>6} {'pass':>4} {'tessera':>8} {'t drop':>8} {'cost':>5} "
             f"{'flash':>7} {'f drop':>7} {'cost':>5} {'t/flash':>7}  check"]
    for r in rows:
        shape = f"{r['B']}x{r['S']}x{r['Hq']}/{r['Hkv']}x{r['D']}"
        if "error" in r:
            lines.append(f"{shape:>22} {r['error']}")
            continue
        verdict = "ok" if r["correct"] else f"WRONG ({r['check']})"
        for part in ("fwd", "bwd"):
            lines.append(f"{shape:>22} {'causal' if r['causal'] else 'full':>6} {part:>4} "
                         f"{_num(r, f'tessera_{part}_ms', '8.3f')} {_num(r, f'tessera_{part}_drop_ms', '8.3f')} "
                         f"{_num(r, f'{part}_cost', '5.2f')} {_num(r, f'flash_{part}_ms', '7.3f')} "
                         f"{_num(r, f'flash_{part}_drop_ms', '7.3f')} {_num(r, f'{part}_flash_cost', '5.2f')} "
                         f"{_num(r, f'{part}_vs_flash', '7.2f')}  {verdict}")
    return "\n".join(lines)


def main_dropout(args, meta):
    gen, row_gen = torch.Generator(device="cuda").manual_seed(meta["seed"]), torch.Generator().manual_seed(meta["seed"])
    rows = []
    for case in DROPOUT_CASES:
        r = run_dropout_case(*case, args.rep_ms, args.rounds, gen, row_gen)
        rows.append(r)
        print(f"  {case}: " + (r.get("error") or f"fwd cost {r['fwd_cost']:.2f}, bwd cost {r['bwd_cost']:.2f}, "
                                                 f"{'ok' if r['correct'] else 'WRONG'}"), flush=True)
        torch.cuda.empty_cache()
    return finish("bench_attn_dropout", meta, rows, dropout_table(meta, rows))


def main():
    args = parse_args()
    meta = begin("bench_attn")
    if meta is None:
        return 2
    seed = int.from_bytes(os.urandom(4), "little")
    meta["seed"] = seed
    meta["rounds"] = args.rounds
    if args.backward:
        return main_backward(args, meta)
    if args.features:
        return main_features(args, meta)
    if args.dropout:
        return main_dropout(args, meta)
    meta["host_us_per_call"] = host_overhead()
    print(host_line(meta["host_us_per_call"]), flush=True)
    gen, row_gen = torch.Generator(device="cuda").manual_seed(seed), torch.Generator().manual_seed(seed)
    rows = []
    for B, S, Hq, Hkv, D, dtype, causal in args.cases:
        r = run_case(B, S, Hq, Hkv, D, dtype, causal, args.rep_ms, args.rounds, gen, row_gen)
        rows.append(r)
        print(f"  B{B} S{S} H{Hq}/{Hkv} D{D} {dtype} {'causal' if causal else 'full'}: " + (r.get("error") or (
            f"tessera {r['tessera_tflops']:.1f} TFLOP/s, flash {_num(r, 'flash_tflops', '.1f')}, "
            f"cudnn {_num(r, 'cudnn_tflops', '.1f')}, {'ok' if r['correct'] else 'WRONG'}")), flush=True)
        torch.cuda.empty_cache()
    return finish("bench_attn", meta, rows, table(meta, rows))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Paged decode benchmark on a CUDA GPU: tessera.paged_decode on a paged KV cache vs torch SDPA's cuDNN (and
FlashAttention-2) backends on the same keys and values laid out densely (B, Hkv, ctx, D) with enable_gqa, bf16; each
output checked against float64 on a sample of sequences and against the peer everywhere; effective bandwidth (the
bytes of the valid keys and values over the time per call) and time per call, table last, JSON to
$TESSERA_BENCH_OUT. Each case also runs tessera on the same keys and values in OCP e4m3 caches, with per-tensor scales
(amax / 448: time per call, GB/s of the fp8 bytes, speed-up over the bf16 cache and over cuDNN), the same with
fp8_products (the products on the fp8 matrix instructions: time per call, speed-up over the bf16 cache and over
cuDNN) and with per-token scales (each token's amax / 448: time per call and speed-up over the bf16 cache); and
cache_leftpad's cost: the bf16 call with every sequence's first LEFTPAD keys padded away against the call on as many
keys without padding (lp/none: time ratio; every pad unaligned to a page)."""
import argparse
import os
import random
import statistics
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))   # repo or dist layout
import tessera  # noqa: E402
from _common import begin, finish, median_ms, num as _num  # noqa: E402
from tessera import testing  # noqa: E402

HQ, HKV = 32, 8
PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
SAMPLE_SEQS = 8   # sequences checked against float64 per case (first, last, random)
LEFTPAD = 37      # cache_leftpad of the leftpad column


def ragged_lengths(B=32, low=64, high=32768, seed=0):
    """A fixed ragged batch: B lengths log-uniform in [low, high] (the same every run, so runs compare)."""
    rng = random.Random(seed)
    return tuple(int(low * (high / low) ** rng.random()) for _ in range(B))


def default_cases():
    """(name, lengths, Sq, block_size): B128 ctx8192, B8 ctx32768, B1 ctx131072 at block 16 and 64; a ragged batch;
    q_len 4 (speculative decode, bottom-right causal)."""
    cases = [(f"B{B} ctx{ctx}", (ctx,) * B, 1, block) for B, ctx in ((128, 8192), (8, 32768), (1, 131072))
             for block in (16, 64)]
    cases += [("ragged B32", ragged_lengths(), 1, 16), ("B32 ctx8192 q4", (8192,) * 32, 4, 16)]
    return [case + (0,) for case in cases]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", help="BxCTX:Sq:block[:splits],... e.g. 64x8192:1:16 or 1x131072:1:16:66 (splits: "
                                   "num_splits, default 0 = the heuristic's; default cases: the fixed list incl. a "
                                   "ragged batch)")
    p.add_argument("--head-dim", type=int, default=128, help="head_dim of every case")
    p.add_argument("--kv-layout", choices=("NHD", "HND"), default="NHD",
                   help="the paged caches' layout: NHD (num_pages, block, Hkv, D) or HND (num_pages, Hkv, block, D)")
    p.add_argument("--rep-ms", type=int, default=100, help="time spent timing each function in a round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of timing, the functions alternating")
    args = p.parse_args()
    if args.cases:
        cases = []
        for spec in args.cases.split(","):
            shape, Sq, block, *splits = spec.split(":")
            B, ctx = (int(x) for x in shape.split("x"))
            splits = int(splits[0]) if splits else 0
            name = f"B{B} ctx{ctx}" + (f" q{Sq}" if Sq != "1" else "") + (f" s{splits}" if splits else "")
            cases.append((name, (ctx,) * B, int(Sq), int(block), splits))
        args.cases = cases
    else:
        args.cases = default_cases()
    return args


def make_inputs(lengths, Sq, block, D, gen, layout):
    """q (B, Sq, HQ, D); the dense K and V (B, HKV, max_len, D) for the peer; the same keys in a paged cache of
    `layout` whose pages are a random permutation; block table; lengths."""
    B, longest = len(lengths), max(lengths)
    blocks = -(-longest // block)
    q = torch.randn(B, Sq, HQ, D, device="cuda", generator=gen).bfloat16()
    dense = [torch.randn(B, HKV, blocks * block, D, device="cuda", generator=gen).bfloat16() for _ in range(2)]
    table = torch.randperm(B * blocks, device="cuda", generator=gen).int().view(B, blocks)
    caches = []
    page = (block, HKV, D) if layout == "NHD" else (HKV, block, D)
    order = (0, 2, 3, 1, 4) if layout == "NHD" else (0, 2, 1, 3, 4)
    for x in dense:   # page table[b, j] holds tokens j*block .. of sequence b
        cache = torch.empty(B * blocks, *page, dtype=torch.bfloat16, device="cuda")
        cache[table.flatten().long()] = x.view(B, HKV, blocks, block, D).permute(*order).reshape(-1, *page)
        caches.append(cache)
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    return q, dense, caches, table, lens


def peer_fn(backend, q, dense, lengths, Sq):
    """SDPA on (B, H, S, D) with one backend and enable_gqa; a boolean mask where Sq > 1 or a sequence is shorter
    than the dense keys (key j visible from query t of a sequence of length n when j <= n - Sq + t)."""
    qt = q.transpose(1, 2)
    k, v = dense
    mask = None
    if Sq > 1 or min(lengths) < k.shape[2]:
        n = torch.tensor(lengths, device="cuda")[:, None, None, None]
        t, j = torch.arange(Sq, device="cuda")[:, None], torch.arange(k.shape[2], device="cuda")[None, :]
        mask = j <= n - Sq + t

    def run():
        with sdpa_kernel(PEERS[backend]):
            return sdpa(qt, k, v, attn_mask=mask, enable_gqa=True)
    return run


def check(out, peer_out, q, caches, table, lens, gen, layout, fp8_products=False, cache_leftpad=None, **scales):
    """The tolerance rule of CORRECTNESS.md on a sample of sequences (float64 and same-precision paged references),
    no NaN/Inf anywhere, and agreement with the peer everywhere: both within the bound of the reference means
    |tessera - peer| <= 2 x bound, plus one output ulp for their rounding (as bench_attn)."""
    B = q.shape[0]
    picked = sorted({0, B - 1, *torch.randint(0, B, (SAMPLE_SEQS - 2,), generator=gen).tolist()})
    rows = torch.tensor(picked, device="cuda")
    sample_args = (q[rows], *caches, table[rows], lens[rows])
    if cache_leftpad is not None:
        scales = dict(scales, cache_leftpad=cache_leftpad[rows])
    ref = testing.paged_decode_reference(*sample_args, kv_layout=layout, **scales)
    same = testing.paged_decode_reference(*sample_args, kv_layout=layout, precision="same", fp8_products=fp8_products,
                                          **scales)
    sample = testing.check_attention(out[rows], ref, same)
    bound = 2 * sample.o.reference_error + 1e-5 * float(ref.o_abs.max())
    finite = bool(torch.isfinite(out).all())
    diff = float((out.double() - peer_out.double()).abs().max()) if peer_out is not None else None
    ulp = 2.0 ** -8 * float(out.float().abs().max())
    agree = diff is None or diff <= 2 * bound + ulp
    return {"correct": sample.ok and finite and agree, "max_error_sampled": sample.o.max_error,
            "same_precision_error_sampled": sample.o.reference_error, "finite": finite, "max_diff_vs_peer": diff,
            "check": str(sample)}


def copy_ceiling_gbs(rep_ms):
    """A device-to-device copy of 1 GiB: bytes read plus written per second, the ceiling decode is measured against."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (median_ms(lambda: dst.copy_(src), rep_ms) * 1e-3) / 1e9


def token_scales(cache, layout):
    """Per-token e4m3 scales of a cache of `layout`: each token row's amax / 448 (1 for a zero row), laid out
    (num_pages, Hkv, block)."""
    amax = cache.float().abs().amax(-1)
    amax = amax.transpose(1, 2) if layout == "NHD" else amax
    return torch.where(amax > 0, amax / 448, torch.ones_like(amax)).contiguous()


def run_case(name, lengths, Sq, block, splits, D, layout, rep_ms, rounds, gen, row_gen):
    kv_bytes = 2 * sum(lengths) * HKV * D * 2   # the valid keys and values, bf16
    row = {"case": name, "B": len(lengths), "max_len": max(lengths), "Sq": Sq, "block_size": block, "Hq": HQ,
           "Hkv": HKV, "D": D, "kv_bytes": kv_bytes}
    q, dense, caches, table, lens = make_inputs(lengths, Sq, block, D, gen, layout)
    timed, peer_out = {}, {}
    for peer in PEERS:
        fn = peer_fn(peer, q, dense, lengths, Sq)
        try:
            peer_out[peer] = fn().transpose(1, 2)
            torch.cuda.synchronize()
            timed[peer] = fn
        except RuntimeError as e:   # a backend that does not take this case (it says why)
            row[f"{peer}_error"] = str(e).splitlines()[0][:160]
            torch.cuda.synchronize()
    del dense
    out = torch.full_like(q, float("nan"))
    try:
        plan = tessera.paged_decode_plan(q, *caches, table, lens, kv_layout=layout, num_splits=splits)
        row["num_splits"] = plan.num_splits

        def run():
            return tessera.paged_decode(q, *caches, table, lens, kv_layout=layout, out=out, plan=plan)
        run()
        torch.cuda.synchronize()
        checked_against = next((p for p in PEERS if p in peer_out), None)
        row.update(check(out, peer_out.get(checked_against), q, caches, table, lens, row_gen, layout),
                   checked_against=checked_against)
        timed["tessera"] = run
    except tessera.TesseraError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    # The same keys and values in OCP e4m3 caches: per-tensor scales (amax / 448, device tensors), then per-token.
    tensor_scales = {f"{n}_scale": (x.float().abs().amax() / 448).reshape(1) for n, x in zip("kv", caches)}
    token = {f"{n}_scale": token_scales(x, layout) for n, x in zip("kv", caches)}
    for who, scales in (("fp8", tensor_scales), ("fp8p", tensor_scales), ("fp8t", token)):
        per_token, products = who == "fp8t", who == "fp8p"
        by_token = (lambda s: (s.transpose(1, 2) if layout == "NHD" else s)[..., None]) if per_token else (lambda s: s)
        caches8 = [(x.float() / by_token(s)).to(torch.float8_e4m3fn)
                   for x, s in zip(caches, scales.values())]
        out8 = torch.full_like(q, float("nan"))
        try:
            plan8 = tessera.paged_decode_plan(q, *caches8, table, lens, kv_layout=layout, num_splits=splits,
                                              fp8_products=products, **(scales if per_token else {}))

            def run8(caches8=caches8, out8=out8, plan8=plan8, scales=scales, products=products):
                return tessera.paged_decode(q, *caches8, table, lens, kv_layout=layout, out=out8, plan=plan8,
                                            fp8_products=products, **scales)
            run8()
            torch.cuda.synchronize()
            fp8 = check(out8, None, q, caches8, table, lens, row_gen, layout, fp8_products=products, **scales)
            row.update({f"{who}_{k}": v for k, v in fp8.items()})
            timed[who] = run8
        except tessera.TesseraError as e:
            row[f"{who}_error"] = f"{type(e).__name__}: {e}"
    # cache_leftpad: keys LEFTPAD .. len - 1 against keys 0 .. len - LEFTPAD - 1 without it (the same work).
    pads = torch.clamp(lens, max=LEFTPAD)
    out_lp, out_short = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
    try:
        plan_lp = tessera.paged_decode_plan(q, *caches, table, lens, kv_layout=layout, num_splits=splits,
                                            cache_leftpad=pads)

        def run_lp():
            return tessera.paged_decode(q, *caches, table, lens, kv_layout=layout, out=out_lp, plan=plan_lp,
                                        cache_leftpad=pads)

        def run_short(short=lens - pads):
            return tessera.paged_decode(q, *caches, table, short, kv_layout=layout, out=out_short, plan=plan)
        run_lp()
        torch.cuda.synchronize()
        lp = check(out_lp, None, q, caches, table, lens, row_gen, layout, cache_leftpad=pads)
        row.update({f"leftpad_{k}": v for k, v in lp.items()})
        if "tessera" in timed:
            timed.update(leftpad=run_lp, unpadded=run_short)
    except tessera.TesseraError as e:
        row["leftpad_error"] = f"{type(e).__name__}: {e}"
    for _ in range(rounds):
        for who, fn in timed.items():
            row.setdefault(f"{who}_ms_rounds", []).append(median_ms(fn, rep_ms))
    for who in timed:
        row[f"{who}_us"] = statistics.median(row[f"{who}_ms_rounds"]) * 1e3
        row[f"{who}_gbs"] = kv_bytes / (row[f"{who}_us"] * 1e-6) / 1e9
    if "leftpad_us" in row:
        row["leftpad_cost"] = row["leftpad_us"] / row["unpadded_us"]
    for peer in PEERS:
        if "tessera_gbs" in row and f"{peer}_gbs" in row:
            row[f"ratio_{peer}"] = row["tessera_gbs"] / row[f"{peer}_gbs"]
    for who in ("fp8", "fp8p", "fp8t"):
        if f"{who}_us" in row:   # calls per second against bf16's (the same tokens); bytes read are half
            row[f"{who}_gbs"] = row[f"{who}_gbs"] / 2
            if "tessera_us" in row:
                row[f"{who}_speedup"] = row["tessera_us"] / row[f"{who}_us"]
            if "cudnn_us" in row:
                row[f"{who}_ratio_cudnn"] = row["cudnn_us"] / row[f"{who}_us"]
    return row


def table(meta, rows):
    ceiling = meta["copy_ceiling_gbs"]
    lines = [f"Paged decode: tessera.paged_decode (paged {meta['kv_layout']} cache) vs SDPA cuDNN and FlashAttention-2 "
             f"(flash) on dense (B, Hkv, ctx, D) keys and values, enable_gqa, bf16, Hq{HQ}/Hkv{HKV} D{meta['head_dim']}; GB/s = "
             f"bytes of the valid keys and values / time per call, median of {meta['rounds']} alternating rounds' "
             f"medians ({meta['gpu']}, torch {meta['torch']}, cuDNN {meta['cudnn']}, commit {meta['commit']}, "
             f"{meta['date']}); device copy ceiling {ceiling:.0f} GB/s (read + write)",
             f"{'case':>16} {'Sq':>2} {'block':>5} {'splits':>6} {'t us':>8} {'cudnn us':>8} {'flash us':>8} "
             f"{'t GB/s':>7} {'% copy':>6} {'cudnn':>7} {'flash':>7} {'t/cudnn':>7} {'t/flash':>7} "
             f"{'fp8 us':>8} {'fp8 GB/s':>8} {'fp8/bf16':>8} {'fp8/cudnn':>9} {'fp8p us':>8} {'fp8p/bf16':>9} "
             f"{'fp8p/cudnn':>10} {'fp8t us':>8} {'fp8t/bf16':>9} {'lp/none':>7}  check"]
    for r in rows:
        if "error" in r:
            verdict = r["error"]
        elif r["correct"]:
            verdict = f"ok (max err {r['max_error_sampled']:.3g}" + (
                f", vs {r['checked_against']} {r['max_diff_vs_peer']:.3g})" if r["checked_against"] else ")")
        else:
            verdict = f"WRONG ({r['check']}; finite {r['finite']}; max diff vs peer {r['max_diff_vs_peer']})"
        notes = "".join(f"; {p}: {r[p + '_error']}" for p in PEERS if p + "_error" in r)
        share = f"{100 * r['tessera_gbs'] / ceiling:6.1f}" if "tessera_gbs" in r else "-".rjust(6)
        lines.append(f"{r['case']:>16} {r['Sq']:>2} {r['block_size']:>5} {_num(r, 'num_splits', '6.0f')} "
                     f"{_num(r, 'tessera_us', '8.1f')} {_num(r, 'cudnn_us', '8.1f')} {_num(r, 'flash_us', '8.1f')} "
                     f"{_num(r, 'tessera_gbs', '7.0f')} {share} {_num(r, 'cudnn_gbs', '7.0f')} "
                     f"{_num(r, 'flash_gbs', '7.0f')} {_num(r, 'ratio_cudnn', '7.2f')} "
                     f"{_num(r, 'ratio_flash', '7.2f')} {_num(r, 'fp8_us', '8.1f')} {_num(r, 'fp8_gbs', '8.0f')} "
                     f"{_num(r, 'fp8_speedup', '8.2f')} {_num(r, 'fp8_ratio_cudnn', '9.2f')} "
                     f"{_num(r, 'fp8p_us', '8.1f')} {_num(r, 'fp8p_speedup', '9.2f')} "
                     f"{_num(r, 'fp8p_ratio_cudnn', '10.2f')} {_num(r, 'fp8t_us', '8.1f')} {_num(r, 'fp8t_speedup', '9.2f')} "
                     f"{_num(r, 'leftpad_cost', '7.2f')}  {verdict}{notes}"
                     + "".join((f"; {who} {'ok' if r[who + '_correct'] else 'WRONG ' + r[who + '_check']} (max err "
                                f"{r[who + '_max_error_sampled']:.3g})" if who + "_correct" in r else "")
                               + (f"; {who}: {r[who + '_error']}" if who + "_error" in r else "")
                               for who in ("fp8", "fp8p", "fp8t", "leftpad")))
    return "\n".join(lines)


def main():
    args = parse_args()
    meta = begin("bench_decode")
    if meta is None:
        return 2
    seed = int.from_bytes(os.urandom(4), "little")
    meta.update(seed=seed, rounds=args.rounds, head_dim=args.head_dim, kv_layout=args.kv_layout,
                copy_ceiling_gbs=copy_ceiling_gbs(args.rep_ms))
    gen, row_gen = torch.Generator(device="cuda").manual_seed(seed), torch.Generator().manual_seed(seed)
    rows = []
    for name, lengths, Sq, block, splits in args.cases:
        r = run_case(name, lengths, Sq, block, splits, args.head_dim, args.kv_layout, args.rep_ms, args.rounds, gen,
                     row_gen)
        rows.append(r)
        print(f"  {name} Sq{Sq} block {block}: " + (r.get("error") or (
            f"tessera {r['tessera_us']:.1f} us {r['tessera_gbs']:.0f} GB/s, cudnn {_num(r, 'cudnn_gbs', '.0f')} GB/s, "
            f"{'ok' if r['correct'] else 'WRONG'}")), flush=True)
        torch.cuda.empty_cache()
    return finish("bench_decode", meta, rows, table(meta, rows))


if __name__ == "__main__":
    sys.exit(main())

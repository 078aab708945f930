#!/usr/bin/env python3
"""Triton's tutorial fused-attention forward kernel (06-fused-attention), compiled offline for AMD.

The kernel keeps the tutorial's structure (FA-2 forward: Q block resident, loop over K/V blocks
with exp2 online softmax, causal split into an off-band and an on-band stage, M = m + log2(l)
written for the backward pass) and the tutorial's HIP launch options (num_stages=1,
waves_per_eu=2 for head_dim > 64, allow_flush_denorm). On HIP the tutorial passes plain tensors
and builds the tensor descriptors inside the kernel, as done here. It is only compiled, never run.

    python3 scripts/triton_fa_fwd.py --arch gfx942 [--causal] [--head-dim 128] --out DIR

writes DIR/<name>.s (AMDGCN) and DIR/<name>.json (metadata: registers, spills, LDS, options) and
prints the JSON. Needs `pip install triton` (the PyPI wheel carries the AMD backend); no GPU.
"""
import argparse
import json
import os
import sys

import triton
import triton.language as tl


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype: tl.constexpr, start_m, qk_scale,
                    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                    STAGE: tl.constexpr, offs_m, offs_n, N_CTX):
    # STAGE 1: blocks left of the diagonal (causal), 2: the diagonal block, 3: everything (non-causal)
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    kv_y = offset_y + lo
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([kv_y, 0]).T
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([kv_y, 0])
        acc = tl.dot(p.to(dtype), v, acc)
        m_i = m_ij
        kv_y += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(sm_scale, M, Z, H, Q, K, V, Out, N_CTX,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr):
    dtype = tl.float16
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    y_dim = Z * H * N_CTX
    desc_q = tl.make_tensor_descriptor(Q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    desc_k = tl.make_tensor_descriptor(K, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    desc_v = tl.make_tensor_descriptor(V, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = tl.make_tensor_descriptor(Out, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # log2(e)
    q = desc_q.load([qo_offset_y, 0])
    if STAGE & 1:  # off-band (causal) or the whole row (non-causal)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                        BLOCK_M, HEAD_DIM, BLOCK_N, 4 - STAGE, offs_m, offs_n, N_CTX)
    if STAGE & 2:  # on-band (causal diagonal block)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                        BLOCK_M, HEAD_DIM, BLOCK_N, 2, offs_m, offs_n, N_CTX)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


def compile_fwd(arch, head_dim=128, block_m=128, block_n=64, num_warps=4, causal=False):
    """Compile the forward kernel for `arch` the way the tutorial launches it on HIP for fp16
    tensors under 2 GiB (pointers 16-byte aligned and 32-bit addressable, N_CTX % 16 == 0)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    wave = 32 if arch.startswith("gfx1") else 64
    sig = {"sm_scale": "fp32", "M": "*fp32", "Z": "i32", "H": "i32", "Q": "*fp16", "K": "*fp16",
           "V": "*fp16", "Out": "*fp16", "N_CTX": "i32", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
           "BLOCK_N": "constexpr", "STAGE": "constexpr"}
    consts = {"HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "STAGE": 3 if causal else 1}
    names = list(sig)
    aligned_ptr = [["tt.divisibility", 16], ["tt.pointer_range", 32]]
    attrs = {(names.index(n), ): aligned_ptr for n in ("M", "Q", "K", "V", "Out")}
    attrs[(names.index("N_CTX"), )] = [["tt.divisibility", 16]]
    src = ASTSource(fn=_attn_fwd, signature=sig, constexprs=consts, attrs=attrs)
    opts = {"num_warps": num_warps, "num_stages": 1, "waves_per_eu": 3 if head_dim <= 64 else 2,
            "allow_flush_denorm": True}
    k = triton.compile(src, target=GPUTarget("hip", arch, wave), options=opts)
    md = k.metadata
    meta = {
        "triton_version": triton.__version__, "arch": arch, "head_dim": head_dim, "causal": causal,
        "block_m": block_m, "block_n": block_n, "num_warps": num_warps, "num_stages": 1,
        "waves_per_eu": opts["waves_per_eu"], "name": md.name,
        "lds_bytes": md.shared, "vgpr": getattr(k, "n_regs", None), "spills": getattr(k, "n_spills", None),
    }
    return k.asm["amdgcn"], meta


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-m", type=int, default=128)
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--num-warps", type=int, default=4)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    asm, meta = compile_fwd(a.arch, a.head_dim, a.block_m, a.block_n, a.num_warps, a.causal)
    os.makedirs(a.out, exist_ok=True)
    stem = f"triton_fa_fwd_{a.arch}_d{a.head_dim}_{'causal' if a.causal else 'none'}"
    with open(os.path.join(a.out, stem + ".s"), "w") as f:
        f.write(asm)
    meta["isa"] = stem + ".s"
    with open(os.path.join(a.out, stem + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    json.dump(meta, sys.stdout)
    print()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prints one tessera.flash_attn directive per combination of the features that shape an sm_90a
kernel's code at one head_dim: mask x sliding_window x softcap x return_lse x (varlen, or
pack_gqa 1, 4 or 8; the two do not combine). The dtype alternates: f16 and bf16 give the same
code shape (every combination of both assembled alike, bench/NOTES.md 2026-11-29).

  flash_attn_sm90a_matrix.py HEAD_DIM"""
import itertools
import sys

head_dim = int(sys.argv[1])
masks = {"none": "none", "tl": "causal_top_left", "br": "causal_bottom_right"}
layouts = [("varlen", "varlen"), ("", None), ("gqa4", "pack_gqa = 4"), ("gqa8", "pack_gqa = 8")]
flags = [("w", "sliding_window"), ("sc", "softcap"), ("lse", "return_lse")]
combos = itertools.product(masks.items(), itertools.product([False, True], repeat=len(flags)), layouts)
for i, ((mask, mask_kind), chosen, (layout, layout_attr)) in enumerate(combos):
    dtype = ("f16", "bf16")[(i + i // len(layouts)) % 2]
    attrs = [f"dtype = {dtype}", f"head_dim = {head_dim}", f"mask = #tessera.mask<{mask_kind}>"]
    attrs += [attr for (_, attr), on in zip(flags, chosen) if on]
    attrs += [layout_attr] if layout_attr else []
    name = "_".join(["fa", f"d{head_dim}", mask] + [tag for (tag, _), on in zip(flags, chosen) if on] +
                    ([layout] if layout else []))
    print(f"tessera.flash_attn @{name} {{{', '.join(attrs)}}}")

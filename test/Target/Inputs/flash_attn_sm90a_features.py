#!/usr/bin/env python3
"""Prints one tessera.flash_attn directive per combination of the options the sm_90a kernel takes beyond the
feature matrix (flash_attn_sm90a_matrix.py): mask x (alibi; sinks with LSE; attention_chunk; alibi with a window and
softcap; all of them) x (one head per tile, varlen, pack_gqa 4), at head_dim 64 and 128. The dtype alternates."""
import itertools

masks = {"none": "none", "tl": "causal_top_left", "br": "causal_bottom_right"}
options = [("alibi", ["alibi"]), ("sinks", ["sinks", "return_lse"]), ("chunk", ["attention_chunk"]),
           ("alibi_w_sc", ["alibi", "sliding_window", "softcap"]),
           ("all", ["alibi", "sinks", "attention_chunk", "sliding_window", "softcap", "return_lse"])]
layouts = [("", None), ("varlen", "varlen"), ("gqa4", "pack_gqa = 4")]
for head_dim in (64, 128):
    for i, ((mask, kind), (tag, attrs), (layout, layout_attr)) in enumerate(
            itertools.product(masks.items(), options, layouts)):
        dtype = ("f16", "bf16")[i % 2]
        chosen = [f"dtype = {dtype}", f"head_dim = {head_dim}", f"mask = #tessera.mask<{kind}>"] + attrs
        chosen += [layout_attr] if layout_attr else []
        name = "_".join(["fa", f"d{head_dim}", mask, tag] + ([layout] if layout else []))
        print(f"tessera.flash_attn @{name} {{{', '.join(chosen)}}}")

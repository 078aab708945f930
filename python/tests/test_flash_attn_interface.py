"""tessera.flash_attn_interface, FlashAttention 2's functions on Tessera: each gives what the tessera call it maps to
gives (bit for bit: the same kernels), on the simulator (gfx942 and sm_90, numpy arrays): causal aligned
bottom-right, window_size, softcap, softmax_scale, alibi_slopes, dropout_p (with dropout_seed), return_attn_probs
(S_dmask with dropout), the packed layouts (their slices as q, k, v), varlen; flash_attn_with_kvcache against float64
(paged and contiguous caches, new keys appended in place, rotary embedding of both kinds, ALiBi, a right window bound
without causal); and FlashAttention's options Tessera lacks are refused before any device work."""
import pytest

import support
from support import np
import tessera
from tessera import flash_attn_interface as fa, testing

TARGETS = ("gfx942", "sm_90")
KERNELS = ("fa_f16_d64_none", "fa_f16_d64_br", "fa_f16_d64_br_varlen", "fa_f16_d64_none_varlen", "pd_f16_d64_b16")
ALIBI = ("tessera.flash_attn @fa_f16_d64_br_alibi {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, "
         "sliding_window, softcap, return_lse, alibi}\n"
         "tessera.flash_attn @fa_f16_d64_br_drop {dtype = f16, head_dim = 64, mask = #tessera.mask<causal_bottom_right>, "
         "sliding_window, softcap, return_lse, dropout}\n"
         "tessera.paged_decode @pd_f16_d64_b16_alibi {dtype = f16, head_dim = 64, block_size = 16, "
         "mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, alibi}\n"
         "tessera.paged_decode @pd_f16_d64_b16_leftpad {dtype = f16, head_dim = 64, block_size = 16, "
         "mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, split_kv, cache_leftpad}\n"
         "tessera.flash_attn @fa_f16_d64_br_varlen_drop {dtype = f16, head_dim = 64, "
         "mask = #tessera.mask<causal_bottom_right>, sliding_window, softcap, return_lse, varlen, dropout}\n"
         "tessera.flash_attn @fa_f16_d64_none_varlen_paged {dtype = f16, head_dim = 64, mask = #tessera.mask<none>, "
         "sliding_window, softcap, return_lse, varlen, paged_kv}\n"
         "tessera.flash_attn @fa_f16_d64_none_varlen_paged_alibi {dtype = f16, head_dim = 64, "
         "mask = #tessera.mask<none>, sliding_window, softcap, return_lse, varlen, paged_kv, alibi}")


def _modules():
    lines = {line.split()[1][1:]: line for example in ("attention.mlir", "decode.mlir")
             for line in (support.REPO / "examples" / example).read_text().splitlines() if line.startswith("tessera.")}
    return {t: "\n".join([lines[name] for name in KERNELS] + [ALIBI]) + "\n" for t in TARGETS}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    yield from support.sim_bundles(tmp_path_factory, "flash-attn-interface-bundles", _modules)


def device_for(bundles, target):
    assert not bundles.get(target), f"tessera-compile --target={target} failed:\n{bundles[target]}"
    return support.sim_device(target)


def _random(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


def same(a, b):
    return a.shape == b.shape and (a.view(np.uint16) == b.view(np.uint16)).all()


@pytest.mark.parametrize("target", TARGETS)
def test_dense_functions_are_tessera_flash_attn(bundles, target):
    dev = device_for(bundles, target)
    rng = np.random.default_rng(7)
    B, Sq, Sk, Hq, Hkv, D = 2, 19, 33, 4, 2, 64
    q, k, v = _random(rng, (B, Sq, Hq, D)), _random(rng, (B, Sk, Hkv, D)), _random(rng, (B, Sk, Hkv, D))
    options = dict(causal=True, window=(8, 0), softcap=5.0, scale=0.2)
    want, lse = tessera.flash_attn(q, k, v, **options, return_lse=True, device=dev)
    out = fa.flash_attn_func(q, k, v, softmax_scale=0.2, causal=True, window_size=(8, 0), softcap=5.0, device=dev)
    assert same(out, want)
    out, softmax_lse, probs = fa.flash_attn_func(q, k, v, 0.0, 0.2, True, (8, 0), 5.0, return_attn_probs=True,
                                                 device=dev)
    assert same(out, want) and (softmax_lse == lse).all() and probs is None
    # The packed layouts: their slices are q, k, v.
    kv = np.stack([k, v], axis=2)
    assert same(fa.flash_attn_kvpacked_func(q, kv, softmax_scale=0.2, causal=True, window_size=(8, 0), softcap=5.0,
                                            device=dev), want)
    qkv = np.stack([q, _random(rng, q.shape), _random(rng, q.shape)], axis=2)
    plain = tessera.flash_attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], device=dev)
    assert same(fa.flash_attn_qkvpacked_func(qkv, device=dev), plain)
    # ALiBi, per batch item and head.
    slopes = rng.uniform(0.05, 1.0, (B, Hq)).astype(np.float32)
    want = tessera.flash_attn(q, k, v, causal=True, alibi_slopes=slopes, device=dev)
    assert same(fa.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes, device=dev), want)
    ref = testing.attention_reference(q, k, v, causal=True, alibi_slopes=slopes)
    assert testing.check_attention(want, ref, testing.attention_reference(q, k, v, causal=True, alibi_slopes=slopes,
                                                                          precision="same")).ok
    # Dropout with a given seed: the tessera call's output.
    want = tessera.flash_attn(q, k, v, causal=True, dropout_p=0.2, dropout_seed=(9, 1), device=dev)
    assert same(fa.flash_attn_func(q, k, v, 0.2, causal=True, dropout_seed=(9, 1), device=dev), want)


def _out_from_probs(probs, v, dropout_p):
    """FlashAttention's check of S_dmask: the output from its kept probabilities, scaled (float64, (B, Sq, Hq, D))."""
    from tessera._attention import dropout_keep_scale
    kept = np.where(probs > 0, probs, 0).astype(np.float64) * dropout_keep_scale(dropout_p)
    group = probs.shape[1] // v.shape[2]
    values = np.repeat(v.astype(np.float64), group, axis=2)             # (B, Sk, Hq, D)
    return np.einsum("bhqk,bkhd->bqhd", kept, values)


@pytest.mark.parametrize("target", TARGETS)
def test_return_attn_probs_with_dropout(bundles, target):
    """return_attn_probs with dropout gives S_dmask as FlashAttention's tests read it: (B, H, Sq, Sk) probabilities
    (rows of visible keys summing to 1, in magnitude), dropped ones negative, the mask tessera.testing.dropout_keep's;
    the kernel's output is the kept probabilities' (scaled) times V. Varlen: per sequence, zero past it."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(29)
    B, Sq, Sk, Hq, Hkv, D, p = 2, 19, 33, 4, 2, 64, 0.25
    q, k, v = _random(rng, (B, Sq, Hq, D)), _random(rng, (B, Sk, Hkv, D)), _random(rng, (B, Sk, Hkv, D))
    out, lse, probs = fa.flash_attn_func(q, k, v, p, 0.2, True, (8, 0), 5.0, return_attn_probs=True,
                                         dropout_seed=(9, 1), device=dev)
    assert probs.shape == (B, Hq, Sq, Sk) and probs.dtype == np.float32
    visible = testing.visible_keys(Sq, Sk, True, window=(8, 0))
    assert np.allclose(np.abs(probs).sum(-1), 1, atol=1e-5) and (probs[..., ~visible] == 0).all()
    keep = testing.dropout_keep((9, 1), p, B, Hq, Sq, Sk)
    assert ((probs > 0) == (keep & visible)).all()
    ref = testing.attention_reference(q, k, v, True, scale=0.2, window=(8, 0), softcap=5.0, dropout=((9, 1), p))
    assert np.abs(_out_from_probs(probs, v, p) - ref.o).max() <= 1e-4
    assert testing.check_attention(out, ref, testing.attention_reference(
        q, k, v, True, scale=0.2, window=(8, 0), softcap=5.0, dropout=((9, 1), p), precision="same")).ok
    assert fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, device=dev)[2] is None  # no dropout
    lens = [17, 0, 30, 5]
    cu = np.cumsum([0] + lens).astype(np.int32)
    qv, kv, vv = (_random(rng, (int(cu[-1]), Hkv, D)) for _ in range(3))
    _, _, probs = fa.flash_attn_varlen_func(qv, kv, vv, cu, cu, 30, 30, p, causal=True, return_attn_probs=True,
                                            dropout_seed=(4, 0), device=dev)
    assert probs.shape == (4, Hkv, 30, 30)
    for b, n in enumerate(lens):
        want = testing.attention_probs(qv[None, cu[b]:cu[b + 1]], kv[None, cu[b]:cu[b + 1]], True,
                                       dropout=((4, 0), p, b))
        assert (probs[b, :, :n, :n] == want[0]).all() and not probs[b, :, n:].any() and not probs[b, :, :, n:].any()
        assert ((want > 0) == (testing.dropout_keep((4, 0), p, 1, Hkv, n, n, b) &
                               testing.visible_keys(n, n, True))).all()


@pytest.mark.parametrize("target", TARGETS)
def test_varlen_functions_are_tessera_flash_attn_varlen(bundles, target):
    dev = device_for(bundles, target)
    rng = np.random.default_rng(11)
    lens = [17, 0, 30, 5]
    cu = np.cumsum([0] + lens).astype(np.int32)
    total, H, D = int(cu[-1]), 2, 64
    q, k, v = (_random(rng, (total, H, D)) for _ in range(3))
    want, lse = tessera.flash_attn_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True, return_lse=True,
                                          device=dev)
    out = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, device=dev)
    assert same(out, want)
    out, softmax_lse, probs = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True,
                                                        return_attn_probs=True, device=dev)
    assert same(out, want) and (softmax_lse == lse).all() and probs is None
    qkv = np.stack([q, k, v], axis=1)
    assert same(fa.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True, device=dev), want)
    kv = np.stack([k, v], axis=1)
    assert same(fa.flash_attn_varlen_kvpacked_func(q, kv, cu, cu, max(lens), max(lens), causal=True, device=dev),
                want)
    plain = tessera.flash_attn_varlen(q, k, v, cu, cu, max(lens), max(lens), window=(4, 4), device=dev)
    assert same(fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), window_size=(4, 4), device=dev),
                plain)


def _rope(x, positions, rotary_dim, interleaved):
    """x (B, S, H, D) float64 with its first rotary_dim features rotated by angle position / 10000^(2i/rotary_dim),
    pairs (2i, 2i + 1) when interleaved, else (i, i + rotary_dim / 2)."""
    half = rotary_dim // 2
    angles = positions[:, :, None, None] * 10000.0 ** (-np.arange(half) / half)
    c, s = np.cos(angles), np.sin(angles)
    out = x.copy()
    i, j = (np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)) if interleaved else \
        (np.arange(half), np.arange(half, rotary_dim))
    out[..., i] = x[..., i] * c - x[..., j] * s
    out[..., j] = x[..., i] * s + x[..., j] * c
    return out


def _rotary(q, k, before, rotary_dim, interleaved):
    """(cos, sin, q_rot, k_rot): FlashAttention's rotary tables for 64 positions ((64, rotary_dim / 2) float32) and q
    and the new k rotated in float64 at positions before[b] + t, rounded to float16."""
    angles = np.arange(64)[:, None] * 10000.0 ** (-np.arange(rotary_dim // 2) / (rotary_dim // 2))
    positions = before[:, None] + np.arange(q.shape[1])[None, :]
    q_rot, k_rot = (_rope(x.astype(np.float64), positions, rotary_dim, interleaved).astype(np.float16) for x in (q, k))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), q_rot, k_rot


def _check_decode(out, q, keys, values, lengths, causal, lse=None, scale=None, first=None):
    """Each sequence's output against float64 attention over its keys first[b] (default 0) .. lengths[b] - 1
    (bottom-right causal)."""
    for b, n in enumerate(lengths):
        f = 0 if first is None else first[b]
        ref = testing.attention_reference(q[b:b + 1], keys[b:b + 1, f:n], values[b:b + 1, f:n], causal=causal,
                                          scale=scale)
        same = testing.attention_reference(q[b:b + 1], keys[b:b + 1, f:n], values[b:b + 1, f:n], causal=causal,
                                           scale=scale, precision="same")
        result = testing.check_attention(out[b:b + 1], ref, same, None if lse is None else lse[b:b + 1])
        assert result.ok, f"sequence {b}: {result}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("interleaved", [True, False])
def test_kvcache_paged_append_and_rotary(bundles, target, interleaved):
    """Pages of 16 tokens in a shuffled block table; two new tokens appended at cache_seqlens (5 and 20: one inside
    a page, one at a page's end), rotary on the first 32 of 64 features of q and the new k, causal."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(5 + interleaved)
    B, Sq, Hq, Hkv, D, page, rotary_dim = 2, 2, 4, 2, 64, 16, 32
    k_cache, v_cache = _random(rng, (8, page, Hkv, D)), _random(rng, (8, page, Hkv, D))
    table = np.array([[3, 0, 5, 1], [2, 6, 4, 7]], np.int32)
    before = np.array([5, 20], np.int32)
    q, k, v = _random(rng, (B, Sq, Hq, D)), _random(rng, (B, Sq, Hkv, D)), _random(rng, (B, Sq, Hkv, D))
    cos, sin, q_rot, k_rot = _rotary(q, k, before, rotary_dim, interleaved)
    keys = np.concatenate([k_cache[table[b]].reshape(-1, Hkv, D)[None] for b in range(B)])   # (B, 64, Hkv, D)
    values = np.concatenate([v_cache[table[b]].reshape(-1, Hkv, D)[None] for b in range(B)])
    for b in range(B):
        keys[b, before[b]:before[b] + Sq], values[b, before[b]:before[b] + Sq] = k_rot[b], v[b]
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, before, block_table=table, causal=True,
                                          rotary_interleaved=interleaved, return_softmax_lse=True, device=dev)
    written = np.concatenate([k_cache[table[b]].reshape(-1, Hkv, D)[None] for b in range(B)])
    assert np.allclose(written.astype(np.float32), keys.astype(np.float32), rtol=2e-3, atol=2e-3), \
        "the new keys (rotated) landed at cache_seqlens"
    assert (np.concatenate([v_cache[table[b]].reshape(-1, Hkv, D)[None] for b in range(B)]) == values).all()
    _check_decode(out, q_rot, written, values, before + Sq, causal=True, lse=lse)


@pytest.mark.parametrize("target", TARGETS)
def test_kvcache_contiguous_without_new_keys(bundles, target):
    """A contiguous cache of 64 slots, every sequence holding 30 tokens (cache_seqlens an int), one query token, no
    append; then cache_seqlens None (the whole cache)."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(9)
    k_cache, v_cache, q = _random(rng, (2, 64, 1, 64)), _random(rng, (2, 64, 1, 64)), _random(rng, (2, 1, 3, 64))
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=30, softmax_scale=0.1, device=dev)
    _check_decode(out, q, k_cache, v_cache, [30, 30], causal=False, scale=0.1)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, softcap=0.0, device=dev)
    _check_decode(out, q, k_cache, v_cache, [64, 64], causal=False)


@pytest.mark.parametrize("target", TARGETS)
def test_kvcache_right_window_without_causal(bundles, target):
    """window_size (3, 2) without causal (a right bound: flash_attn_varlen's paged call) over a shuffled paged cache,
    three new tokens appended, 11 query tokens, and over a contiguous cache (per-sequence lengths, ALiBi): against
    float64 attention with the window aligned bottom-right, the LSE too."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(23)
    B, Sq, Hq, Hkv, D, page = 2, 11, 4, 2, 64, 16
    k_cache, v_cache = _random(rng, (8, page, Hkv, D)), _random(rng, (8, page, Hkv, D))
    table = np.array([[3, 0, 5, 1], [2, 6, 4, 7]], np.int32)
    before = np.array([13, 40], np.int32)
    q, k, v = _random(rng, (B, Sq, Hq, D)), _random(rng, (B, 3, Hkv, D)), _random(rng, (B, 3, Hkv, D))
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=before, block_table=table,
                                          window_size=(3, 2), return_softmax_lse=True, device=dev)
    keys = np.concatenate([k_cache[table[b]].reshape(-1, Hkv, D)[None] for b in range(B)])
    values = np.concatenate([v_cache[table[b]].reshape(-1, Hkv, D)[None] for b in range(B)])
    assert (keys[np.arange(B)[:, None], before[:, None] + np.arange(3)] == k).all(), "the new keys are in the cache"
    slopes = rng.uniform(0.05, 1.0, (B, Hq)).astype(np.float32)
    contiguous_k, contiguous_v = _random(rng, (B, 48, Hkv, D)), _random(rng, (B, 48, Hkv, D))
    lengths = np.array([20, 48], np.int32)
    plain = fa.flash_attn_with_kvcache(q, contiguous_k, contiguous_v, cache_seqlens=lengths, window_size=(-1, 0),
                                       alibi_slopes=slopes, device=dev)
    for got, got_lse, K, V, n, extra in ((out, lse, keys, values, before + 3, [{}] * B),
                                          (plain, None, contiguous_k, contiguous_v, lengths,
                                           [dict(alibi_slopes=slopes[b]) for b in range(B)])):
        for b in range(B):
            options = dict(window=(3, 2) if got is out else (-1, 0), **extra[b])
            ref = testing.attention_reference(q[b:b + 1], K[b:b + 1, :n[b]], V[b:b + 1, :n[b]], **options)
            same = testing.attention_reference(q[b:b + 1], K[b:b + 1, :n[b]], V[b:b + 1, :n[b]], **options,
                                               precision="same")
            result = testing.check_attention(got[b:b + 1], ref, same, None if got_lse is None else got_lse[b:b + 1])
            assert result.ok, f"sequence {b}: {result}"


@pytest.mark.parametrize("target", TARGETS)
def test_kvcache_alibi(bundles, target):
    """alibi_slopes (batch, nheads) through flash_attn_with_kvcache: two query tokens at the end of a contiguous
    cache of 40 tokens, causal, each head its own slope, against float64 ALiBi attention."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(17)
    k_cache, v_cache, q = _random(rng, (2, 48, 2, 64)), _random(rng, (2, 48, 2, 64)), _random(rng, (2, 2, 4, 64))
    slopes = rng.uniform(0.05, 1.0, (2, 4)).astype(np.float32)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=40, causal=True, alibi_slopes=slopes,
                                     device=dev)
    for b in range(2):
        options = dict(causal=True, alibi_slopes=slopes[b])
        ref = testing.attention_reference(q[b:b + 1], k_cache[b:b + 1, :40], v_cache[b:b + 1, :40], **options)
        same = testing.attention_reference(q[b:b + 1], k_cache[b:b + 1, :40], v_cache[b:b + 1, :40], **options,
                                           precision="same")
        result = testing.check_attention(out[b:b + 1], ref, same)
        assert result.ok, f"sequence {b}: {result}"


@pytest.mark.parametrize("target", TARGETS)
def test_kvcache_leftpad(bundles, target):
    """cache_leftpad as FlashAttention 2's kvcache test uses it: a contiguous cache of 48 slots whose sequences start
    at slots 3 and 17 (NaN before them: never read), two new tokens appended at cache_seqlens 10 and 30 with rotary
    (GPT-NeoX) at the cache's own positions, causal: each sequence attends to its slots cache_leftpad[b] ..
    cache_seqlens[b] + 1."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(21)
    B, Sq, Hq, Hkv, D, rotary_dim = 2, 2, 4, 2, 64, 32
    k_cache, v_cache = _random(rng, (B, 48, Hkv, D)), _random(rng, (B, 48, Hkv, D))
    pads, before = np.array([3, 17], np.int32), np.array([10, 30], np.int32)
    for b in range(B):
        k_cache[b, :pads[b]] = v_cache[b, :pads[b]] = np.nan
    q, k, v = _random(rng, (B, Sq, Hq, D)), _random(rng, (B, Sq, Hkv, D)), _random(rng, (B, Sq, Hkv, D))
    cos, sin, q_rot, k_rot = _rotary(q, k, before, rotary_dim, False)
    keys, values = k_cache.copy(), v_cache.copy()
    for b in range(B):
        keys[b, before[b]:before[b] + Sq], values[b, before[b]:before[b] + Sq] = k_rot[b], v[b]
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, before, cache_leftpad=pads, causal=True,
                                          rotary_interleaved=False, return_softmax_lse=True, device=dev)
    assert np.allclose(k_cache.astype(np.float32), keys.astype(np.float32), rtol=2e-3, atol=2e-3, equal_nan=True)
    _check_decode(out, q_rot, k_cache, values, before + Sq, causal=True, lse=lse, first=pads)


@pytest.mark.parametrize("target", TARGETS)
def test_kvcache_cache_batch_idx(bundles, target):
    """A contiguous cache of 3 rows serving 2 sequences through cache_batch_idx (rows 2 and 0): the new token lands
    in those rows, row 1 stays as it was, and each sequence attends over its own row."""
    dev = device_for(bundles, target)
    rng = np.random.default_rng(13)
    k_cache, v_cache = _random(rng, (3, 32, 1, 64)), _random(rng, (3, 32, 1, 64))
    k0, v0 = k_cache.copy(), v_cache.copy()
    q, k, v = _random(rng, (2, 1, 2, 64)), _random(rng, (2, 1, 1, 64)), _random(rng, (2, 1, 1, 64))
    rows, before = np.array([2, 0], np.int32), np.array([7, 20], np.int32)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=before, cache_batch_idx=rows,
                                     causal=True, device=dev)
    for b, r in enumerate(rows):
        k0[r, before[b]], v0[r, before[b]] = k[b, 0], v[b, 0]
    assert (k_cache == k0).all() and (v_cache == v0).all()
    _check_decode(out, q, k0[rows], v0[rows], before + 1, causal=True)


Q, KV = np.zeros((1, 4, 2, 64), np.float16), np.zeros((1, 5, 2, 64), np.float16)
CU = np.array([0, 4], np.int32)


@pytest.mark.parametrize("call, message", [
    (lambda: fa.flash_attn_func(Q, KV, KV, dropout_p=0.1),
     r"tessera.flash_attn: dropout on numpy arrays needs dropout_seed= \(an int, or a \(seed, offset\) pair\)"),
    (lambda: fa.flash_attn_varlen_func(Q[0], KV[0], KV[0], CU, CU, 4, 4, dropout_p=1.0),
     r"flash_attn_varlen_func: dropout_p must be a number in \[0, 1\), got 1.0"),
    (lambda: fa.flash_attn_func(Q, KV, KV, alibi_slopes=np.ones(3, np.float32)),
     r"tessera.flash_attn: alibi_slopes must be float32 of shape \(2,\) or \(1, 2\)"),
    (lambda: fa.flash_attn_func(Q, KV, KV, window_size=4), r"window_size must be a pair \(left, right\), got 4"),
    (lambda: fa.flash_attn_qkvpacked_func(np.zeros((1, 4, 2, 2, 64), np.float16)),
     r"flash_attn_qkvpacked_func: qkv must be 5-D \(batch, seqlen, 3, nheads, headdim\), got shape "
     r"\(1, 4, 2, 2, 64\)"),
    (lambda: fa.flash_attn_kvpacked_func(Q, KV), r"flash_attn_kvpacked_func: kv must be 5-D \(batch, seqlen_k, 2, "
                                                 r"nheads_k, headdim\), got shape \(1, 5, 2, 64\)"),
    (lambda: fa.flash_attn_varlen_kvpacked_func(Q[0], [[1.0]], CU, CU, 4, 4),
     r"flash_attn_varlen_kvpacked_func: kv is a builtins.list; expected a torch tensor or a numpy array"),
    (lambda: fa.flash_attn_varlen_func(Q[0], KV[0, :4], KV[0, :4], CU, CU, 4, 4, block_table=CU),
     r"tessera.flash_attn_varlen: k must be 4-D \(num_pages, page_size, Hkv, D\), got shape \(4, 2, 64\)"),
    (lambda: fa.flash_attn_varlen_func(Q[0], KV, KV, CU, CU, 4, 4, block_table=CU),
     r"tessera.flash_attn_varlen: block_table must be int32 \(1, max_pages\), a row of page indices per sequence "
     r"with unit stride along it, got shape \(2,\)"),
    (lambda: fa.flash_attn_func(Q, KV[..., :32], KV), r"tessera.flash_attn: q and k must have the same head_dim"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, cache_batch_idx=CU, block_table=CU[None], cache_seqlens=CU[:1]),
     r"flash_attn_with_kvcache: cache_batch_idx indexes a contiguous cache's rows"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, cache_leftpad=CU),
     r"flash_attn_with_kvcache: cache_leftpad must be an int32 vector of each sequence's first key, shape \(1,\) with "
     r"unit stride, got shape \(2,\)"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, cache_seqlens=CU[1:], cache_leftpad=CU[1:] + 1),
     r"flash_attn_with_kvcache: cache_leftpad\[0\] = 5 is outside \[0, cache_seqlens\[0\] = 4\]"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, cache_batch_idx=np.array([0, 1], np.int32)),
     r"cache_batch_idx must be \(1,\), the cache row of each sequence, got shape \(2,\)"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, cache_batch_idx=np.array([1], np.int32)),
     r"cache_batch_idx must name rows 0 to 0 of the cache, got \[1\]"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, k=KV), r"k and v come together .* got only k"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, rotary_sin=CU), r"got only rotary_sin"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, window_size=(4, 2), cache_leftpad=CU[:1]),
     r"window_size = \(4, 2\) without causal \(a right bound\) cannot take cache_leftpad"),
    (lambda: fa.flash_attn_with_kvcache(Q, KV, KV, block_table=CU[None]), r"a paged cache \(block_table given\) "
                                                                          r"needs cache_seqlens"),
    (lambda: fa.flash_attn_with_kvcache(Q[0], KV, KV), r"q must be 4-D, got shape \(4, 2, 64\)"),
])
def test_unsupported_options_rejected_before_the_device(call, message):
    with pytest.raises(tessera.InputError, match=message):
        call()


@support.requires_cuda
@pytest.mark.parametrize("D", [64, 40])
def test_torch_autograd_through_the_interface(D):
    """On a GPU: flash_attn_qkvpacked_func's output and its gradient into the packed qkv are tessera.flash_attn's on
    the slices (the packed tensor gets the three gradients side by side); head_dim 40 (tiles of 48 inside)."""
    torch = support.torch
    gen = torch.Generator(device="cuda").manual_seed(3)
    qkv = torch.randn(2, 37, 3, 4, D, device="cuda", dtype=torch.bfloat16, generator=gen, requires_grad=True)
    dout = torch.randn(2, 37, 4, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True, window_size=(16, 0), deterministic=True)
    (grad,) = torch.autograd.grad(out, qkv, dout)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    want = tessera.flash_attn(q, k, v, causal=True, window=(16, 0), deterministic=True)
    grads = torch.autograd.grad(want, (q, k, v), dout)
    assert torch.equal(out, want)
    for i, g in enumerate(grads):
        assert torch.equal(grad[:, :, i], g)

"""tessera.integrations.transformers on small randomly initialised models built from configs (no downloads): a
Llama-architecture model with GQA, a Mistral-style one with a sliding window shorter than the sequence and a
Gemma-2-style one with logit softcapping, sliding layers and its own query scaling. Logits and parameter gradients
against the same weights with attn_implementation="sdpa" ("eager" for Gemma-2, which has no SDPA path) by the tolerance rule of CORRECTNESS.md (the float32 model
the reference, bf16 SDPA the same-precision implementation), plain, padded and packed rows; greedy generate()
with the default DynamicCache (flash_attn) and a StaticCache (paged_decode, counted) choosing at every step a token
that SDPA, teacher-forced on the same sequence, ranks first within the numerical tolerance. Skipped without torch,
transformers or a CUDA GPU."""
import pytest

import support

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = support.requires_cuda

DEVICE = "cuda"
COMMON = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=1024, attention_dropout=0.0,
              eos_token_id=None)   # generate() runs its full length


def configs():
    from transformers import Gemma2Config, LlamaConfig, MistralConfig
    return {
        "llama-gqa": LlamaConfig(**COMMON),
        "mistral-window": MistralConfig(**COMMON, sliding_window=32),
        "gemma2-softcap": Gemma2Config(**COMMON, head_dim=64, attn_logit_softcapping=20.0,
                                       final_logit_softcapping=30.0, query_pre_attn_scalar=48, sliding_window=32,
                                       hidden_activation="gelu_pytorch_tanh"),
    }


def models(name, dtype=torch.bfloat16):
    """(tessera model, SDPA twin, float32 SDPA reference) with the same random weights (Gemma-2: eager attention,
    transformers' only implementation with softcapping besides the flash ones)."""
    import tessera.integrations.transformers  # noqa: F401  (registers "tessera")
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)   # each model its own config: from_config records the implementation in it
    ours = AutoModelForCausalLM.from_config(configs()[name], attn_implementation="tessera", dtype=dtype).to(DEVICE)
    twin = "eager" if name.startswith("gemma2") else "sdpa"    # transformers has no SDPA path with softcapping
    twins = [AutoModelForCausalLM.from_config(configs()[name], attn_implementation=twin, dtype=d).to(DEVICE)
             for d in (dtype, torch.float32)]
    assert ours.config._attn_implementation == "tessera"
    for twin in twins:
        twin.load_state_dict(ours.state_dict())
    return ours, *twins


def batch(kind):
    """Token ids, the 2-D mask (None: none given) and position ids (None: the model's own) of a batch: "plain" (2, 64),
    "padded" (the second row padded by 19 tokens on the right, as training batches are: left padding leaves query
    rows with no key, where SDPA's gradients are NaN) or "packed" (one row of two documents, 40 and 24 tokens,
    whose position ids restart at 0: the varlen path, as transformers packs training rows)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, COMMON["vocab_size"], (2, 64), generator=gen).to(DEVICE)
    mask = torch.ones_like(ids)
    if kind == "padded":
        mask[1, -19:] = 0
    if kind == "packed":
        positions = torch.cat((torch.arange(40), torch.arange(24)))[None].to(DEVICE)
        return ids[:1], None, positions
    return ids, mask, None


def check(out, ref, same, what, factor=3.0):
    from tessera import testing
    out, ref, same = (x.detach().double() for x in (out, ref, same))
    result = testing.check_tolerance(out, ref, same, ref.abs().max(), factor, floor=1e-3)
    assert result.ok, f"{what}: {result}"


class Counter:
    """Counts the calls of a tessera entry point (patched where the integration looks it up)."""

    def __init__(self, monkeypatch, name):
        import tessera
        self.calls, wrapped = 0, getattr(tessera, name)

        def counted(*args, **kwargs):
            result = wrapped(*args, **kwargs)
            self.calls += 1    # calls that returned
            return result
        monkeypatch.setattr(tessera, name, counted)


@pytest.mark.parametrize("kind", ("plain", "padded", "packed"))
@pytest.mark.parametrize("name", ("llama-gqa", "mistral-window", "gemma2-softcap"))
def test_logits_and_gradients_match_sdpa(name, kind, monkeypatch):
    ours, same, ref = models(name)
    calls = Counter(monkeypatch, "flash_attn" if kind == "plain" else "flash_attn_varlen")
    ids, mask, positions = batch(kind)
    valid = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    results = []
    for model in (ours, same, ref):
        model.train()
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[valid][:-1].float(), ids[valid][1:])
        loss.backward()
        results.append((logits[valid].float(), {n: p.grad.float() for n, p in model.named_parameters()}))
    (logits, grads), (same_logits, same_grads), (ref_logits, ref_grads) = results
    assert calls.calls == COMMON["num_hidden_layers"], "every layer's attention is tessera's"
    check(logits, ref_logits, same_logits, f"{name} logits")
    for n in grads:
        check(grads[n], ref_grads[n], same_grads[n], f"{name} grad {n}", factor=4.0)


@pytest.mark.parametrize("cache", ("dynamic", "static", "left-padded", "left-padded-static"))
@pytest.mark.parametrize("name", ("llama-gqa", "mistral-window", "gemma2-softcap"))
def test_greedy_generation_agrees_with_sdpa(name, cache, monkeypatch):
    """Greedy generate() (40 new tokens past a 32-token prompt, so windows slide during decode): every token is one
    SDPA, teacher-forced on the generated sequence, ranks first within the tolerance its logits differ from ours by.
    A StaticCache of 128 slots (sliding layers: 32) runs every decode step through paged_decode; a DynamicCache
    those whose length a decode set's block size divides, flash_attn the others. A left-padded batch (the second
    prompt 7 tokens shorter) runs its decode steps on layers without a sliding window through paged_decode with
    cache_leftpad where a set serves the cache (every step with the StaticCache, lengths a multiple of 16 with the
    DynamicCache), flash_attn_varlen otherwise."""
    from transformers import StaticCache
    ours, same, _ = models(name)
    ours.eval(), same.eval()
    decode, forward = Counter(monkeypatch, "paged_decode"), Counter(monkeypatch, "flash_attn")
    varlen = Counter(monkeypatch, "flash_attn_varlen")
    ids, mask, _ = batch("plain")
    prompt, prompt_mask = ids[:, :32], mask[:, :32].clone()
    if cache.startswith("left-padded"):
        prompt_mask[1, :7] = 0
    options = dict(max_new_tokens=40, do_sample=False, pad_token_id=0)
    if cache.endswith("static"):
        options["past_key_values"] = StaticCache(config=ours.config, max_cache_len=128)
    with torch.no_grad():
        tokens = ours.generate(prompt, attention_mask=prompt_mask, **options)
        assert tokens.shape == (2, 72)
        full = torch.cat((prompt_mask, torch.ones_like(tokens[:, 32:])), 1)
        theirs = same(input_ids=tokens, attention_mask=full).logits[:, 31:-1].float()
        mine = ours(input_ids=tokens, attention_mask=full).logits[:, 31:-1].float()
    tolerance = 4 * (mine - theirs).abs().max().item() + 1e-3
    chosen = theirs.gather(-1, tokens[:, 32:, None])[..., 0]
    gaps = theirs.max(-1).values - chosen
    assert gaps.max().item() <= tolerance, f"{name}: a generated token SDPA ranks {gaps.max().item()} below its best"
    layers, steps = COMMON["num_hidden_layers"], 39          # the first new token comes from the prefill
    if cache == "static":
        assert decode.calls == steps * layers, (decode.calls, forward.calls)
    elif cache == "dynamic":
        assert decode.calls > 0 and forward.calls > 0
    elif name == "llama-gqa" and cache == "left-padded-static":
        assert decode.calls == steps * layers, (varlen.calls, decode.calls, forward.calls)
    elif name == "llama-gqa":   # the DynamicCache's lengths 48 and 64 through paged_decode
        assert decode.calls > 0 and varlen.calls > 0, (varlen.calls, decode.calls, forward.calls)
    else:   # sliding layers: once the padding leaves the window the mask is gone and the cache is all tokens
        assert varlen.calls > 0
    assert decode.calls + forward.calls + varlen.calls == (steps + 1) * layers + layers, "each call served once"


@pytest.mark.parametrize("kind", ("plain", "padded"))
def test_attention_dropout_in_training(kind, monkeypatch):
    """A model with attention_dropout = 0.2 in training mode runs tessera's dropout (flash_attn or flash_attn_varlen
    with dropout_p): the same torch seed gives the same logits bit for bit and the same gradients (up to the order
    of the backward's dQ additions); another seed, or eval mode (no dropout), other logits."""
    import tessera.integrations.transformers  # noqa: F401  (registers "tessera")
    from transformers import LlamaConfig
    import tessera
    calls = []
    for name in ("flash_attn", "flash_attn_varlen"):
        original = getattr(tessera, name)
        monkeypatch.setattr(tessera, name, lambda *a, _f=original, **k: calls.append(k.get("dropout_p")) or _f(*a, **k))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        LlamaConfig(**dict(COMMON, attention_dropout=0.2)), attn_implementation="tessera", dtype=torch.bfloat16)
    model = model.to(DEVICE).train()
    ids, mask, _ = batch(kind)

    def run(seed):
        torch.manual_seed(seed)
        model.zero_grad()
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits.float().square().mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]
    (a, grads_a), (b, grads_b), (c, _) = run(1), run(1), run(2)
    assert calls and all(p == 0.2 for p in calls), calls
    assert torch.equal(a, b)
    for x, y in zip(grads_a, grads_b):
        assert (x - y).abs().max().item() <= 1e-2 * y.abs().max().item()
    assert not torch.equal(a, c)
    with torch.no_grad():
        assert not torch.equal(a, model.eval()(input_ids=ids, attention_mask=mask).logits)


def test_errors_are_clear():
    """output_attentions is refused with a message naming what to change; a float32 model without autocast names
    the dtypes the kernels take."""
    import tessera
    from tessera.integrations.transformers import attention_forward
    module = torch.nn.Module()
    q = torch.zeros(1, 4, 8, 64, device=DEVICE, dtype=torch.bfloat16)
    with pytest.raises(tessera.InputError, match="output_attentions"):
        attention_forward(module, q, q, q, None, output_attentions=True)
    with pytest.raises(tessera.InputError, match="float16 or bfloat16"):
        attention_forward(module, q.float(), q.float(), q.float(), None)

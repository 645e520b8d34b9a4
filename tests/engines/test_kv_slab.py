"""The decode loop's slab cache, decode attention and bf16 linear weights
(``agentgym.engines.kv``): the same tokens and log-probs as plain forward passes in fp32, bf16
keys and values under autocast, in-place writes, and weights held in bf16 that change no output
bit."""

import asyncio
import copy

import pytest

torch = pytest.importorskip("torch")

from agentgym.attention import ATTENTION, attention, install  # noqa: E402
from agentgym.engines import SamplingParams  # noqa: E402
from agentgym.engines.hf import HFEngine, stop_ids_for  # noqa: E402
from agentgym.engines.kv import (  # noqa: E402
    SlabError,
    cast_linear_weights,
    slab_from_layers,
    slab_from_rows,
)

PROMPTS = [[5, 17, 42, 9, 77, 3], [11, 12], [101, 7, 7, 7, 30, 31, 32, 33, 34, 35]]


class _Heads(torch.nn.Module):
    num_key_value_groups = 3


def test_decode_attention_equals_sdpa_for_one_query_token() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(4, 6, 1, 8, generator=gen)
    k, v = torch.randn(4, 2, 11, 8, generator=gen), torch.randn(4, 2, 11, 8, generator=gen)
    mask = torch.ones(4, 1, 1, 11, dtype=torch.bool)
    mask[1, ..., 3:5] = False  # padding slots of a shorter row
    expanded = [t.repeat_interleave(3, dim=1) for t in (k, v)]
    with torch.no_grad():
        for m in (None, mask):
            want = torch.nn.functional.scaled_dot_product_attention(q, *expanded, attn_mask=m)
            got, _ = attention(_Heads(), q, k, v, m, scaling=8**-0.5)
            assert got.shape == (4, 1, 6, 8)
            assert torch.allclose(got.transpose(1, 2), want, atol=1e-6)


def test_decode_attention_leaves_longer_queries_and_gradients_to_sdpa() -> None:
    q = torch.randn(1, 6, 3, 8, requires_grad=True)
    k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    out, _ = attention(_Heads(), q, k, v, None, scaling=8**-0.5, is_causal=True)
    out.sum().backward()  # SDPA's path, differentiable
    assert q.grad is not None and out.shape == (1, 3, 6, 8)


def test_slab_writes_in_place_and_keeps_selected_rows() -> None:
    k, v = torch.arange(2 * 1 * 3 * 2.0).reshape(2, 1, 3, 2), torch.zeros(2, 1, 3, 2)
    cache = slab_from_layers([(k, v)], room=2, dtype=torch.bfloat16)
    layer = cache.layers[0]
    start = layer.keys.data_ptr()
    keys, values = cache.update(torch.ones(2, 1, 1, 2), torch.ones(2, 1, 1, 2), 0)
    assert keys.dtype == values.dtype == torch.bfloat16
    assert keys.shape == (2, 1, 4, 2) and keys.data_ptr() == start  # no new buffer
    assert cache.get_seq_length() == 4
    cache.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys[0, :, :3].float(), k[1])
    cache.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), 0)
    with pytest.raises(SlabError, match="full"):
        cache.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), 0)


def test_slab_from_rows_pads_shorter_rows_with_zeros() -> None:
    a = [(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))]
    b = [(torch.full((1, 1, 4, 2), 2.0), torch.full((1, 1, 4, 2), 2.0))]
    cache = slab_from_rows([a, b], room=1, dtype=torch.float32)
    keys = cache.layers[0].keys
    assert keys.shape == (2, 1, 4, 2)
    assert keys[0, 0, :2].eq(1).all() and keys[0, 0, 2:].eq(0).all() and keys[1].eq(2).all()


def engine(tiny, model=None, **kw) -> HFEngine:
    base, tokenizer = tiny
    return HFEngine(
        model if model is not None else base,
        stop_token_ids=stop_ids_for(base, tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        **kw,
    )


def generate(eng: HFEngine, params: SamplingParams):
    async def go():
        try:
            return await eng.generate(PROMPTS, params)
        finally:
            await eng.close()

    return asyncio.run(go())


def bf16_forward_logprobs(model, prompt, tokens, temperature):
    """The learner's view: one uncached forward pass under bf16 autocast."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    picked = logits[len(prompt) - 1 : len(prompt) - 1 + len(tokens)] / temperature
    return picked.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1).tolist()


@pytest.mark.parametrize("cache_mb", [0, 64])
def test_bf16_engine_caches_bf16_and_stays_within_bf16_noise(tiny, cache_mb) -> None:
    model, _ = tiny
    eng = engine(tiny, copy.deepcopy(model), bf16=True, owns_model=True, prefix_cache_mb=cache_mb)
    assert eng.kv_dtype == torch.bfloat16
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=5)
    for prompt, gen in zip(PROMPTS, generate(eng, params), strict=True):
        want = bf16_forward_logprobs(model, prompt, gen.token_ids, 1.0)
        assert gen.logprobs == pytest.approx(want, abs=0.05)
    if cache_mb:
        entry = eng.store._entries[0]
        assert all(k.dtype == v.dtype == torch.bfloat16 for k, v in entry.layers)


def test_weights_held_in_bf16_change_no_output_bit(tiny) -> None:
    model, _ = tiny
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=9)
    shared = generate(engine(tiny, copy.deepcopy(model), bf16=True), params)
    owned_model = copy.deepcopy(model)
    owned = generate(engine(tiny, owned_model, bf16=True, owns_model=True), params)
    assert owned_model.lm_head.weight.dtype == torch.bfloat16
    for a, b in zip(shared, owned, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_an_untied_head_loads_from_the_embeddings_of_a_tied_state_dict(tiny) -> None:
    model, _ = tiny
    tied = copy.deepcopy(model)
    tied.lm_head.weight = tied.model.embed_tokens.weight  # as SmolLM2 ties them
    untied = cast_linear_weights(tied)
    assert untied == {"lm_head.weight": "model.embed_tokens.weight"}
    assert tied.lm_head.weight is not tied.model.embed_tokens.weight
    eng = engine(tiny, tied, bf16=True)
    eng._untied = untied
    new = {k: v + 1 for k, v in tied.state_dict().items() if k != "lm_head.weight"}
    asyncio.run(eng.load_weights(new, version=1))
    want = new["model.embed_tokens.weight"].to(torch.bfloat16)
    assert torch.equal(tied.lm_head.weight, want)


def test_a_shared_model_keeps_its_mode_and_the_attention_kernel_is_for_cpu_sdpa(tiny) -> None:
    model, _ = tiny
    shared = copy.deepcopy(model).train()
    engine(tiny, shared)
    assert shared.training  # the engine did not switch a model it does not own to eval
    assert shared.config._attn_implementation == ATTENTION
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    assert not install(eager) and eager.config._attn_implementation == "eager"


@pytest.mark.parametrize("cache_mb", [0, 64])
def test_transformers_own_cache_path_samples_the_same_in_fp32(tiny, cache_mb) -> None:
    """``fast_decode=False`` (DynamicCache and SDPA, kept for comparison) and the slab path
    sample the same tokens with the same log-probs."""
    model, _ = tiny
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=2)
    slow = generate(
        engine(tiny, copy.deepcopy(model), fast_decode=False, prefix_cache_mb=cache_mb), params
    )
    fast = generate(engine(tiny, copy.deepcopy(model), prefix_cache_mb=cache_mb), params)
    for a, b in zip(slow, fast, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)

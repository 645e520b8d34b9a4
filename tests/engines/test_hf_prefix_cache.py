"""The transformers engine's per-row reply budget, prefix reuse across turns and stop strings:
reuse gives the tokens and log-probs a full prefill gives, a row's budget follows its own prompt
length, and a stop string ends a row with the token that completes it."""

import asyncio
import copy

import pytest

torch = pytest.importorskip("torch")

from agentgym.engines import SamplingParams  # noqa: E402
from agentgym.engines.hf import HFEngine, stop_ids_for  # noqa: E402

OPENING = [5, 17, 42, 9, 77, 3, 101, 7, 7, 30, 31, 32]
DELTAS = [[11, 12, 13, 14], [40, 41, 42, 43, 44, 45]]  # the "environment's" turns


def engine(tiny, *, cache_mb: float = 0, limit: int | None = None, **kw) -> HFEngine:
    model, tokenizer = tiny
    if limit is not None:
        model = copy.deepcopy(model)
        model.config.max_position_embeddings = limit
    return HFEngine(
        model, stop_token_ids=stop_ids_for(model, tokenizer), pad_token_id=tokenizer.pad_token_id,
        prefix_cache_mb=cache_mb, tokenizer=tokenizer, **kw,
    )  # fmt: skip


def episode(eng: HFEngine, params: SamplingParams, group: int = 3):
    """Three turns of ``group`` episodes sharing one opening; each next prompt is the previous
    prompt, the reply and an environment delta, as the actor builds them."""

    async def go():
        prompts = [list(OPENING) for _ in range(group)]
        turns = []
        for t in range(3):
            gens = await eng.generate(prompts, params)
            turns.append(gens)
            if t < 2:
                prompts = [p + g.token_ids + DELTAS[t] for p, g in zip(prompts, gens, strict=True)]
        await eng.close()
        return turns

    return asyncio.run(go())


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reuse_gives_the_tokens_and_logprobs_of_a_full_prefill(tiny, temperature) -> None:
    params = SamplingParams(max_new_tokens=6, temperature=temperature, seed=4)
    full = episode(engine(tiny), params)
    cached = engine(tiny, cache_mb=64)
    reused = episode(cached, params)
    for turn_full, turn_reused in zip(full, reused, strict=True):
        for a, b in zip(turn_full, turn_reused, strict=True):
            assert b.token_ids == a.token_ids
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
            assert b.finish_reason == a.finish_reason
    store = cached.store
    # Turn 1 ran the opening once for the group; turns 2 and 3 ran only what was new.
    assert store.reused_tokens > store.prefilled_tokens
    assert store.nbytes <= store.max_bytes and len(store) >= 1


def test_group_opening_is_prefilled_once(tiny) -> None:
    eng = engine(tiny, cache_mb=64)
    params = SamplingParams(max_new_tokens=2, temperature=1.0, seed=0)
    asyncio.run(eng.generate([list(OPENING)] * 4, params))
    # The first row runs the opening; the other three reuse all of it but its last token.
    assert eng.store.prefilled_tokens == len(OPENING) + 3
    assert eng.store.reused_tokens == 3 * (len(OPENING) - 1)


def test_new_weights_clear_the_store(tiny) -> None:
    eng = engine(tiny, cache_mb=64)
    asyncio.run(eng.generate([list(OPENING)], SamplingParams(max_new_tokens=3, seed=0)))
    assert len(eng.store) > 0
    asyncio.run(eng.load_weights(eng.model.state_dict(), version=1))
    assert len(eng.store) == 0 and eng.store.nbytes == 0


def test_store_stays_within_its_budget(tiny) -> None:
    eng = engine(tiny, cache_mb=0.05)  # a few entries of the tiny model
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=1)
    prompts = [[i + 5, 17, 42, 9, 77, 3] * 4 for i in range(12)]
    asyncio.run(eng.generate(prompts, params))
    assert 0 < eng.store.nbytes <= eng.store.max_bytes


def test_each_row_budget_follows_its_own_prompt(tiny) -> None:
    """Context 64, 20 new tokens asked for: a 10-token prompt may take all 20 whatever shares
    its batch; a 60-token prompt 4; a 64-token prompt none."""
    eng = engine(tiny, limit=64)
    params = SamplingParams(max_new_tokens=20, temperature=1.0, seed=3)
    never_stops = tuple()  # sample past EOS: the budget alone ends rows

    async def go(prompts):
        no_stop = HFEngine(eng.model, stop_token_ids=never_stops, pad_token_id=0)
        return await no_stop.generate(prompts, params)

    short, long, full = [1] * 10, [2] * 60, [3] * 64
    [alone] = asyncio.run(go([short]))
    beside = asyncio.run(go([short, long, full]))
    assert len(alone.token_ids) == 20
    assert [len(g.token_ids) for g in beside] == [20, 4, 0]
    assert beside[0].token_ids == alone.token_ids  # same seed and budget: the same sample
    assert [g.finish_reason for g in beside] == ["length"] * 3


def test_stop_string_ends_the_row_with_its_completing_token(tiny) -> None:
    _, tokenizer = tiny
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    [free] = asyncio.run(engine(tiny).generate([OPENING], greedy))
    text = tokenizer.decode(free.token_ids, skip_special_tokens=False)
    cut = next(i for i in range(3, len(free.token_ids) + 1)
               if len(tokenizer.decode(free.token_ids[:i])) >= 3)  # fmt: skip
    stop = tokenizer.decode(free.token_ids[:cut])[-3:]
    assert stop in text
    params = SamplingParams(max_new_tokens=12, temperature=0.0, stop=(stop,))
    [stopped] = asyncio.run(engine(tiny).generate([OPENING], params))
    first = next(i for i in range(1, cut + 1) if stop in tokenizer.decode(free.token_ids[:i]))
    assert stopped.token_ids == free.token_ids[:first]
    assert stopped.finish_reason == "stop"


def test_stop_strings_need_a_tokenizer(tiny) -> None:
    model, tokenizer = tiny
    bare = HFEngine(model, stop_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="stop strings need the engine's tokenizer"):
        asyncio.run(bare.generate([OPENING], SamplingParams(stop=("x",))))


def test_bf16_engine_reports_the_log_probs_of_bf16_arithmetic(tiny) -> None:
    model, _ = tiny
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=6)
    [gen] = asyncio.run(engine(tiny, bf16=True).generate([OPENING], params))
    ids = torch.tensor([OPENING + gen.token_ids])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = torch.log_softmax(model(ids).logits[0].float(), -1)
    with torch.no_grad():
        fp32 = torch.log_softmax(model(ids).logits[0].float(), -1)
    at = [len(OPENING) - 1 + j for j in range(len(gen.token_ids))]
    want = [bf16[i, t].item() for i, t in zip(at, gen.token_ids, strict=True)]
    other = [fp32[i, t].item() for i, t in zip(at, gen.token_ids, strict=True)]
    assert gen.logprobs == pytest.approx(want, abs=1e-3)
    assert max(abs(a - b) for a, b in zip(gen.logprobs, other, strict=True)) > 1e-4


def test_kept_across_a_weight_update_a_turn_counts_from_its_oldest_keys(tiny) -> None:
    """With reuse on, the store outlives a weight update: the next turn prefills only its new
    tokens and reports the version that computed the keys it continued; past the lag bound an
    entry is not reused and the turn is the new weights' alone."""
    params = SamplingParams(max_new_tokens=3, temperature=1.0, seed=0)
    for lag, want_version in ((1, 0), (0, 1)):
        eng = engine(tiny, cache_mb=64, reuse_kv_across_versions=True, kv_reuse_max_lag=lag)

        async def go(eng=eng):
            (first,) = await eng.generate([list(OPENING)], params)
            await eng.load_weights(eng.model.state_dict(), version=1)
            before = eng.store.prefilled_tokens
            nxt = list(OPENING) + first.token_ids + DELTAS[0]
            (second,) = await eng.generate([nxt], params)
            await eng.close()
            return first, second, eng.store.prefilled_tokens - before

        first, second, prefilled = asyncio.run(go())
        assert first.policy_version == 0
        assert second.policy_version == want_version
        if want_version == 0:  # continued from the first turn: only the delta (and the last
            assert prefilled == len(DELTAS[0]) + 1  # reply token, never fed back) was run
        else:
            assert prefilled == len(OPENING) + len(first.token_ids) + len(DELTAS[0])

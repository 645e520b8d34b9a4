"""The transformers engine: behaviour log-probs equal a separate forward pass, batching across
coroutines, stop/length handling, seeded sampling, in-place weight loading."""

import asyncio
import math

import pytest

torch = pytest.importorskip("torch")

from engine_reference import reference_logprob  # noqa: E402

from agentgym.engines import Engine, SamplingParams  # noqa: E402
from agentgym.engines.hf import HFEngine, stop_ids_for  # noqa: E402

PROMPTS = [[5, 17, 42, 9, 77, 3], [11, 12], [101, 7, 7, 7, 30, 31, 32, 33, 34, 35]]


def make_engine(tiny, **kw) -> HFEngine:
    model, tokenizer = tiny
    return HFEngine(
        model,
        stop_token_ids=stop_ids_for(model, tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        **kw,
    )


def run(coro):
    return asyncio.run(coro)


def separate_forward_logprobs(model, prompt, gen, params: SamplingParams) -> list[float]:
    """Log-probs of the generated tokens from one unpadded, uncached forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + gen.token_ids])).logits[0].float()
    out = []
    for j, tok in enumerate(gen.token_ids):
        row = logits[len(prompt) - 1 + j].tolist()
        out.append(reference_logprob(row, tok, params.temperature, params.top_k, params.top_p))
    return out


def test_engine_satisfies_protocol(tiny) -> None:
    assert isinstance(make_engine(tiny), Engine)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 20, 1.0), (1.2, 0, 0.8), (0.9, 30, 0.9)],
)
def test_logprobs_equal_a_separate_forward_pass(tiny, temperature, top_k, top_p) -> None:
    model, _ = tiny
    engine = make_engine(tiny)
    params = SamplingParams(
        max_new_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p, seed=3
    )
    gens = run(engine.generate(PROMPTS, params))
    assert engine.batches_run == 1  # the three prompts shared one right-padded batch
    for prompt, gen in zip(PROMPTS, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) >= 1
        want = separate_forward_logprobs(model, prompt, gen, params)
        assert all(math.isfinite(w) for w in want)  # never sampled outside the kept set
        assert gen.logprobs == pytest.approx(want, abs=2e-4)


def test_greedy_matches_argmax_of_a_separate_forward_pass(tiny) -> None:
    model, _ = tiny
    engine = make_engine(tiny)
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    gens = run(engine.generate(PROMPTS, params))
    for prompt, gen in zip(PROMPTS, gens, strict=True):
        assert gen.logprobs == [0.0] * len(gen.token_ids)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen.token_ids])).logits[0]
        argmax = logits[len(prompt) - 1 : len(prompt) - 1 + len(gen.token_ids)].argmax(-1)
        assert gen.token_ids == argmax.tolist()


def test_length_limit_and_stop_tokens(tiny) -> None:
    model, tokenizer = tiny
    engine = make_engine(tiny)
    stops = set(stop_ids_for(model, tokenizer))
    [long] = run(engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=5, seed=1)))
    if long.finish_reason == "length":
        assert len(long.token_ids) == 5 and not stops & set(long.token_ids)
    else:
        assert long.token_ids[-1] in stops
    every_token = tuple(range(len(tokenizer)))
    params = SamplingParams(max_new_tokens=5, stop_token_ids=every_token, seed=1)
    [short] = run(engine.generate([PROMPTS[0]], params))
    assert short.finish_reason == "stop" and len(short.token_ids) == 1


def test_im_end_is_a_stop_token(tiny) -> None:
    model, tokenizer = tiny
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in stop_ids_for(model, tokenizer)


def test_same_seed_same_sample_whatever_the_batch(tiny) -> None:
    engine = make_engine(tiny)
    params = SamplingParams(max_new_tokens=10, seed=11)
    [alone] = run(engine.generate([PROMPTS[2]], params))
    shifted = SamplingParams(max_new_tokens=10, seed=9)  # PROMPTS[2] gets seed 9 + 2 = 11
    batched = run(engine.generate(PROMPTS, shifted))
    assert batched[2].token_ids == alone.token_ids
    other = run(engine.generate([PROMPTS[2]], SamplingParams(max_new_tokens=10, seed=12)))
    assert other[0].token_ids != alone.token_ids or len(alone.token_ids) < 3


def test_concurrent_callers_are_batched_and_the_loop_keeps_running(tiny) -> None:
    engine = make_engine(tiny, gather_s=0.01)

    async def scenario():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        calls = [
            engine.generate([PROMPTS[i % 3]], SamplingParams(max_new_tokens=16, seed=i))
            for i in range(8)
        ]
        results = await asyncio.gather(*calls)
        done.set()
        await tick_task
        await engine.close()
        return ticks, results

    ticks, results = run(scenario())
    assert engine.rows_run == 8
    assert engine.batches_run < 8
    assert ticks > 10
    for i, [gen] in enumerate(results):
        [alone] = run(make_engine(tiny).generate([PROMPTS[i % 3]], SamplingParams(16, seed=i)))
        assert gen.token_ids == alone.token_ids
    assert all(r[0].metrics["batch_size"] > 1 for r in results)


def test_different_sampling_params_in_flight_together(tiny) -> None:
    engine = make_engine(tiny)

    async def scenario():
        a = engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=3, seed=1))
        b = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=7, temperature=0.5))
        out = await asyncio.gather(a, b)
        await engine.close()
        return out

    [[a], [b]] = run(scenario())
    assert len(a.token_ids) <= 3 and len(b.token_ids) <= 7


def test_load_weights_sets_version_and_changes_outputs(tiny_dir) -> None:
    from agentgym.models import load_model

    model, tokenizer = load_model(tiny_dir)
    engine = make_engine((model, tokenizer))
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    [before] = run(engine.generate([PROMPTS[0]], params))
    assert engine.version == 0 and before.policy_version == 0
    new_state = {k: 0.05 - 2.0 * v for k, v in model.state_dict().items()}  # tied stay equal
    run(engine.load_weights(new_state, version=4))
    [after] = run(engine.generate([PROMPTS[0]], params))
    assert engine.version == 4 and after.policy_version == 4
    embed = "model.embed_tokens.weight"
    assert torch.equal(model.state_dict()[embed], new_state[embed])
    assert after.token_ids != before.token_ids


def test_each_batch_and_weight_load_gives_the_freed_heap_back(tiny, monkeypatch) -> None:
    """The actor's engine trims its heap (``agentgym.transport.malloc.trim_heap``) after each
    batch (its key/value slabs) and each weight load (the received state dict)."""
    import agentgym.engines.hf as hf

    calls = []
    monkeypatch.setattr(hf, "trim_heap", lambda: calls.append(1) or True)
    model, _ = tiny
    engine = make_engine(tiny)
    run(engine.generate(PROMPTS[:2], SamplingParams(max_new_tokens=2, temperature=0.0)))
    assert len(calls) == engine.batches_run == 1
    run(engine.load_weights(dict(model.state_dict()), version=1))
    assert len(calls) == 2

    async def stream():
        for item in model.state_dict().items():
            yield item

    run(engine.load_weights_stream(stream(), version=2))
    assert len(calls) == 3 and engine.version == 2


def test_load_weights_rejects_unknown_names(tiny) -> None:
    engine = make_engine(tiny)
    with pytest.raises(KeyError):
        run(engine.load_weights({"not.a.weight": torch.zeros(1)}, version=1))
    assert engine.version == 0


def test_empty_prompt_is_an_error(tiny) -> None:
    with pytest.raises(ValueError):
        run(make_engine(tiny).generate([[]], SamplingParams()))


def test_sampling_params_are_validated() -> None:
    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError):
        SamplingParams(max_new_tokens=0)


def test_rows_that_stop_early_leave_the_batch_without_disturbing_others(tiny) -> None:
    model, _ = tiny
    engine = make_engine(tiny)
    free = SamplingParams(max_new_tokens=10, temperature=1.0, seed=21)
    baseline = run(engine.generate(PROMPTS, free))
    stop = baseline[0].token_ids[1]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=21, stop_token_ids=(stop,))
    gens = run(engine.generate(PROMPTS, params))
    assert gens[0].finish_reason == "stop" and len(gens[0].token_ids) <= 2
    assert any(len(g.token_ids) > len(gens[0].token_ids) for g in gens[1:])
    for prompt, gen, base in zip(PROMPTS, gens, baseline, strict=True):
        assert gen.token_ids == base.token_ids[: len(gen.token_ids)]
        want = separate_forward_logprobs(model, prompt, gen, params)
        assert gen.logprobs == pytest.approx(want, abs=2e-4)


def test_max_batch_size_splits_the_queue(tiny) -> None:
    engine = make_engine(tiny, max_batch_size=2)
    prompts = PROMPTS + PROMPTS[:2]
    params = SamplingParams(max_new_tokens=4, seed=5)
    gens = run(engine.generate(prompts, params))
    assert engine.batches_run == 3 and len(gens) == 5
    for i, gen in enumerate(gens):
        [alone] = run(make_engine(tiny).generate([prompts[i]], SamplingParams(4, seed=5 + i)))
        assert gen.token_ids == alone.token_ids


async def _stream(state: dict, fail_after: int | None = None):
    for i, item in enumerate(state.items()):
        if fail_after is not None and i == fail_after:
            raise ConnectionError("the learner went away mid-stream")
        yield item


def test_streamed_weights_load_like_a_state_dict(tiny_dir) -> None:
    from agentgym.models import load_model

    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    outputs = []
    for streamed in (False, True):
        model, tokenizer = load_model(tiny_dir)
        engine = make_engine((model, tokenizer))
        new_state = {k: 0.05 - 2.0 * v for k, v in model.state_dict().items()}
        if streamed:
            run(engine.load_weights_stream(_stream(new_state), version=3))
        else:
            run(engine.load_weights(new_state, version=3))
        [gen] = run(engine.generate([PROMPTS[0]], params))
        assert engine.version == 3 and gen.policy_version == 3
        outputs.append((gen.token_ids, gen.logprobs))
    assert outputs[0] == outputs[1]


def test_a_broken_stream_holds_generation_until_a_whole_one_arrives(tiny_dir) -> None:
    """A stream that breaks off leaves a mix of versions: version -1 (the next fetch asks
    for everything) and no generation until a complete stream has loaded."""
    from agentgym.models import load_model

    model, tokenizer = load_model(tiny_dir)
    engine = make_engine((model, tokenizer))
    new_state = {k: 0.05 - 2.0 * v for k, v in model.state_dict().items()}
    params = SamplingParams(max_new_tokens=4, temperature=0.0)

    async def main():
        with pytest.raises(ConnectionError):
            await engine.load_weights_stream(_stream(new_state, fail_after=2), version=5)
        assert engine.version == -1
        waiting = asyncio.ensure_future(engine.generate([PROMPTS[0]], params))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # held: the weights are a mix
        await engine.load_weights_stream(_stream(new_state), version=6)
        [gen] = await asyncio.wait_for(waiting, 10)
        return gen

    gen = run(main())
    assert engine.version == 6 and gen.policy_version == 6


def test_a_batch_waiting_for_the_lock_through_a_broken_stream_never_samples_mixed_weights(
    tiny_dir,
) -> None:
    """A batch that found the weights whole, then waited for the lock while a stream held it,
    must look again once it has the lock: the stream may have broken off (version -1)."""
    from agentgym.models import load_model

    model, tokenizer = load_model(tiny_dir)
    engine = make_engine((model, tokenizer))
    new_state = {k: 0.05 - 2.0 * v for k, v in model.state_dict().items()}
    params = SamplingParams(max_new_tokens=4, temperature=0.0)

    async def main():
        engine._lock.acquire()  # a weight stream holds the model
        waiting = asyncio.ensure_future(engine.generate([PROMPTS[0]], params))
        await asyncio.sleep(0.3)  # the batch saw whole weights and now waits for the lock
        engine._whole, engine._version = False, -1  # the stream broke off half-way
        engine._lock.release()
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await engine.load_weights_stream(_stream(new_state), version=7)
        [gen] = await asyncio.wait_for(waiting, 10)
        return gen

    gen = run(main())
    assert gen.policy_version == 7

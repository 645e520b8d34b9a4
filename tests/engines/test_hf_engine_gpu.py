"""The transformers engine on a CUDA GPU (``@pytest.mark.gpu``; skipped without one): the same
samples and behaviour log-probs as a separate forward pass on the GPU, the same greedy tokens as
the engine on CPU, and prefix reuse giving what a full prefill gives."""

import asyncio
import copy

import pytest

torch = pytest.importorskip("torch")

from agentgym.engines import SamplingParams  # noqa: E402
from agentgym.engines.hf import HFEngine, stop_ids_for  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROMPTS = [[5, 17, 42, 9, 77, 3], [11, 12], [101, 7, 7, 7, 30, 31, 32, 33, 34, 35]]


def engine_on(tiny, device: str, dtype=torch.float32) -> HFEngine:
    model, tokenizer = tiny
    model = copy.deepcopy(model).to(device, dtype)
    return HFEngine(
        model, stop_token_ids=stop_ids_for(model, tokenizer), pad_token_id=tokenizer.pad_token_id
    )


def generate(engine: HFEngine, params: SamplingParams):
    async def go():
        out = await engine.generate(PROMPTS, params)
        await engine.close()
        return out

    return asyncio.run(go())


def test_greedy_tokens_on_cuda_equal_cpu(tiny) -> None:
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    on_cpu = generate(engine_on(tiny, "cpu"), params)
    on_gpu = generate(engine_on(tiny, "cuda"), params)
    assert [g.token_ids for g in on_gpu] == [g.token_ids for g in on_cpu]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_logprobs_equal_a_forward_pass_on_cuda(tiny, dtype) -> None:
    engine = engine_on(tiny, "cuda", dtype)
    params = SamplingParams(max_new_tokens=12, temperature=0.7, seed=5)
    gens = generate(engine, params)
    tol = 2e-4 if dtype == torch.float32 else 5e-2
    for prompt, gen in zip(PROMPTS, gens, strict=True):
        ids = torch.tensor([prompt + gen.token_ids], device="cuda")
        with torch.no_grad():
            logits = engine.model(ids).logits[0].float() / 0.7
        logp = torch.log_softmax(logits, -1)
        want = [logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(gen.token_ids)]
        assert gen.logprobs == pytest.approx(want, abs=tol)


def test_prefix_reuse_on_cuda_gives_the_tokens_of_a_full_prefill(tiny) -> None:
    model, tokenizer = tiny
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=2)
    delta = [11, 12, 13, 14]

    def two_turns(cache_mb: float):
        engine = HFEngine(
            copy.deepcopy(model).to("cuda"), stop_token_ids=stop_ids_for(model, tokenizer),
            pad_token_id=tokenizer.pad_token_id, prefix_cache_mb=cache_mb,
        )  # fmt: skip

        async def go():
            first = await engine.generate([PROMPTS[0]] * 3, params)
            nxt = [PROMPTS[0] + g.token_ids + delta for g in first]
            second = await engine.generate(nxt, params)
            await engine.close()
            return first + second

        return asyncio.run(go()), engine.store

    full, _ = two_turns(0)
    reused, store = two_turns(64)
    assert [g.token_ids for g in reused] == [g.token_ids for g in full]
    for a, b in zip(full, reused, strict=True):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    assert store.reused_tokens > store.prefilled_tokens

"""The transformers engine on a CUDA GPU (``@pytest.mark.gpu``; skipped without one): the same
samples and behaviour log-probs as a separate forward pass on the GPU, and the same greedy
tokens as the engine on CPU."""

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

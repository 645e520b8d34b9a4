"""The vLLM engine. Output conversion runs everywhere; the engine itself needs CUDA and vLLM
(``@pytest.mark.gpu``) and is skipped cleanly without them."""

import asyncio
import importlib.util
from types import SimpleNamespace

import pytest

from agentgym.engines import SamplingParams
from agentgym.engines.vllm import from_vllm_output


def completion(token_ids, logprobs, finish_reason):
    steps = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(token_ids, logprobs, strict=True)]
    return SimpleNamespace(token_ids=token_ids, logprobs=steps, finish_reason=finish_reason)


def test_completion_becomes_a_generation() -> None:
    gen = from_vllm_output(completion([4, 9, 2], [-0.1, -2.0, -0.3], "stop"))
    assert gen.token_ids == [4, 9, 2]
    assert gen.logprobs == [-0.1, -2.0, -0.3]
    assert gen.finish_reason == "stop"


def test_missing_logprobs_or_aborted_requests_are_errors() -> None:
    with pytest.raises(RuntimeError, match="logprobs"):
        from_vllm_output(SimpleNamespace(token_ids=[1], logprobs=None, finish_reason="stop"))
    with pytest.raises(RuntimeError, match="abort"):
        from_vllm_output(completion([1], [-1.0], "abort"))


def _has_cuda_and_vllm() -> bool:
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda_and_vllm(), reason="needs a CUDA GPU and vllm")
def test_vllm_logprobs_match_hf_and_weights_load_in_place(tmp_path) -> None:
    import torch

    from agentgym.engines.vllm import VLLMEngine
    from agentgym.models import TinyModelSpec, build_tiny_model, load_model

    spec = TinyModelSpec(vocab_size=400, hidden_size=128, num_hidden_layers=2)
    path = build_tiny_model(tmp_path / "tiny", ["Thought: go.\nAction: move forward"] * 20, spec)
    engine = VLLMEngine.from_pretrained(path, dtype="float32", gpu_memory_utilization=0.3)
    model, _ = load_model(path)
    params = SamplingParams(max_new_tokens=8, temperature=0.8, top_k=20, seed=0)
    prompt = [5, 6, 7, 8]

    async def scenario():
        [gen] = await engine.generate([prompt], params)
        new_state = {k: v + 0.1 for k, v in model.state_dict().items()}
        await engine.load_weights(new_state, version=2)
        [after] = await engine.generate([prompt], params)
        await engine.close()
        return gen, after

    gen, after = asyncio.run(scenario())
    from agentgym.engines.sampling import processed_logprobs

    def hf_logprobs(m, g) -> list[float]:
        with torch.no_grad():
            logits = m(torch.tensor([prompt + g.token_ids])).logits[0]
        lp = processed_logprobs(logits, 0.8, top_k=20)
        return [lp[len(prompt) - 1 + j, t].item() for j, t in enumerate(g.token_ids)]

    assert gen.logprobs == pytest.approx(hf_logprobs(model, gen), abs=1e-3)
    assert after.policy_version == 2 and gen.policy_version == 0
    # the engine computes with the loaded weights: its log-probs after the load are those of
    # the new weights, not of the old ones
    new_model, _ = load_model(path)
    new_model.load_state_dict({k: v + 0.1 for k, v in model.state_dict().items()})
    assert after.logprobs == pytest.approx(hf_logprobs(new_model, after), abs=1e-3)
    old = hf_logprobs(model, after)
    assert max(abs(a - b) for a, b in zip(after.logprobs, old, strict=True)) > 1e-2

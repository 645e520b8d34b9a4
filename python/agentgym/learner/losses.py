"""Policy and value losses: pure functions of tensors.

Shapes: ``B`` sequences of ``T`` tokens; per-token tensors are float[B, T] aligned with the
tokens (position t holds the quantity for token t, predicted from tokens < t). Three policies
appear in the decoupled objective (AReaL):

- pi_theta: the policy being optimised (``logp``, with gradient);
- pi_prox: the proximal policy, recomputed by the learner at the start of the update
  (``prox_logp``); the trust region is measured against it;
- mu: the behaviour policy that sampled the tokens, possibly several versions old
  (``behav_logp``, from the trajectory).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from agentgym.learner.config import LossConfig

AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
BEHAVIOUR_WEIGHTS = ("token", "sequence", "mask", "none")
LOG_RATIO_CLAMP = 20.0
"""Log-ratios of two policies are clamped to +-this before ``exp`` (as verl does): float32's
exp overflows past 88, and one token whose log-prob drifted that far within an update would
make the loss infinite. exp(20) is far beyond any clip range, so the clipped objective is
unchanged wherever it is finite."""


def token_logprobs(
    logits: Tensor,
    tokens: Tensor,
    mask: Tensor,
    temperature: float = 1.0,
    *,
    positions: Tensor | None = None,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor]:
    """float[B, T] log pi(tokens[t] | tokens[<t]) and the entropy of that next-token
    distribution, at ``temperature``, for the positions where ``mask`` is set; 0 elsewhere and
    at position 0.

    ``logits`` is [B, T, V] as a causal LM returns it (position t predicts token t+1), or
    [B, K, V] holding only the K sorted ``positions`` (a model's ``logits_to_keep``), which must
    include every position that predicts a masked token. Dividing by the sampling temperature
    makes these the same log-probs the actor's sampler used. The softmax is taken only where it
    is needed: in a multi-turn episode the generated tokens are often a small share of the
    sequence. The entropy carries a gradient only if ``entropy_grad``.
    """
    rows, cols = (mask[:, 1:] > 0).nonzero(as_tuple=True)  # token cols + 1, predicted at cols
    at = cols if positions is None else torch.searchsorted(positions, cols)
    return scatter_logprobs(logits[rows, at], tokens, rows, cols, temperature, entropy_grad)


def scatter_logprobs(
    selected: Tensor,
    tokens: Tensor,
    rows: Tensor,
    cols: Tensor,
    temperature: float = 1.0,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor]:
    """``token_logprobs`` from the logits already picked out: ``selected`` [n, V] holds the
    logits that predict ``tokens[rows, cols + 1]``; returns float[B, T] log-probs and
    entropies with those entries set (0 elsewhere)."""
    B, T = tokens.shape
    logp = F.log_softmax(selected.float() / temperature, dim=-1)
    picked = logp.gather(-1, tokens[rows, cols + 1].unsqueeze(-1)).squeeze(-1)
    with nullcontext() if entropy_grad else torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    zeros = picked.new_zeros(B, max(T - 1, 0))
    index = (rows, cols)
    return F.pad(zeros.index_put(index, picked), (1, 0)), F.pad(
        zeros.index_put(index, entropy), (1, 0)
    )


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi (Schulman's estimators).

    k1 = log pi - log ref;  k3 = exp(d) - d - 1 with d = log ref - log pi (>= 0), d clamped
    to +-``LOG_RATIO_CLAMP`` before ``exp``.
    """
    if kind == "k1":
        return logp - ref_logp
    if kind == "k3":
        d = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return d.exp() - d - 1
    raise ValueError(f"unknown KL estimator {kind!r} (k1, k3)")


def aggregate(
    values: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_tokens: float | None = None,
) -> Tensor:
    """Reduce per-token ``values`` over the tokens where ``mask`` is 1.

    token-mean:              sum_{b,t} x m / N_tokens
    seq-mean-token-mean:     sum_b (sum_t x m / sum_t m) / N_seqs
    seq-mean-token-sum:      sum_b (sum_t x m) / N_seqs
    seq-mean-token-sum-norm: sum_{b,t} x m / C, C = ``norm_tokens``, a constant of the run
    N_tokens and N_seqs (sequences with at least one token) default to this batch's counts;
    pass the counts of the whole minibatch when accumulating gradients over micro-batches, so
    the micro-batch losses add up to exactly the minibatch loss.

    The first three divide by what the batch holds, so one row's weight shrinks when other
    rows (a group of long episodes without signal, say) join its batch. The last divides by a
    constant (Dr. GRPO, Liu et al. 2025: a token sum over a fixed budget; verl's mode of the
    same name): each row's gradient is its own, whatever else is in the batch.
    """
    m = mask.to(values.dtype)
    per_seq_tokens = m.sum(-1)
    if mode == "token-mean":
        n = per_seq_tokens.sum() if num_tokens is None else num_tokens
        return (values * m).sum() / max(n, 1)
    if mode == "seq-mean-token-sum-norm":
        if norm_tokens is None or norm_tokens <= 0:
            raise ValueError("seq-mean-token-sum-norm needs norm_tokens > 0 (a constant)")
        return (values * m).sum() / norm_tokens
    seq_sums = (values * m).sum(-1)
    if mode == "seq-mean-token-mean":
        seq_sums = seq_sums / per_seq_tokens.clamp(min=1)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss aggregation {mode!r} ({', '.join(AGGREGATIONS)})")
    n = (per_seq_tokens > 0).sum() if num_seqs is None else num_seqs
    return seq_sums.sum() / max(n, 1)


def behaviour_weights(
    prox_logp: Tensor, behav_logp: Tensor, mask: Tensor, mode: str = "token", cap: float = 5.0
) -> Tensor:
    """float[B, T]: importance weight w of each token for the off-policy correction (no grad).

    w_t = pi_prox(a_t) / mu(a_t), then by ``mode``:
      token:    min(w_t, cap)
      sequence: min(exp(mean_t log w_t), cap) for every token of the sequence (geometric mean)
      mask:     w_t where w_t <= cap, else 0 (the token is rejected, not down-weighted)
      none:     1 (plain PPO against pi_prox)
    The weight is 0 where ``mask`` is 0. When mu == pi_prox every weight is exactly 1.
    """
    m = mask.to(prox_logp.dtype)
    log_w = (prox_logp - behav_logp).detach() * m
    if mode == "none":
        return m.clone()
    if mode == "sequence":
        mean_log_w = log_w.sum(-1) / m.sum(-1).clamp(min=1)
        return mean_log_w.exp().clamp(max=cap)[:, None] * m
    w = log_w.exp()
    if mode == "token":
        return w.clamp(max=cap) * m
    if mode == "mask":
        return torch.where(w <= cap, w, torch.zeros_like(w)) * m
    raise ValueError(f"unknown behaviour weight mode {mode!r} ({', '.join(BEHAVIOUR_WEIGHTS)})")


@dataclass(frozen=True)
class PolicyLoss:
    """The policy-gradient loss and detached statistics about it."""

    loss: Tensor
    clip_fraction: Tensor
    dual_clip_fraction: Tensor
    weight_mean: Tensor
    weight_max: Tensor
    weight_ess: Tensor
    approx_kl_prox: Tensor


def policy_loss(
    logp: Tensor,
    prox_logp: Tensor,
    behav_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    *,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
) -> PolicyLoss:
    """Decoupled PPO loss (AReaL), aggregated with ``cfg.aggregation``.

    r_t = exp(clamp(log pi_theta - log pi_prox, +-LOG_RATIO_CLAMP));
    w_t = behaviour_weights(pi_prox, mu)
    l_t = w_t * max(-A_t r_t, -A_t clip(r_t, 1 - eps, 1 + eps_high))
    dual clip (c > 1), for A_t < 0 only: l_t = w_t * min(max(...), -c A_t)
    With mu == pi_prox (w = 1) this is exactly the standard clipped PPO objective.

    ``cfg`` is the learner's ``LossConfig`` with its aggregation resolved
    (``LearnerConfig.aggregation``: None there means "the estimator's default").
    """
    if cfg.aggregation is None:
        raise ValueError("policy_loss: cfg.aggregation is None; pass LearnerConfig.aggregation")
    m = mask.to(logp.dtype)
    eps_high = cfg.clip_eps if cfg.clip_eps_high is None else cfg.clip_eps_high
    ratio = (logp - prox_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - cfg.clip_eps, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    dual_hit = torch.zeros_like(m, dtype=torch.bool)
    if cfg.dual_clip is not None:
        cap = -cfg.dual_clip * advantages
        dual_hit = (advantages < 0) & (per_token > cap)
        per_token = torch.where(dual_hit, cap, per_token)
    w = behaviour_weights(prox_logp, behav_logp, m, cfg.behaviour_weight, cfg.behaviour_cap)
    loss = aggregate(
        w * per_token, m, cfg.aggregation,
        num_tokens=num_tokens, num_seqs=num_seqs, norm_tokens=cfg.norm_tokens,
    )  # fmt: skip
    with torch.no_grad():
        stats = _loss_stats(clipped > unclipped, dual_hit, w, m, logp, prox_logp)
    return PolicyLoss(loss, *stats)


def _loss_stats(clip_hit, dual_hit, w, m, logp, prox_logp) -> tuple[Tensor, ...]:
    n = m.sum().clamp(min=1)
    on = m > 0
    w_on = w[on]
    ess = w_on.sum() ** 2 / (w_on.pow(2).sum() * on.sum()).clamp(min=1e-12)
    return (
        (clip_hit.float() * m).sum() / n,
        (dual_hit.float() * m).sum() / n,
        w_on.mean() if w_on.numel() else w.new_zeros(()),
        w_on.max() if w_on.numel() else w.new_zeros(()),
        ess,
        ((prox_logp - logp) * m).sum() / n,
    )


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None = 0.2,
    aggregation: str = "token-mean",
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
    norm_tokens: float | None = None,
) -> Tensor:
    """Clipped value loss: 0.5 * max((V - G)^2, (V_old + clip(V - V_old, -c, c) - G)^2)."""
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * aggregate(
        err, mask, aggregation, num_tokens=num_tokens, num_seqs=num_seqs, norm_tokens=norm_tokens
    )


def sft_loss(logp: Tensor, mask: Tensor, num_tokens: float | Tensor | None = None) -> Tensor:
    """Token-mean negative log-likelihood of the masked (assistant) tokens.

    L = -sum_{b,t} m_{b,t} log pi(x_{b,t} | x_{b,<t}) / N, with N = ``num_tokens`` (the masked
    tokens of the whole update, so that micro-batches add up to the update's mean) or, by
    default, this batch's masked tokens.
    """
    return aggregate(-logp, mask, "token-mean", num_tokens=num_tokens)


def sequence_logprobs(logp: Tensor, mask: Tensor) -> Tensor:
    """float[B]: sum over the masked tokens of each sequence's log-probs (log pi(y | x))."""
    return (logp * mask.to(logp.dtype)).sum(-1)


def dpo_loss(
    chosen: Tensor,
    rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    *,
    beta: float = 0.1,
    kind: str = "sigmoid",
) -> tuple[Tensor, Tensor]:
    """Preference loss over pairs, from sequence log-probs (float[P] each, ``sequence_logprobs``).

    h = (log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))
    sigmoid (DPO, Rafailov et al. 2023): L = -mean log sigmoid(beta * h)
    ipo (Azar et al. 2023):              L = mean (h - 1 / (2 beta))^2
    Returns (loss, the implicit reward margin beta * h per pair, detached).
    """
    h = (chosen - ref_chosen) - (rejected - ref_rejected)
    if kind == "sigmoid":
        loss = -F.logsigmoid(beta * h).mean()
    elif kind == "ipo":
        loss = ((h - 1 / (2 * beta)) ** 2).mean()
    else:
        raise ValueError(f"unknown preference loss {kind!r} (sigmoid, ipo)")
    return loss, (beta * h).detach()

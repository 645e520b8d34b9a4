"""Offline preference optimisation (DPO, IPO) on pairs of episodes of the same task.

The reference policy is a frozen copy of the policy as training starts. Dropout is off in
both (as in the RL learner), so they are the same function until the first step and the
implicit rewards start at exactly 0. For each pair, the
sequence log-probability of each side is the sum of its assistant tokens' log-probs (what the
policy generated); ``agentgym.learner.losses.dpo_loss`` turns the four sums into the loss. A
step's loss is the mean over its pairs, accumulated over micro-batches of pairs; checkpoints use
the learner's format.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from agentgym.learner.config import DPOConfig
from agentgym.learner.datasets import Example
from agentgym.learner.forward import forward_tokens
from agentgym.learner.losses import dpo_loss, sequence_logprobs
from agentgym.learner.offline import offline_loop, pad_examples

Pair = tuple[Example, Example]


@dataclass
class DPOResult:
    """What a run did."""

    steps: int
    final_loss: float
    final_accuracy: float
    """Share of the last step's pairs whose implicit reward prefers the chosen side."""
    checkpoint: Path | None
    done: int = 0
    """The step reached (``steps`` unless stopped)."""
    stopped: bool = False
    """Stopped early on request, at a checkpoint (``resume`` it to go on)."""


def side_logprobs(model: nn.Module, examples: Sequence[Example], pad_token_id: int) -> torch.Tensor:
    """float[N]: log pi(assistant tokens | context) of each example under ``model``."""
    batch = pad_examples(examples, pad_token_id)
    out = forward_tokens(model, batch, 1.0)
    return sequence_logprobs(out.logp, batch.loss_mask)


def train_dpo(
    model: nn.Module,
    pairs: Sequence[Pair],
    cfg: DPOConfig,
    *,
    pad_token_id: int,
    out_dir: str | Path,
    progress: Callable[[str], None] = print,
    tokenizer_id: str = "",
    resume: str | Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> DPOResult:
    """Optimise ``model`` in place on ``pairs`` against a frozen copy of itself as it is
    passed in (the starting policy, also when ``resume`` then loads a checkpoint of this
    run's later weights into it). ``resume`` and ``should_stop``: see
    ``agentgym.learner.offline.offline_loop``."""
    if not pairs:
        raise ValueError("dpo: no usable pairs")
    reference = copy.deepcopy(model).eval().requires_grad_(False)

    def step_fn(optimizer_step, step: list[int]) -> dict[str, float]:
        chosen = [pairs[i] for i in step]
        loss, margins = _pairs_loss(model, reference, chosen, cfg, pad_token_id)
        optimizer_step()
        accuracy = float((margins > 0).float().mean())
        return {"loss": loss, "reward_margin": float(margins.mean()), "accuracy": accuracy}

    run = offline_loop(
        model, len(pairs), cfg, step_fn, out_dir, "dpo", progress, tokenizer_id,
        resume=resume, should_stop=should_stop, dropout=False,
    )  # fmt: skip
    nan = float("nan")
    loss, accuracy = run.last.get("loss", nan), run.last.get("accuracy", nan)
    return DPOResult(run.steps, loss, accuracy, run.checkpoint, run.done, run.stopped)


def _pairs_loss(model, reference, pairs: list[Pair], cfg: DPOConfig, pad_token_id: int):
    """Back-propagate the mean loss of ``pairs`` (micro-batch by micro-batch); returns (loss,
    float[N] implicit reward margins)."""
    total, margins = 0.0, []
    for i in range(0, len(pairs), cfg.micro_batch_size):
        micro = pairs[i : i + cfg.micro_batch_size]
        sides = [c for c, _ in micro] + [r for _, r in micro]
        logp = side_logprobs(model, sides, pad_token_id)
        with torch.no_grad():
            ref = side_logprobs(reference, sides, pad_token_id)
        n = len(micro)
        loss, margin = dpo_loss(logp[:n], logp[n:], ref[:n], ref[n:], beta=cfg.beta, kind=cfg.loss)
        (loss * n / len(pairs)).backward()
        total += float(loss.detach()) * n / len(pairs)
        margins.append(margin)
    return total, torch.cat(margins)

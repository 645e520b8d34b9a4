"""What SFT and DPO share: padding examples, the seeded order of optimizer steps, and the loop
that runs the steps, writes metrics and checkpoints in the learner's format, stops at a
checkpoint when asked and resumes from one."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentgym.learner.batch import TrainBatch
from agentgym.learner.checkpoint import TrainingState, load_checkpoint, save_checkpoint
from agentgym.learner.datasets import Example
from agentgym.learner.metrics import MetricsWriter
from agentgym.learner.update import OptimizerStep, adamw

StepFn = Callable[[OptimizerStep, list[int]], dict[str, float]]
"""One optimizer step over the items at the given indices: accumulates their gradients, then
calls the ``OptimizerStep``; returns its metrics (with loss)."""


def pad_examples(examples: Sequence[Example], pad_token_id: int) -> TrainBatch:
    """Right-padded tensors of ``examples`` (no rewards or behaviour log-probs: zeros)."""
    B, T = len(examples), max(len(e.tokens) for e in examples)
    tokens = np.full((B, T), pad_token_id, np.int64)
    attention, mask = np.zeros((B, T), np.int64), np.zeros((B, T), np.float32)
    for i, e in enumerate(examples):
        n = len(e.tokens)
        tokens[i, :n], attention[i, :n], mask[i, :n] = e.tokens, 1, e.loss_mask
    zeros = torch.zeros(B, dtype=torch.long)
    return TrainBatch(
        tokens=torch.from_numpy(tokens),
        attention_mask=torch.from_numpy(attention),
        loss_mask=torch.from_numpy(mask),
        behav_logp=torch.zeros(B, T),
        rewards=torch.zeros(B),
        group_index=zeros,
        min_versions=zeros,
    )


def step_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Item indices of each optimizer step of ``epoch`` (a seeded shuffle)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    ids = order.tolist()
    return [ids[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass
class LoopResult:
    """What ``offline_loop`` did."""

    steps: int
    """The optimizer steps of the whole plan (all epochs)."""
    done: int
    """The step reached (``steps`` unless stopped)."""
    last: dict[str, float]
    """The metrics of the last step taken ({} when none was)."""
    checkpoint: Path | None
    """The last checkpoint written."""
    stopped: bool
    """Whether ``should_stop`` ended the loop early (a checkpoint was written first)."""


def plan_steps(num_items: int, cfg: Any) -> list[tuple[int, list[int]]]:
    """(epoch, item indices) of every optimizer step, in order: the same for the same seed,
    which is what lets a resumed run take up where it stopped."""
    return [
        (epoch, step)
        for epoch in range(cfg.epochs)
        for step in step_batches(num_items, cfg.batch_size, cfg.seed, epoch)
    ]


def offline_loop(
    model: nn.Module,
    num_items: int,
    cfg: Any,
    step_fn: StepFn,
    out_dir: str | Path,
    label: str,
    progress: Callable[[str], None] = print,
    tokenizer_id: str = "",
    *,
    generator: torch.Generator | None = None,
    resume: str | Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    dropout: bool = True,
) -> LoopResult:
    """Run ``cfg.epochs`` passes of ``cfg.batch_size`` items per step (``cfg`` an ``SFTConfig``
    or ``DPOConfig``), appending a line per step to ``out_dir/metrics.jsonl`` and writing
    checkpoints to ``out_dir/checkpoints``.

    ``generator`` is the step function's random stream (saved in checkpoints). ``resume``, a
    checkpoint of this loop, restores the weights, the optimizer, the random streams and the
    step reached, and the loop continues with the next step of the same plan. When
    ``should_stop()`` turns true after a step, that step is checkpointed and the loop returns
    (``stopped``). The model is in training mode during the steps (its dropout on) only with
    ``dropout``."""
    out = Path(out_dir)
    optimizer = adamw(model.parameters(), cfg.optim)
    optimizer_step = OptimizerStep(optimizer, cfg.optim.grad_clip)
    generator = generator if generator is not None else torch.Generator().manual_seed(cfg.seed)
    plan = plan_steps(num_items, cfg)
    # what the plan is made of: a resumed run must have the same (a larger cfg.epochs only
    # appends epochs, the steps before stay the same)
    counters = {"items": num_items, "batch_size": cfg.batch_size, "seed": cfg.seed}
    first = 0
    if resume is not None:
        state = load_checkpoint(resume, model, optimizer, generator)
        first, optimizer_step.skipped = state.version, state.counters.get("skipped_steps", 0)
    metrics = MetricsWriter(out / "metrics.jsonl")
    last: dict[str, float] = {}
    checkpoint, number, stopped = None, first, False
    start = time.perf_counter()
    model.train(dropout)
    try:
        for number, (epoch, step) in enumerate(plan[first:], start=first + 1):
            skipped_before = optimizer_step.skipped
            last = {"epoch": epoch, **step_fn(optimizer_step, step)}
            last["skipped_steps"] = optimizer_step.skipped - skipped_before
            last["skipped_steps_total"] = optimizer_step.skipped
            metrics.write(number, last)
            elapsed = time.perf_counter() - start
            shown = _shown(last)
            pace = elapsed / (number - first)
            progress(
                f"{label} step {number}/{len(plan)} epoch {epoch + 1}/{cfg.epochs} {shown} "
                f"eta {pace * (len(plan) - number):.0f}s"
            )
            stopped = should_stop() and number < len(plan)
            periodic = cfg.checkpoint_every and number % cfg.checkpoint_every == 0
            if number == len(plan) or periodic or stopped:
                done = counters | {"epoch": epoch, "skipped_steps": optimizer_step.skipped}
                state = TrainingState(number, {}, done, tokenizer=tokenizer_id)
                checkpoint = save_checkpoint(
                    out / "checkpoints", state, model, optimizer, generator
                )
            if stopped:
                break
    finally:
        metrics.close()
        model.eval()
    return LoopResult(len(plan), number, last, checkpoint, stopped)


def _shown(metrics: dict[str, float]) -> str:
    """A step's metrics for its progress line (the skip counts once a step was skipped)."""
    quiet = {"epoch"}
    if not metrics.get("skipped_steps_total"):
        quiet |= {"skipped_steps", "skipped_steps_total"}
    return " ".join(f"{k} {v:.4g}" for k, v in metrics.items() if k not in quiet)

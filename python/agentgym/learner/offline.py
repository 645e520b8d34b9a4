"""What SFT and DPO share: padding examples, the seeded order of optimizer steps, and the loop
that runs the steps, writes metrics and checkpoints in the learner's format."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentgym.learner.batch import TrainBatch
from agentgym.learner.checkpoint import TrainingState, save_checkpoint
from agentgym.learner.datasets import Example
from agentgym.learner.metrics import MetricsWriter

StepFn = Callable[[torch.optim.Optimizer, list[int]], dict[str, float]]
"""One optimizer step over the items at the given indices; returns its metrics (with loss)."""


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


def clip_and_step(model: nn.Module, optimizer: torch.optim.Optimizer, clip: float | None) -> float:
    """Clip the global gradient norm, step and clear the gradients; returns the norm."""
    params = [p for p in model.parameters() if p.requires_grad]
    norm = nn.utils.clip_grad_norm_(params, clip if clip is not None else float("inf"))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


def offline_loop(
    model: nn.Module,
    num_items: int,
    cfg: Any,
    step_fn: StepFn,
    out_dir: str | Path,
    label: str,
    progress: Callable[[str], None] = print,
    tokenizer_id: str = "",
) -> tuple[int, dict[str, float], Path | None]:
    """Run ``cfg.epochs`` passes of ``cfg.batch_size`` items per step (``cfg`` an ``SFTConfig``
    or ``DPOConfig``); returns (steps, the last step's metrics, the last checkpoint)."""
    out = Path(out_dir)
    o = cfg.optim
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    plan = [
        (epoch, step)
        for epoch in range(cfg.epochs)
        for step in step_batches(num_items, cfg.batch_size, cfg.seed, epoch)
    ]
    metrics = MetricsWriter(out / "metrics.jsonl")
    last: dict[str, float] = {}
    checkpoint = None
    start = time.perf_counter()
    model.train()
    try:
        for number, (epoch, step) in enumerate(plan, start=1):
            last = {"epoch": epoch, **step_fn(optimizer, step)}
            metrics.write(number, last)
            elapsed = time.perf_counter() - start
            shown = " ".join(f"{k} {v:.4g}" for k, v in last.items() if k != "epoch")
            progress(
                f"{label} step {number}/{len(plan)} epoch {epoch + 1}/{cfg.epochs} {shown} "
                f"eta {elapsed / number * (len(plan) - number):.0f}s"
            )
            if number == len(plan) or (cfg.checkpoint_every and number % cfg.checkpoint_every == 0):
                state = TrainingState(number, {}, {"epoch": epoch}, tokenizer=tokenizer_id)
                checkpoint = save_checkpoint(
                    out / "checkpoints", state, model, optimizer, generator
                )
    finally:
        metrics.close()
        model.eval()
    return len(plan), last, checkpoint

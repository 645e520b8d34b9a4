"""Supervised fine-tuning on trajectory datasets: token-mean NLL on assistant tokens.

The examples (``agentgym.learner.datasets``) are shuffled once per epoch; each optimizer step
takes ``batch_size`` of them, sorts them by length and runs them as micro-batches of similar
length (longest first), accumulating gradients. The loss of every micro-batch is normalised by
the assistant tokens of the whole step, so the step's gradient is that of the token mean over
all its sequences, whatever the micro-batch size. Checkpoints use the learner's format, so
``agentgym eval --checkpoint RUN_DIR/sft/checkpoints`` takes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from agentgym.config import SFTConfig
from agentgym.learner.batch import TrainBatch
from agentgym.learner.checkpoint import TrainingState, save_checkpoint
from agentgym.learner.datasets import Example
from agentgym.learner.learner import forward_tokens
from agentgym.learner.losses import sft_loss
from agentgym.learner.metrics import MetricsWriter


@dataclass
class SFTResult:
    """What a run did."""

    steps: int
    tokens: int
    """Assistant tokens trained on (over all epochs)."""
    final_loss: float
    checkpoint: Path | None


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
    """Example indices of each optimizer step of ``epoch`` (a seeded shuffle)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    ids = order.tolist()
    return [ids[i : i + batch_size] for i in range(0, n, batch_size)]


def micro_batches(examples: Sequence[Example], step: list[int], size: int) -> list[list[int]]:
    """The step's examples, longest first, in micro-batches of ``size``."""
    ordered = sorted(step, key=lambda i: -len(examples[i].tokens))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def train_sft(
    model: nn.Module,
    examples: Sequence[Example],
    cfg: SFTConfig,
    *,
    pad_token_id: int,
    out_dir: str | Path,
    progress: Callable[[str], None] = print,
) -> SFTResult:
    """Fine-tune ``model`` in place on ``examples``; writes metrics and checkpoints under
    ``out_dir`` (``metrics.jsonl``, ``checkpoints/``)."""
    if not examples:
        raise ValueError("sft: no usable examples")
    out = Path(out_dir)
    o = cfg.optim
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    metrics = MetricsWriter(out / "metrics.jsonl")
    plan = [
        (e, s)
        for e in range(cfg.epochs)
        for s in step_batches(len(examples), cfg.batch_size, cfg.seed, e)
    ]
    model.train()
    start, tokens_seen, loss, checkpoint = time.perf_counter(), 0, float("nan"), None
    try:
        for number, (epoch, step) in enumerate(plan, start=1):
            loss, tokens, grad_norm = _step(model, optimizer, examples, step, cfg, pad_token_id)
            tokens_seen += tokens
            elapsed = time.perf_counter() - start
            metrics.write(
                number,
                {"epoch": epoch, "loss": loss, "tokens": tokens, "grad_norm": grad_norm,
                 "tokens_per_s": tokens_seen / elapsed},
            )  # fmt: skip
            eta = elapsed / number * (len(plan) - number)
            progress(
                f"sft step {number}/{len(plan)} epoch {epoch + 1}/{cfg.epochs} "
                f"loss {loss:.4f} {tokens_seen / elapsed:,.0f} tok/s eta {eta:.0f}s"
            )
            if number == len(plan) or (cfg.checkpoint_every and number % cfg.checkpoint_every == 0):
                state = TrainingState(number, {}, {"epoch": epoch, "tokens": tokens_seen})
                checkpoint = save_checkpoint(
                    out / "checkpoints", state, model, optimizer, generator
                )
    finally:
        metrics.close()
        model.eval()
    return SFTResult(len(plan), tokens_seen, loss, checkpoint)


def _step(
    model, optimizer, examples, step, cfg: SFTConfig, pad_token_id
) -> tuple[float, int, float]:
    num_tokens = sum(sum(examples[i].loss_mask) for i in step)
    total = 0.0
    for micro in micro_batches(examples, step, cfg.micro_batch_size):
        batch = pad_examples([examples[i] for i in micro], pad_token_id)
        out = forward_tokens(model, batch, 1.0)
        loss = sft_loss(out.logp, batch.loss_mask, num_tokens=num_tokens)
        loss.backward()
        total += float(loss.detach())
    clip = cfg.optim.grad_clip
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = nn.utils.clip_grad_norm_(params, clip if clip is not None else float("inf"))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total, num_tokens, float(grad_norm)

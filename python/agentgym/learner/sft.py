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

import torch
from torch import nn

from agentgym.learner.config import SFTConfig
from agentgym.learner.datasets import Example
from agentgym.learner.forward import forward_tokens
from agentgym.learner.losses import sft_loss
from agentgym.learner.offline import offline_loop, pad_examples
from agentgym.models import copy_loss

COPY_MIX_BATCH = 8
"""Copy sequences per step with ``copy_mix`` (a quarter of the warm-up's batch)."""


@dataclass
class SFTResult:
    """What a run did."""

    steps: int
    """Optimizer steps of the whole plan."""
    tokens: int
    """Assistant tokens trained on by this call."""
    final_loss: float
    checkpoint: Path | None
    done: int = 0
    """The step reached (``steps`` unless stopped)."""
    stopped: bool = False
    """Stopped early on request, at a checkpoint (``resume`` it to go on)."""


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
    tokenizer_id: str = "",
    copy_ids: torch.Tensor | None = None,
    resume: str | Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> SFTResult:
    """Fine-tune ``model`` in place on ``examples``; writes metrics and checkpoints under
    ``out_dir`` (``metrics.jsonl``, ``checkpoints/``). With ``cfg.copy_mix``, ``copy_ids`` are
    the token ids its copy spans are drawn from (``agentgym.models.copy_token_ids``).
    ``resume`` and ``should_stop``: see ``agentgym.learner.offline.offline_loop``."""
    if not examples:
        raise ValueError("sft: no usable examples")
    if cfg.copy_mix and copy_ids is None:
        raise ValueError("sft: copy_mix needs the token ids to draw copy spans from")
    seen = {"tokens": 0}
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(cfg.seed)

    def step_fn(optimizer_step, step: list[int]) -> dict[str, float]:
        loss, tokens = _demo_loss(model, examples, step, cfg, pad_token_id)
        metrics = {"loss": loss, "tokens": tokens}
        if cfg.copy_mix:
            copy = copy_loss(model, copy_ids, COPY_MIX_BATCH, generator)
            (cfg.copy_mix * copy).backward()
            metrics["copy_loss"] = float(copy.detach())
        seen["tokens"] += tokens
        rate = seen["tokens"] / (time.perf_counter() - start)
        grad_norm = optimizer_step()
        return {**metrics, "grad_norm": grad_norm, "tokens_per_s": rate}

    run = offline_loop(
        model, len(examples), cfg, step_fn, out_dir, "sft", progress, tokenizer_id,
        generator=generator, resume=resume, should_stop=should_stop,
    )  # fmt: skip
    loss = run.last.get("loss", float("nan"))
    return SFTResult(run.steps, seen["tokens"], loss, run.checkpoint, run.done, run.stopped)


def _demo_loss(model, examples, step, cfg: SFTConfig, pad_token_id) -> tuple[float, int]:
    """Back-propagate the step's token-mean NLL; returns (loss, assistant tokens)."""
    num_tokens = sum(sum(examples[i].loss_mask) for i in step)
    total = 0.0
    device = next(model.parameters()).device
    for micro in micro_batches(examples, step, cfg.micro_batch_size):
        batch = pad_examples([examples[i] for i in micro], pad_token_id)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            out = forward_tokens(model, batch, 1.0)
        loss = sft_loss(out.logp, batch.loss_mask, num_tokens=num_tokens)
        loss.backward()
        total += float(loss.detach())
    return total, num_tokens

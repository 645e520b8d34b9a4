"""Train the tiny model on fixed batches, in one process or as one rank under torchrun.

    python dist_worker.py OUT_DIR --estimator grpo --steps 3 [--save-at 2] [--resume CKPT]
        [--device cuda] [--opening 6 [--no-shared-prefix]]

Writes OUT_DIR/params.safetensors (the policy's whole state dict after the last step, and the
value head's as ``value_head.*``) and OUT_DIR/metrics.json (each step's metrics), from rank 0.
Step i trains on ``batch(i)``; every process builds the same batches, so a run under torchrun
and a run in one process see the same data. ``--opening N``: a group's episodes share their
first N tokens; ``--no-shared-prefix``: the learner runs every episode whole.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from learner_helpers import make_groups, tiny_model  # noqa: E402

from agentgym.learner import AdvantageConfig, Learner, LearnerConfig, OptimConfig  # noqa: E402
from agentgym.learner.distributed import from_environment, full_state_dict_items  # noqa: E402


def learner_config(estimator: str, checkpoint_dir: str | None) -> LearnerConfig:
    """PPO-style updates with two epochs of two minibatches, micro-batches of 3 rows: the first
    minibatch reuses its own pass as pi_prox, and ranks get uneven numbers of micro-batches."""
    return LearnerConfig(
        advantage=AdvantageConfig(estimator=estimator),
        optim=OptimConfig(lr=3e-3),
        ppo_epochs=2,
        minibatches=2,
        micro_batch_size=3,
        groups_per_step=3,
        checkpoint_dir=checkpoint_dir,
    )


def batch(step: int, opening: int = 0):
    """Step ``step``'s batch: 3 groups of 5 episodes scored by the initial model, each
    group's sharing its first ``opening`` tokens."""
    return make_groups(tiny_model(), num_groups=3, group_size=5, seed=100 + step, opening=opening)


def train(
    out: Path,
    estimator: str,
    steps: int,
    *,
    save_at: int | None = None,
    resume: str | None = None,
    die_at: int | None = None,
    device: str = "cpu",
    opening: int = 0,
    shared_prefix: bool = True,
) -> None:
    """Train up to version ``steps`` and write the results (see the module docstring)."""
    dist = from_environment(device, timeout_s=60)
    cfg = replace(
        learner_config(estimator, str(out / "checkpoints")),
        device=device, shared_prefix=shared_prefix,
    )  # fmt: skip
    learner = Learner(tiny_model(), cfg, dist=dist)
    if resume:
        learner.load_checkpoint(resume)
    metrics = []
    while learner.version < steps:
        if die_at == learner.version and dist.rank == 1:
            os._exit(3)  # a rank that dies mid-run, without saying goodbye
        metrics.append(learner.step(batch(learner.version, opening)))
        if save_at == learner.version:
            learner.save_checkpoint()
    items = dict(full_state_dict_items(learner.model, keep=dist.is_main))
    if learner.update.value_head is not None:
        head = full_state_dict_items(learner.update.value_head, keep=dist.is_main)
        items.update({f"value_head.{k}": v for k, v in head})
    if dist.is_main:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.cpu().contiguous() for k, v in items.items() if k != "lm_head.weight"}
        save_file(tensors, str(out / "params.safetensors"))
        (out / "metrics.json").write_text(json.dumps(metrics))
    dist.close()
    dist.exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--estimator", default="grpo")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--save-at", type=int, default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--die-at", type=int, default=None, help="rank 1 exits at this step")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--opening", type=int, default=0)
    parser.add_argument("--no-shared-prefix", dest="shared_prefix", action="store_false")
    args = parser.parse_args()
    torch.set_num_threads(1)
    train(
        args.out, args.estimator, args.steps,
        save_at=args.save_at, resume=args.resume, die_at=args.die_at, device=args.device,
        opening=args.opening, shared_prefix=args.shared_prefix,
    )  # fmt: skip


if __name__ == "__main__":
    main()

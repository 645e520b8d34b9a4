"""Learner throughput on CPU with the tiny model: tokens trained per second.

The model is a randomly initialised Qwen2 with the sizes of ``agentgym.models.TinyModelSpec``
(the quickstart model); the batches are GRPO groups of multi-turn episodes with a loss mask
over about half of the tokens. One update = advantages + one optimizer step per minibatch with
gradient accumulation (pi_prox of the first minibatch comes from its own forward pass, so with
the default single minibatch there is no separate pi_prox pass); tokens/s counts every real
(unpadded) token of the batch once per update.

    python bench/bench_learner.py [--steps 3] [--tokens 512 1024] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agentgym.learner import Learner, LearnerConfig, OptimConfig  # noqa: E402
from agentgym.transport.wire import Trajectory  # noqa: E402


def tiny_qwen2():
    """Random Qwen2 with the quickstart model's sizes."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentgym.models import TinyModelSpec

    spec = TinyModelSpec()
    torch.manual_seed(spec.seed)
    cfg = Qwen2Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg), spec


def episodes(
    groups: int, group_size: int, tokens: int, vocab: int, seed: int, shared: int = 0
) -> list:
    """``groups`` x ``group_size`` episodes of ``tokens`` tokens, half of them generated;
    ``shared``: the first this many tokens are the same in every episode of a group (a GRPO
    group's opening: instruction, example, first observation), none of them generated."""
    rng = np.random.default_rng(seed)
    mask = ((np.arange(tokens) // 32) % 2).astype(np.uint8)
    mask[: max(64, shared)] = 0
    out = []
    for g in range(groups):
        opening = rng.integers(0, vocab, shared, dtype=np.int32)
        for i in range(group_size):
            tokens_i = rng.integers(0, vocab, tokens, dtype=np.int32)
            tokens_i[:shared] = opening
            out.append(
                Trajectory(
                    episode_id=g * group_size + i,
                    group_id=g,
                    group_size=group_size,
                    env="bench",
                    task_id=g,
                    horizon_cap=None,
                    turn_versions=np.zeros(4, np.int32),
                    tokens=tokens_i,
                    logprobs=(-rng.random(tokens) * mask).astype(np.float32),
                    loss_mask=mask,
                    prompt_len=max(64, shared),
                    reward=float(rng.random() > 0.5),
                    success=False,
                    truncation="",
                    num_turns=4,
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, spec = tiny_qwen2()
    params = sum(p.numel() for p in model.parameters())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({args.threads} threads), model: Qwen2 {spec.num_hidden_layers}x{spec.hidden_size}, "
        f"vocab {spec.vocab_size}, {params / 1e6:.2f}M params\n"
    )
    print("| tokens/episode | episodes/update | micro-batch | bf16 | s/update | tokens/s |")
    print("|---:|---:|---:|---|---:|---:|")
    for tokens in args.tokens:
        for bf16 in (False, True):
            cfg = LearnerConfig(optim=OptimConfig(lr=1e-4), micro_batch_size=4, bf16=bf16)
            learner = Learner(model, cfg)
            data = episodes(args.groups, args.group_size, tokens, spec.vocab_size, tokens)
            learner.step(data)  # warm-up
            start = time.perf_counter()
            total = 0
            for _ in range(args.steps):
                total += learner.step(data)["tokens"]
            elapsed = (time.perf_counter() - start) / args.steps
            print(
                f"| {tokens} | {len(data)} | 4 | {'yes' if bf16 else 'no'} | {elapsed:.2f} | "
                f"{total / args.steps / elapsed:,.0f} |"
            )


if __name__ == "__main__":
    main()

"""Learner throughput on CPU with the tiny model: tokens trained per second.

The model is a randomly initialised Qwen2 with the sizes of ``agentgym.models.TinyModelSpec``
(the quickstart model); the batches are GRPO groups of multi-turn episodes with a loss mask
over about half of the tokens. One update = advantages + one optimizer step per minibatch with
gradient accumulation (pi_prox of the first minibatch comes from its own forward pass, so with
the default single minibatch there is no separate pi_prox pass); tokens/s counts every real
(unpadded) token of the batch once per update.

    python bench/bench_learner.py [--steps 3] [--tokens 512 1024] [--threads N]

``--model DIR`` runs a real checkpoint instead, bf16, on groups whose episodes share their first
``--shared`` tokens (the recipe's GRPO openings), ``--micro-batch-size`` as the recipe sets it,
dr_grpo; each arm in its own process, this checkout's code and, with ``--before-src``, another
build's (its ``python/`` directory, the native module in it), taking turns for ``--rounds``
rounds: seconds per update (the first update of each process left out), tokens/s and tokens run
per update:

    python bench/bench_learner.py --model runs/models/smollm2-135m-instruct --tokens 1150 \
        --shared 700 --groups 2 --group-size 8 --micro-batch-size 2 --threads 1 --steps 2 \
        --before-src /tmp/before/python [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A child process of ``--model`` runs the code of ``--src``.
_SRC = next((a for f, a in zip(sys.argv, sys.argv[1:], strict=False) if f == "--src"), None)
sys.path.insert(0, _SRC or str(ROOT / "python"))

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


def real_model_updates(args) -> dict:
    """Updates of the real model ``args.model`` in this process: seconds of each (warm-up
    first), tokens per update and tokens its passes ran."""
    from agentgym.learner.config import AdvantageConfig, LossConfig
    from agentgym.models import load_model

    model, _ = load_model(args.model)
    cfg = LearnerConfig(
        optim=OptimConfig(lr=1e-5, grad_clip=1.0),
        micro_batch_size=args.micro_batch_size,
        bf16=True,
        groups_per_step=args.groups,
        advantage=AdvantageConfig(estimator="dr_grpo"),
        loss=LossConfig(norm_tokens=args.groups * args.group_size * args.tokens[0]),
    )
    learner = Learner(model, cfg)
    data = episodes(args.groups, args.group_size, args.tokens[0], model.config.vocab_size,
                    seed=0, shared=args.shared)  # fmt: skip
    seconds, metrics = [], {}
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        metrics = learner.step(data)
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds, "tokens": metrics["tokens"], "tokens_run": metrics["tokens_run"]}


def side_by_side(args) -> None:
    """``--model``: each arm's updates in a child process, the arms taking turns."""
    import json
    import statistics
    import subprocess

    arms = {"this": str(ROOT / "python")}
    if args.before_src:
        arms = {"before": args.before_src, **arms}
    passed = [a for a in sys.argv[1:] if a not in ("--before-src", args.before_src)]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({args.threads} threads), model: {args.model}, bf16 autocast, "
        f"{args.groups} groups x {args.group_size} episodes of {args.tokens[0]} tokens, "
        f"{args.shared} shared, micro_batch_size {args.micro_batch_size}; "
        f"{args.steps} updates per process after one left out\n"
    )
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for _ in range(args.rounds):
        for arm, src in arms.items():
            out = subprocess.run(
                [sys.executable, __file__, *passed, "--child", "--src", src],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            runs[arm].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"{arm}: {runs[arm][-1]}", file=sys.stderr, flush=True)
    print("| arm | s/update (each, warm-up left out) | median | tokens/s | tokens run / update |")
    print("|---|---|---:|---:|---:|")
    for arm, rs in runs.items():
        each = [s for r in rs for s in r["seconds"][1:]]
        med = statistics.median(each)
        print(
            f"| {arm} | {', '.join(f'{s:.1f}' for s in each)} | {med:.1f} | "
            f"{rs[0]['tokens'] / med:,.0f} | {rs[0]['tokens_run']:,} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--model", default=None, help="a checkpoint directory (module docstring)")
    ap.add_argument("--shared", type=int, default=0)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--before-src", default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--src", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model and args.child:
        import json

        print(json.dumps(real_model_updates(args)))
        return
    if args.model:
        side_by_side(args)
        return
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

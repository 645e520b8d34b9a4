"""Learner throughput: one process against 2 FSDP2 ranks (gloo, torchrun), same batches.

One update = GRPO advantages + one optimizer step with gradient accumulation over micro-batches
of 4 rows; tokens/s counts every real token of the batch once per update (as bench_learner.py).
Rows: one process with 1 thread (one core), one process with as many threads as ranks (the same
cores, intra-op parallelism), and N ranks of 1 thread each (data parallel, FSDP2-sharded).

    python bench/bench_learner_dist.py [--ranks 2] [--steps 3] [--layers 4] [--hidden 256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch  # noqa: E402

from agentgym.learner import Learner, LearnerConfig, OptimConfig  # noqa: E402
from agentgym.learner.distributed import from_environment  # noqa: E402
from bench_learner import episodes  # noqa: E402


def model(layers: int, hidden: int, vocab: int):
    """A random Qwen2 of the given size (tied embeddings)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    heads = max(2, hidden // 64)  # head size 64 where the width allows; 2 KV heads share them
    if hidden % heads or heads % 2:
        raise SystemExit(f"--hidden {hidden}: needs a width that {heads} heads divide evenly")
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
        max_position_embeddings=4096, tie_word_embeddings=True,
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg)


def measure(args: argparse.Namespace) -> dict:
    """Seconds per update and tokens/s of this process's learner (rank 0 reports)."""
    dist = from_environment("cpu", timeout_s=600)
    m = model(args.layers, args.hidden, args.vocab)
    params = sum(p.numel() for p in m.parameters())
    cfg = LearnerConfig(optim=OptimConfig(lr=1e-4), micro_batch_size=4, groups_per_step=4)
    learner = Learner(m, cfg, dist=dist)
    data = episodes(args.groups, args.group_size, args.tokens, args.vocab, 0)
    learner.step(data)  # warm-up
    start = time.perf_counter()
    total = sum(learner.step(data)["tokens"] for _ in range(args.steps))
    elapsed = (time.perf_counter() - start) / args.steps
    dist.close()
    return {"s_per_update": elapsed, "tokens_per_s": total / args.steps / elapsed,
            "params": params, "episodes": len(data)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:  # one rank under torchrun
        torch.set_num_threads(1)
        result = measure(args)
        if int(os.environ.get("RANK", "0")) == 0:
            print("RESULT " + json.dumps(result), flush=True)
        os._exit(0)  # see Dist.exit: no interpreter finalization with a live gloo group
    rows = []
    for threads in sorted({1, args.ranks}):
        torch.set_num_threads(threads)
        rows.append((f"1 process, {threads} thread(s)", measure(args)))
    argv = [*sys.argv[1:], "--worker"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.ranks}", __file__, *argv]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    rows.append((f"{args.ranks} FSDP2 ranks (gloo), 1 thread each", result))
    base = rows[0][1]["tokens_per_s"]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
        f"model: Qwen2 {args.layers}x{args.hidden}, vocab {args.vocab}, "
        f"{rows[0][1]['params'] / 1e6:.1f}M params; {rows[0][1]['episodes']} episodes "
        f"x {args.tokens} tokens per update, micro-batch 4\n"
    )
    print("| learner | s/update | tokens/s | vs 1 process, 1 thread |")
    print("|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['s_per_update']:.2f} | {r['tokens_per_s']:,.0f} | "
              f"{r['tokens_per_s'] / base:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()

"""Learner memory on CPU: resident set during and after updates of episodes of varying length.

Each case runs in its own process (peak RSS is per process): the real ``Learner`` with
``micro_batch_size`` episodes per backward pass, bf16 autocast, updates on GRPO groups whose
episodes are ``--tokens`` long times a cycle of fractions (RL batches differ in length), with and
without activation checkpointing. Printed per case: RSS after loading, the peak over the updates
(VmHWM), RSS after the last update (the learner gives freed heap pages back after each update,
``agentgym.transport.malloc.trim_heap``) and seconds per update.

    python bench/bench_learner_memory.py --model runs/models/smollm2-135m-instruct \\
        --tokens 1024 --updates 4
    python bench/bench_learner_memory.py --model tiny --tokens 128 --updates 1   # no download

``--model tiny`` uses the quickstart's random tiny Qwen2 (``bench_learner.tiny_qwen2``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

FRACTIONS = (1.0, 0.6, 0.85, 0.7, 1.0, 0.9, 0.75)


def status_mib() -> dict[str, int]:
    """VmRSS and VmHWM of this process in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) // 1024
    return out


def run_case(model_path: str, tokens: int, updates: int, checkpointing: bool, micro: int) -> dict:
    """One case in this process; returns its figures."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch

    from agentgym.learner import Learner, LearnerConfig, OptimConfig
    from agentgym.transport.malloc import tune_malloc
    from bench_learner import episodes, tiny_qwen2

    tune_malloc()  # as the learner command does
    torch.set_num_threads(1)
    if model_path == "tiny":
        model, spec = tiny_qwen2()
        vocab = spec.vocab_size
    else:
        from agentgym.models import load_model

        model, _ = load_model(model_path)
        vocab = model.config.vocab_size
    loaded = status_mib()["VmRSS"]
    cfg = LearnerConfig(
        optim=OptimConfig(lr=1e-6),
        micro_batch_size=micro,
        bf16=True,
        activation_checkpointing=checkpointing,
    )
    learner = Learner(model, cfg)
    times = []
    for i in range(updates):
        length = max(128, int(tokens * FRACTIONS[i % len(FRACTIONS)]))
        data = episodes(1, 2 * micro, length, vocab, seed=i)
        start = time.perf_counter()
        learner._execute("step", data)  # the learner's own path: the update, then the trim
        times.append(time.perf_counter() - start)
        print(f"  update {i + 1}/{updates}: {length} tokens/episode, {times[-1]:.1f} s, "
              f"RSS {status_mib()['VmRSS']} MiB", file=sys.stderr, flush=True)  # fmt: skip
    end = status_mib()
    return {"loaded": loaded, "peak": end["VmHWM"], "after": end["VmRSS"],
            "s_per_update": sum(times) / len(times)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory, or 'tiny'")
    ap.add_argument("--tokens", type=int, default=1024, help="longest episode, tokens")
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--case", choices=("plain", "checkpointing"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:  # the child process of one case
        out = run_case(args.model, args.tokens, args.updates, args.case == "checkpointing",
                       args.micro_batch)  # fmt: skip
        print(json.dumps(out))
        return
    print(f"model {args.model}, episodes up to {args.tokens} tokens, micro-batch "
          f"{args.micro_batch}, {args.updates} updates, bf16, one thread\n")  # fmt: skip
    print("| activation checkpointing | RSS loaded MiB | peak MiB | after the last update MiB "
          "| s/update |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for case in ("plain", "checkpointing"):
        cmd = [sys.executable, __file__, "--model", args.model, "--tokens", str(args.tokens),
               "--updates", str(args.updates), "--micro-batch", str(args.micro_batch),
               "--case", case]  # fmt: skip
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        if proc.returncode != 0:
            raise SystemExit(f"case {case} failed (exit {proc.returncode})")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"| {'on' if case == 'checkpointing' else 'off'} | {r['loaded']:,} | {r['peak']:,} "
              f"| {r['after']:,} | {r['s_per_update']:.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

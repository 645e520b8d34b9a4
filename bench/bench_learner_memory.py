"""Learner memory on CPU: resident set during and after updates of episodes of varying length.

Each case runs in its own process (peak RSS is per process): the real ``Learner`` with
``micro_batch_size`` episodes per backward pass, bf16 autocast, updates on GRPO groups whose
episodes are ``--tokens`` long times a cycle of fractions (RL batches differ in length), with and
without activation checkpointing. Printed per case: RSS after loading, the peak over the updates
(VmHWM), the least and most RSS after an update (flat when freed memory goes back), RSS after
the last update (the learner gives freed heap pages back after each update,
``agentgym.transport.malloc.trim_heap``) and seconds per update.

    python bench/bench_learner_memory.py --model runs/models/smollm2-135m-instruct \\
        --tokens 1024 --updates 20 --actor
    python bench/bench_learner_memory.py --model tiny --tokens 128 --updates 1   # no download

``--actor`` adds the actor's side: the transformers engine generating batches of cycling prompt
lengths and loading weights after each, with its heap trims and without them.
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


def _load(model_path: str):
    from agentgym.models import load_model
    from bench_learner import tiny_qwen2

    if model_path == "tiny":
        model, spec = tiny_qwen2()
        return model, spec.vocab_size
    model, _ = load_model(model_path)
    return model, model.config.vocab_size


def run_case(model_path: str, tokens: int, updates: int, checkpointing: bool, micro: int,
             micro_tokens: int) -> dict:  # fmt: skip
    """One learner case in this process; returns its figures."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch

    from agentgym.learner import Learner, LearnerConfig, OptimConfig
    from agentgym.transport.malloc import tune_malloc
    from bench_learner import episodes

    tune_malloc()  # as the learner command does
    torch.set_num_threads(1)
    model, vocab = _load(model_path)
    loaded = status_mib()["VmRSS"]
    cfg = LearnerConfig(
        optim=OptimConfig(lr=1e-6),
        micro_batch_size=micro,
        micro_batch_tokens=micro_tokens,
        bf16=True,
        activation_checkpointing=checkpointing,
    )
    learner = Learner(model, cfg)
    times, after = [], []
    for i in range(updates):
        length = max(128, int(tokens * FRACTIONS[i % len(FRACTIONS)]))
        data = episodes(1, 2 * micro, length, vocab, seed=i)
        start = time.perf_counter()
        learner._step_and_trim(data)  # the learner's own path: the update, then the trim
        times.append(time.perf_counter() - start)
        after.append(status_mib()["VmRSS"])
        print(f"  update {i + 1}/{updates}: {length} tokens/episode, {times[-1]:.1f} s, "
              f"RSS {after[-1]} MiB", file=sys.stderr, flush=True)  # fmt: skip
    end = status_mib()
    return {"loaded": loaded, "peak": end["VmHWM"], "after": end["VmRSS"],
            "after_min": min(after), "after_max": max(after),
            "s_per_update": sum(times) / len(times)}  # fmt: skip


def run_actor_case(model_path: str, tokens: int, updates: int, trim: bool) -> dict:
    """The transformers engine as an actor runs it: a batch of 16 prompts of a cycling length
    generating 32 tokens, then a weight load, ``updates`` times; RSS after each. ``trim``
    False: the engine's heap trims are switched off (the comparison)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import asyncio

    import numpy as np
    import torch

    import agentgym.engines.hf as hf
    from agentgym.engines import SamplingParams
    from agentgym.transport.malloc import tune_malloc

    tune_malloc()  # as the actor command does
    torch.set_num_threads(1)
    if not trim:
        hf.trim_heap = lambda: False
    model, vocab = _load(model_path)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    engine = hf.HFEngine(model, stop_token_ids=[], pad_token_id=0, max_batch_size=16,
                         bf16=True, owns_model=True)  # fmt: skip
    loaded = status_mib()["VmRSS"]
    rng = np.random.default_rng(0)
    params = SamplingParams(max_new_tokens=32, temperature=1.0)
    times, after = [], []

    async def one(i: int) -> None:
        length = max(64, int(tokens * FRACTIONS[i % len(FRACTIONS)]))
        prompts = [rng.integers(1, vocab, length).tolist() for _ in range(16)]
        await engine.generate(prompts, params)
        await engine.load_weights(state, version=i + 1)

    async def main() -> None:
        for i in range(updates):
            start = time.perf_counter()
            await one(i)
            times.append(time.perf_counter() - start)
            after.append(status_mib()["VmRSS"])
            print(f"  batch + load {i + 1}/{updates}: {times[-1]:.1f} s, RSS {after[-1]} MiB",
                  file=sys.stderr, flush=True)  # fmt: skip
        await engine.close()

    asyncio.run(main())
    end = status_mib()
    return {"loaded": loaded, "peak": end["VmHWM"], "after": end["VmRSS"],
            "after_min": min(after), "after_max": max(after),
            "s_per_update": sum(times) / len(times)}  # fmt: skip


def _child(args: argparse.Namespace, case: str) -> dict:
    cmd = [sys.executable, __file__, "--model", args.model, "--tokens", str(args.tokens),
           "--updates", str(args.updates), "--micro-batch", str(args.micro_batch),
           "--micro-batch-tokens", str(args.micro_batch_tokens), "--case", case]  # fmt: skip
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"case {case} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = ("plain", "checkpointing", "actor", "actor-notrim")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory, or 'tiny'")
    ap.add_argument("--tokens", type=int, default=1024, help="longest episode, tokens")
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=0,
        help="learner.micro_batch_tokens (0: micro-batch x the longest row)",
    )
    ap.add_argument("--actor", action="store_true",
                    help="also the transformers engine's batches and weight loads, with and "
                         "without its heap trims")  # fmt: skip
    ap.add_argument("--cases", default=None,
                    help=f"comma-separated, of {', '.join(CASES)} (default: the learner's two, "
                         "and the engine's with --actor)")  # fmt: skip
    ap.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:  # the child process of one case
        if args.case.startswith("actor"):
            out = run_actor_case(args.model, args.tokens, args.updates, args.case == "actor")
        else:
            out = run_case(args.model, args.tokens, args.updates, args.case == "checkpointing",
                           args.micro_batch, args.micro_batch_tokens)  # fmt: skip
        print(json.dumps(out))
        return
    print(f"model {args.model}, episodes up to {args.tokens} tokens, micro-batch "
          f"{args.micro_batch} rows, micro_batch_tokens {args.micro_batch_tokens}, "
          f"{args.updates} updates, bf16, one thread\n")  # fmt: skip
    print("| case | RSS loaded MiB | peak MiB | after each update, min-max MiB "
          "| after the last MiB | s/update |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    names = {
        "plain": "learner",
        "checkpointing": "learner, activation checkpointing",
        "actor": "engine (actor), trims",
        "actor-notrim": "engine (actor), no trims",
    }
    cases = args.cases.split(",") if args.cases else CASES if args.actor else CASES[:2]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"bench_learner_memory: unknown cases {unknown} (of {', '.join(CASES)})")
    for case in cases:
        r = _child(args, case)
        print(f"| {names[case]} | {r['loaded']:,} | {r['peak']:,} | {r['after_min']:,}-"
              f"{r['after_max']:,} | {r['after']:,} | {r['s_per_update']:.1f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

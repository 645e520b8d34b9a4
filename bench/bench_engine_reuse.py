"""The transformers engine with and without prefix reuse on multi-turn episodes of a real model.

One batch of BabyAI episodes (``--groups`` tasks x ``--group-size`` episodes, AgentGym's
"Thought: ... Action: ..." format with the worked example, up to ``--turns`` turns each) runs
through the actor's episode loop (``agentgym.actor.episodes.run_group``) twice in this process,
with the same seeds: once with ``prefix_cache_mb`` 0 (every prompt prefilled whole) and once
with the prefix store (each prompt prefilled from its episode's previous turn; a group's shared
opening prefilled once).
Printed per case: wall time, turns, generated tokens and tokens/s, prompt tokens prefilled and
taken from the store, and whether both cases sampled the same tokens.

    python bench/bench_engine_reuse.py --model runs/models/smollm2-135m-instruct \\
        [--groups 2] [--group-size 4] [--turns 8] [--threads 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import statistics
import time

import torch

from agentgym.actor.config import EpisodeRules
from agentgym.actor.episodes import EpisodeSpec, run_group
from agentgym.agent.turns import ChatCodec
from agentgym.engines import SamplingParams
from agentgym.engines.hf import HFEngine
from agentgym.envs import EnvPool


def run_batch(engine: HFEngine, codec: ChatCodec, args: argparse.Namespace) -> dict:
    """Every group of the batch at once (their turns share engine batches), as an actor runs
    its groups in flight."""
    pool = EnvPool("babyai")
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    ids = itertools.count()
    specs = [
        EpisodeSpec(
            "babyai",
            task_id=200000 + 40 * g + g % 2,
            group_id=g,
            group_size=args.group_size,
            horizon_cap=args.turns,
            seed=1000 + g,
            rules=EpisodeRules(max_context_tokens=args.max_context, worked_example=True),
        )
        for g in range(args.groups)
    ]

    async def go():
        return await asyncio.gather(
            *(run_group(s, engine, pool, codec, params, ids) for s in specs)
        )

    start = time.perf_counter()
    results = asyncio.run(go())
    wall = time.perf_counter() - start
    trajectories = [t for r in results for t in r.trajectories]
    generated = sum(r.generated_tokens for r in results)
    return {
        "wall_s": wall,
        "turns": sum(t.num_turns for t in trajectories),
        "generated": generated,
        "tokens": [t.tokens.tolist() for t in trajectories],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a Hugging Face model directory")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-context", type=int, default=4096)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--cache-mb", type=float, default=2048)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = HFEngine.from_pretrained(args.model, max_batch_size=64)
    codec = ChatCodec(engine.tokenizer)
    params = sum(p.numel() for p in engine.model.parameters())
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"torch {torch.__version__} ({args.threads} threads); model {args.model} "
        f"({params / 1e6:.1f}M params); {args.groups} groups x {args.group_size} episodes, up to "
        f"{args.turns} turns, {args.max_new_tokens} new tokens, T={args.temperature}\n"
    )
    print("| prefix reuse | wall s | turns | generated tokens | tokens/s | prefilled | reused |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for case in ("off", "on"):
            engine.store = None if case == "off" else new_store(args.cache_mb)
            r = run_batch(engine, codec, args)
            store = engine.store
            r["prefilled"] = store.prefilled_tokens if store else None
            r["reused"] = store.reused_tokens if store else 0
            runs[case].append(r)
            print(f"| {case} | {r['wall_s']:.1f} | {r['turns']} | {r['generated']} | "
                  f"{r['generated'] / r['wall_s']:.1f} | {r['prefilled'] or '(all)'} | "
                  f"{r['reused']} |", flush=True)  # fmt: skip
    same = all(a["tokens"] == b["tokens"] for a, b in zip(runs["off"], runs["on"], strict=True))
    off = statistics.median(r["wall_s"] for r in runs["off"])
    on = statistics.median(r["wall_s"] for r in runs["on"])
    print(f"\nmedian wall time: off {off:.1f} s, on {on:.1f} s ({off / on:.2f}x); "
          f"same sampled tokens in both cases: {same}")  # fmt: skip


def new_store(mb: float):
    from agentgym.engines.prefix_cache import PrefixStore

    return PrefixStore(int(mb * 2**20))


if __name__ == "__main__":
    main()

"""End-to-end throughput of the quickstart: async (default) against --sync, same config, same run.

    python bench/bench_e2e.py [--config configs/quickstart.yaml] [--steps N] [--set k=v ...]
                              [--inline]

Runs ``agentgym train`` twice into fresh run dirs (async first, then --sync; with ``--inline``
a third time, async with ``--inline``: the learner and actors as threads of one process) for
``--steps`` learner updates each (default: the config's ``learner.max_steps``), and
reports samples/s (trajectories trained per second of the actors' wall time, from an actor's
start to the learner's stop; process start-up is left out), tokens/s (their tokens), and the
share of that wall time spent in envs, generation, training and transport:

- envs / generation: wall time during which at least one env step / engine call was running in
  an actor (overlaps counted once; summed over actors);
- training: the learner's update time (``step_time_s`` summed);
- transport: actors' time pushing trajectories and fetching weights.

The shares of one run can add up to more than 100%: in async mode the parts overlap (that is
the point). Prints a Markdown table and writes it with the raw figures as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


MODES = {"async": [], "sync": ["--sync"], "async inline": ["--inline"]}
"""Each mode's ``agentgym train`` flags."""


def run_mode(config: str, mode: str, steps: int | None, overrides: list[str], base: Path) -> dict:
    run_dir = base / mode.replace(" ", "-")
    sets = [
        *overrides,
        f"run_dir={run_dir}",
        *([f"learner.max_steps={steps}"] if steps is not None else []),
        "learner.checkpoint_every=0",
    ]
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", config, "--quiet"]
    cmd += [a for s in sets for a in ("--set", s)] + MODES[mode]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - start
    return figures(run_dir, wall)


def figures(run_dir: Path, launcher_wall: float) -> dict:
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    actors = summary["actors"]
    train_s = sum(m["step_time_s"] for m in metrics)
    tokens = sum(m["tokens"] for m in metrics)
    # trajectories the learner trained on (each batch's staleness histogram counts them all)
    trajectories = sum(v for m in metrics for k, v in m.items() if k.startswith("staleness/"))
    wall = actors.get("wall_s", launcher_wall)
    return {
        "steps": len(metrics),
        "wall_s": wall,
        "launcher_wall_s": launcher_wall,
        "trajectories": trajectories,
        "pushed": actors.get("trajectories_pushed", 0),
        "samples_per_s": trajectories / wall,
        "tokens_per_s": tokens / wall,
        "share_env": actors.get("env_busy_s", 0) / wall,
        "share_generate": actors.get("generate_busy_s", 0) / wall,
        "share_train": train_s / wall,
        "share_transport": (actors.get("push_s", 0) + actors.get("weights_s", 0)) / wall,
        "final_success": metrics[-1].get("success/all"),
        "mean_staleness": _mean_lag(metrics),
    }


def _mean_lag(metrics: list[dict]) -> float:
    total = count = 0
    for m in metrics:
        for k, v in m.items():
            if k.startswith("staleness/"):
                total += int(k.split("/")[1]) * v
                count += v
    return total / max(count, 1)


def table(results: dict[str, dict]) -> str:
    head = (
        "| mode | steps | wall s | samples/s | tokens/s | envs | generation | training | "
        "transport | mean staleness |"
    )
    lines = [head, "|" + "---|" * 10]
    for mode, r in results.items():
        lines.append(
            f"| {mode} | {r['steps']} | {r['wall_s']:.0f} | {r['samples_per_s']:.2f} | "
            f"{r['tokens_per_s']:.0f} | {r['share_env']:.0%} | {r['share_generate']:.0%} | "
            f"{r['share_train']:.0%} | {r['share_transport']:.0%} | {r['mean_staleness']:.2f} |"
        )
    pairs = (("async / sync", "async", "sync"), ("inline / processes", "async inline", "async"))
    for name, top, bottom in pairs:
        t, b = results.get(top), results.get(bottom)
        if t and b:
            lines.append(
                f"\n{name}: samples/s {t['samples_per_s'] / b['samples_per_s']:.3f}x, "
                f"tokens/s {t['tokens_per_s'] / b['tokens_per_s']:.3f}x"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument(
        "--steps", type=int, default=None, help="learner updates per mode (default: the config's)"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", default=None, help="JSON file for the raw figures")
    parser.add_argument(
        "--inline", action="store_true", help="also run async with --inline (one process)"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="agentgym-bench-e2e-"))
    results = {}
    for mode in ["async", "sync", *["async inline"] * args.inline]:
        results[mode] = run_mode(args.config, mode, args.steps, args.overrides, base)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cpus; config {args.config}, "
        f"{results['async']['steps']} steps per mode; run dirs in {base}"
    )
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

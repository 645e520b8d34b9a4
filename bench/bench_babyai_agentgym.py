"""BabyAI-text steps/s: agentgym's ``EnvPool`` against AgentGym's own BabyAI env code.

    python3 -m venv /tmp/agentgym-ref
    /tmp/agentgym-ref/bin/pip install minigrid==2.3.1 gymnasium==0.29.1 "numpy<2" gym matplotlib
    git clone https://github.com/WooooDyy/AgentGym /tmp/AgentGym
    python bench/bench_babyai_agentgym.py /tmp/AgentGym --ref-python /tmp/agentgym-ref/bin/python \\
        --sessions 1 64 1024 4096 --seconds 2 --repeats 3

AgentGym's side is ``agentenv-babyai/agentenv_babyai/environment.py``'s ``BabyAIEnv`` (the object
its FastAPI server wraps), imported from the checkout (nothing of it is copied here) in a child
process on the reference venv (the versions AgentGym pins), driven as the server's ``/reset`` and
``/step`` drive it. The child keeps its N sessions between timed rounds, so the two sides take
turns without building AgentGym's sessions again.

Both sides: N sessions on task ids 0, 1, 2, ... (AgentGym's ``data_idx``: level ``id % 40``, seed
``id // 40``), each step one action drawn uniformly from the session's menu (AgentGym's
``_get_action_space()``; agentgym's ``EnvPool.sample_actions``), observations as Python ``str``;
a finished session is reset onto the next task id inside the timed loop. AgentGym's sessions are
stepped one after another (its server answers one ``/step`` per request); agentgym's all in one
``EnvPool.step`` per round.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

LEVELS = 40


def serve_agentgym(checkout: Path, sessions: int, seed: int) -> None:
    """The child: builds ``sessions`` AgentGym sessions, then answers each ``SECONDS`` line on
    stdin with one timed round as a JSON line ``{"steps", "seconds"}``."""
    path = checkout / "agentenv-babyai" / "agentenv_babyai" / "environment.py"
    spec = importlib.util.spec_from_file_location("agentgym_babyai_environment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.BabyAIEnv()
    rng = random.Random(seed)
    next_task = 0

    def reset(sid: int) -> None:
        nonlocal next_task
        out = server.reset(sid, next_task)
        next_task += 1
        if "error" in out:
            raise RuntimeError(f"AgentGym reset of task {next_task - 1}: {out['error']}")

    sids = [server.create()["id"] for _ in range(sessions)]
    with contextlib.redirect_stdout(io.StringIO()):  # minigrid and the server print
        for sid in sids:
            reset(sid)
    print(json.dumps({"ready": sessions}), flush=True)
    cursor = 0
    for line in sys.stdin:
        seconds = float(line)
        steps = 0
        sink = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(sink):
            while steps < 64 or time.perf_counter() - start < seconds:
                for _ in range(min(sessions, 64)):  # rounds of up to 64 steps, then the clock
                    sid = sids[cursor]
                    env = server.env[sid]
                    out = server.step(sid, rng.choice(env._get_action_space()))
                    if "error" in out:
                        raise RuntimeError(f"AgentGym step: {out['error']}")
                    assert isinstance(out["observation"], str)
                    if out["done"]:
                        reset(sid)
                    steps += 1
                    cursor = (cursor + 1) % sessions
                sink.seek(0)
                sink.truncate()
        elapsed = time.perf_counter() - start
        print(json.dumps({"steps": steps, "seconds": elapsed}), flush=True)
    # Without the interpreter's teardown: BabyAIEnv.__del__ closes and prints every session
    # (over a minute at 4,096), none of which is measured.
    os._exit(0)


class AgentGymSide:
    """The child process on the reference venv, kept for the timed rounds of one N."""

    def __init__(self, ref_python: str, checkout: Path, sessions: int, seed: int) -> None:
        cmd = [ref_python, __file__, str(checkout), "--serve-agentgym", "--sessions", str(sessions),
               "--seed", str(seed)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._read()  # {"ready": N}

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the AgentGym side exited (code {self.proc.wait()})")
        return json.loads(line)

    def rate(self, seconds: float) -> float:
        self.proc.stdin.write(f"{seconds}\n")
        self.proc.stdin.flush()
        out = self._read()
        return out["steps"] / out["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def agentgym_pool_rate(sessions: int, seconds: float, seed: int) -> float:
    """agentgym's side, as ``bench_babyai.py``'s native-draw rows."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_babyai import bench_rust

    return bench_rust(sessions, seconds, random.Random(seed), native=True).per_second


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path, help="a checkout of WooooDyy/AgentGym")
    ap.add_argument("--ref-python", default=sys.executable,
                    help="python of a venv with AgentGym's pins (minigrid 2.3.1, gymnasium "
                    "0.29.1, numpy<2)")  # fmt: skip
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 64, 1024, 4096])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve-agentgym", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_agentgym:
        serve_agentgym(args.checkout, args.sessions[0], args.seed)
        return
    print("| sessions | AgentGym BabyAIEnv steps/s | agentgym EnvPool steps/s | ratio |")
    print("|---:|---:|---:|---:|")
    for n in args.sessions:
        print(f"building {n} AgentGym sessions ...", file=sys.stderr, flush=True)
        theirs_side = AgentGymSide(args.ref_python, args.checkout, n, args.seed)
        theirs, ours = [], []
        try:
            for r in range(args.repeats):  # the two sides take turns
                theirs.append(theirs_side.rate(args.seconds))
                ours.append(agentgym_pool_rate(n, args.seconds, args.seed + r))
                print(f"  {n} sessions, round {r + 1}: {theirs[-1]:,.0f} vs {ours[-1]:,.0f}",
                      file=sys.stderr, flush=True)  # fmt: skip
        finally:
            theirs_side.close()
        t, o = statistics.median(theirs), statistics.median(ours)
        ratios = sorted(b / a for a, b in zip(theirs, ours, strict=True))
        span = f"{ratios[0]:,.0f}-{ratios[-1]:,.0f}x (medians {o / t:,.0f}x)"
        print(f"| {n} | {min(theirs):,.0f}-{max(theirs):,.0f} | {min(ours):,.0f}-{max(ours):,.0f} "
              f"| {span} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

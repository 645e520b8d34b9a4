"""webnav throughput and memory: in-process EnvPool steps/s and RSS per open session at 1, 64,
1024 and 4096 sessions, and env steps/s over HTTP ``/batch/step`` of ``agentgym-envserver``.

In-process, two drivers, each step a full WebArena-style observation materialised as a Python
``str``, finished sessions reset to the next task id (reset time counted):

- ``expert``: every session takes its planner's next action (``EnvPool.expert``); episodes end
  at ``stop`` after 2-15 actions. Steps/s is given for the env calls alone (step + reset) and
  with the expert's call included.
- ``random``: a random valid action per session (``EnvPool.sample_actions``: a click on a link
  or button in view, a scroll, go_back), horizon cap 15 as in WebArena's last ScalingInter-RL
  round; the draw is included.

RSS per open session is (RSS with the sessions open and stepped - RSS before creating them) / n.
CPU us per step is the process's CPU time (every thread) over the timed rounds, per step: on a
machine shared with other jobs it moves less than the wall-clock rates.

Over HTTP: one ``agentgym-envserver --env webnav`` subprocess, sessions stepped with one
``/batch/step`` per round through ``EnvPool.remote``, each session clicking header links
(always valid on these sites) in turn.

    python bench/bench_webnav.py                   # 1, 64, 1024, 4096 sessions, 3 s per cell
    python bench/bench_webnav.py --sessions 1024 --seconds 5 --no-http

Build the extension with ``--release`` (pip install -e . does): debug builds are much slower.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentgym.envs import EnvPool


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@dataclass
class Cell:
    sessions: int
    env_steps_per_s: float
    all_steps_per_s: float
    rss_per_session: float
    cpu_us_per_step: float


class Tasks:
    """Hands out task ids 0, 1, 2, ...: every template in turn, then the next seed."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, n: int) -> list[int]:
        ids = list(range(self.next, self.next + n))
        self.next += n
        return ids


def measure(sessions: int, seconds: float, driver: str, threads: int | None) -> Cell:
    """One cell: a fresh pool of ``sessions`` sessions driven by ``driver`` for ``seconds``."""
    before = rss_bytes()
    pool = EnvPool("webnav", threads=threads)
    if driver == "random":
        pool.set_horizon(15)
    tasks = Tasks()
    ids = pool.create(sessions)
    pool.reset(ids, tasks.take(sessions))
    seed = 0

    def choose() -> list[str]:
        nonlocal seed
        if driver == "expert":
            return [m[0] if m else "scroll [down]" for m in pool.expert(ids).moves]
        seed += 1
        return [a or "scroll [down]" for a in pool.sample_actions(ids, seed)]

    def round_(timers: list[float]) -> int:
        t0 = time.perf_counter()
        actions = choose()
        t1 = time.perf_counter()
        batch = pool.step(ids, actions)
        finished = [i for i, end in zip(ids, batch.dones | batch.truncated, strict=True) if end]
        if finished:
            pool.reset(finished, tasks.take(len(finished)))
        t2 = time.perf_counter()
        timers[0] += t1 - t0
        timers[1] += t2 - t1
        return len(ids)

    round_([0.0, 0.0])  # warm-up
    timers = [0.0, 0.0]
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds or steps == 0:
        steps += round_(timers)
    cpu_us = (time.process_time() - cpu) / steps * 1e6
    rss = rss_bytes() - before
    cell = Cell(
        sessions, steps / timers[1], steps / (timers[0] + timers[1]), rss / sessions, cpu_us
    )
    pool.close(ids)
    return cell


def http_steps(sessions: int, seconds: float) -> float | None:
    """Env steps/s through /batch/step of one envserver subprocess (None if it did not start)."""
    args = [sys.executable, "-m", "agentgym.cli.envserver", "--env", "webnav", "--port", "0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in proc.stdout:
            if "http://" in line:
                url = "http://" + line.strip().rsplit("http://", 1)[1]
                break
        if url is None:
            return None
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        pool = EnvPool.remote(url, "webnav")
        ids = pool.create(sessions)
        pool.reset(ids, list(range(sessions)))
        clicks = ["click [2]", "click [3]", "click [4]", "click [5]"]
        done, k, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            batch = pool.step(ids, [clicks[k % 4]] * len(ids))
            assert batch.ok, [e for e in batch.errors if e][:3]
            done, k = done + len(ids), k + 1
        rate = done / (time.perf_counter() - start)
        pool.close(ids)
        return rate
    finally:
        proc.kill()
        proc.wait()


def table(title: str, cells: list[Cell], label: str) -> None:
    print(f"\n## {title}\n")
    print(
        f"| sessions | env steps/s | steps/s with {label} | CPU us per step (all threads) "
        "| RSS KiB per open session |"
    )
    print("|---|---|---|---|---|")
    for c in cells:
        print(
            f"| {c.sessions:,} | {c.env_steps_per_s:,.0f} | {c.all_steps_per_s:,.0f} | "
            f"{c.cpu_us_per_step:.1f} | {c.rss_per_session / 1024:.1f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 64, 1024, 4096])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument(
        "--threads", type=int, default=None, help="pool threads (default: one per core)"
    )
    ap.add_argument("--http-sessions", type=int, default=1024)
    ap.add_argument("--no-http", action="store_true")
    args = ap.parse_args()
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {args.seconds:g} s per cell"
    )
    drivers: dict[str, Callable[[int], Cell]] = {
        "expert": lambda n: measure(n, args.seconds, "expert", args.threads),
        "random": lambda n: measure(n, args.seconds, "random", args.threads),
    }
    for name, run in drivers.items():
        label = "the expert's call" if name == "expert" else "the native draw"
        table(f"In-process, {name} actions", [run(n) for n in args.sessions], label)
    if not args.no_http:
        rate = http_steps(args.http_sessions, args.seconds)
        print(f"\n## HTTP /batch/step, {args.http_sessions:,} sessions, one client\n")
        print("envserver did not start" if rate is None else f"{rate:,.0f} env steps/s")


if __name__ == "__main__":
    main()

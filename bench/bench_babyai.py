"""BabyAI-text throughput: the Rust EnvPool against the Python reference on minigrid.

Both sides play the same workload: N sessions over AgentGym task ids (levels round-robin), each
step a random *valid* high-level action per session (drawn from the session's available
actions), observations materialized as Python ``str``, finished sessions reset to the next task
(reset time counted). Figures are high-level steps per second. The Rust side is measured twice:
drawing the action natively (``EnvPool.sample_actions``), and copying every menu into Python
lists to draw with ``random.choice`` as the reference does.

    python bench/bench_babyai.py                 # 1, 64, 1024, 4096 sessions
    python bench/bench_babyai.py --sessions 1 64 --seconds 2 --repeats 3

Each cell is the median of ``--repeats`` measurements, the three sides taking turns, so a
passing disturbance of the machine moves one measurement rather than one side's figure.

Build the extension with ``maturin develop --release`` first: debug builds are ~10x slower.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentgym.envs import EnvPool
from agentgym.envs.reference.babyai_text import LEVELS, BabyAIText


@dataclass
class Rate:
    steps: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.steps / self.seconds


class TaskCounter:
    """Hands out task ids 0, 1, 2, ...: every level in turn, then the next seed."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, n: int) -> list[int]:
        ids = list(range(self.next, self.next + n))
        self.next += n
        return ids


def timed(run_round: Callable[[], int], seconds: float, min_rounds: int) -> Rate:
    """Calls `run_round` (which returns the steps it took) until `seconds` have passed and at
    least `min_rounds` rounds ran."""
    steps, rounds = 0, 0
    start = time.perf_counter()
    while rounds < min_rounds or time.perf_counter() - start < seconds:
        steps += run_round()
        rounds += 1
    return Rate(steps, time.perf_counter() - start)


def bench_rust(sessions: int, seconds: float, rng: random.Random, native: bool) -> Rate:
    """``native``: actions drawn by ``EnvPool.sample_actions`` (one ``str`` per session crosses
    into Python); otherwise every session's whole menu is copied into Python lists and drawn
    from with ``random.choice``, as the reference side does."""
    pool = EnvPool("babyai")
    tasks = TaskCounter()
    ids = pool.create(sessions)
    pool.reset(ids, tasks.take(sessions))

    def run_round() -> int:
        if native:
            actions = pool.sample_actions(ids, seed=rng.getrandbits(63))
        else:
            actions = [rng.choice(menu) for menu in pool.available_actions(ids)]
        batch = pool.step(ids, actions)
        observations: list[str] = batch.observations  # already Python str
        assert len(observations) == sessions and batch.ok, batch.errors
        finished = [i for i, done in zip(ids, batch.dones, strict=True) if done]
        if finished:
            pool.reset(finished, tasks.take(len(finished)))
        return sessions

    timed(run_round, 0.0, 2)  # warm-up
    rate = timed(run_round, seconds, 3)
    pool.close(ids)
    return rate


def bench_python(sessions: int, seconds: float, rng: random.Random) -> Rate:
    tasks = TaskCounter()
    envs: dict[str, list[BabyAIText]] = {}  # idle gymnasium envs per level, reused on reset

    def start(task_id: int) -> BabyAIText:
        level = LEVELS[task_id % len(LEVELS)]
        spare = envs.setdefault(level, [])
        session = spare.pop() if spare else BabyAIText.for_level(level)
        session.reset(task_id // len(LEVELS))
        return session

    live = [start(t) for t in tasks.take(sessions)]
    cursor = 0

    def run_round() -> int:
        # One step of up to 64 sessions in turn, so that a round stays short at any N.
        nonlocal cursor
        n = min(sessions, 64)
        for _ in range(n):
            session = live[cursor]
            observation, _, done = session.step(rng.choice(session.available_actions()))
            assert isinstance(observation, str)
            if done:
                envs[session.env.spec.id].append(session)
                live[cursor] = start(tasks.take(1)[0])
            cursor = (cursor + 1) % sessions
        return n

    timed(run_round, 0.0, 1)  # warm-up
    return timed(run_round, seconds, 2)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 64, 1024, 4096])
    parser.add_argument("--seconds", type=float, default=5.0, help="timing budget per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="measurements per cell (median)")
    parser.add_argument("--reset-sessions", type=int, default=1024, help="sessions per reset")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    print(
        f"Machine: {machine()}, load average {os.getloadavg()[0]:.2f} at start; "
        f"median of {args.repeats} per cell\n"
    )
    print(
        "| sessions | Python reference steps/s | Rust EnvPool, native draw | ratio "
        "| Rust EnvPool, menus as Python lists | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n in args.sessions:
        native, menus, py = median_rates(n, args.seconds, args.seed, args.repeats)
        print(
            f"| {n} | {py:,.0f} | {native:,.0f} | {native / py:,.0f}x "
            f"| {menus:,.0f} | {menus / py:,.0f}x |",
            flush=True,
        )
    # Resets are where the two world generators differ (AgentGym's: minigrid's draws on numpy's
    # generator; own: agentgym's earlier PRNG); steps run the same code after them.
    print(f"\n| worlds | resets/s ({args.reset_sessions} sessions, median of {args.repeats}) |")
    print("|---|---:|")
    rates: dict[str, list[float]] = {"agentgym": [], "own": []}
    for _ in range(args.repeats):
        for worlds, found in rates.items():
            found.append(bench_resets(worlds, args.reset_sessions, args.seconds).per_second)
    for worlds, found in rates.items():
        print(f"| {worlds} | {statistics.median(found):,.0f} |", flush=True)


def bench_resets(worlds: str, sessions: int, seconds: float) -> Rate:
    """Resets/s of ``sessions`` sessions onto task ids 0, 1, 2, ... (every level in turn),
    cycling over the first 10,240 ids (256 seeds per level), one batched ``reset`` per round,
    on the given world generator."""
    pool = EnvPool("babyai", worlds=worlds)
    tasks = TaskCounter()
    ids = pool.create(sessions)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        pool.reset(ids, [t % 10_240 for t in tasks.take(sessions)])
        done += sessions
    return Rate(done, time.perf_counter() - start)


def median_rates(n: int, seconds: float, seed: int, repeats: int) -> tuple[float, float, float]:
    """Median steps/s of the native-draw, menus-as-lists and reference sides, taking turns."""
    native, menus, py = [], [], []
    for _ in range(repeats):
        native.append(bench_rust(n, seconds, random.Random(seed), native=True).per_second)
        menus.append(bench_rust(n, seconds, random.Random(seed), native=False).per_second)
        # minigrid prints every rejected level sample to stdout; keep the table readable.
        with contextlib.redirect_stdout(io.StringIO()):
            py.append(bench_python(n, seconds, random.Random(seed)).per_second)
    return statistics.median(native), statistics.median(menus), statistics.median(py)


if __name__ == "__main__":
    main()

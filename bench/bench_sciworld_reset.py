"""ScienceWorld reset latency: ``agentgym-sciworld-server`` as AgentGym runs it (one simulator per
session, reloaded at each reset) against ``--fresh-simulator`` (a new simulator per reset, which
makes the same ``data_idx`` give the same text), side by side in one run.

    pip install '.[sciworld]' && python bench/bench_sciworld_reset.py --resets 10

Each side: one server, one session, ``--resets`` resets of the same task through
``EnvPool.remote`` after one warm-up reset; prints the median and the spread of the wall time
per reset, and whether all reset texts were equal.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

from agentgym.envs import EnvPool


def start_server(*flags: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "agentgym.envs.sciworld_server", "--port", "0", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, line.strip().rsplit(" ", 1)[-1]


def measure(url: str, task: int, resets: int) -> tuple[list[float], int]:
    pool = EnvPool.remote(url, "sciworld", timeout=120.0)
    ids = pool.create(1)
    pool.reset(ids, [task])  # warm-up: the JVM's first load
    times, texts = [], set()
    for _ in range(resets):
        start = time.perf_counter()
        texts.add(pool.reset(ids, [task])[0])
        times.append(time.perf_counter() - start)
    pool.close(ids)
    return times, len(texts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--resets", type=int, default=10)
    p.add_argument("--task", type=int, default=1, help="data_idx (1: boil, variation 1)")
    args = p.parse_args()
    print(f"machine: {platform.machine()}, {platform.processor() or '?'}; python {sys.version[:6]}")
    for name, flags in (("reload (default)", ()), ("--fresh-simulator", ("--fresh-simulator",))):
        proc, url = start_server(*flags)
        try:
            times, distinct = measure(url, args.task, args.resets)
        finally:
            proc.terminate()
            proc.wait(30)
        print(
            f"{name:<18} median {statistics.median(times):.3f} s/reset "
            f"(min {min(times):.3f}, max {max(times):.3f}); distinct texts: {distinct}"
        )


if __name__ == "__main__":
    main()

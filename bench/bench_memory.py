"""Memory of open sessions: RSS per session, and RSS after closing them (leak check).

For each env: open N sessions, reset them all, take one step each, read the process RSS; close
them; repeat for several cycles. Prints a markdown table.

    python bench/bench_memory.py                      # 10,000 sessions, 10 cycles
    python bench/bench_memory.py --sessions 2000 --cycles 3
"""

from __future__ import annotations

import argparse
import gc
import os
import platform

from agentgym.envs import EnvPool


def rss_mib() -> float:
    """Resident set size of this process, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def trim_heap() -> None:
    """Asks glibc to hand freed heap pages back to the OS (it keeps them by default, which
    looks like a leak in RSS although the memory is free for reuse)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def cycle(pool: EnvPool, n: int, action: str) -> float:
    """Opens, resets and steps ``n`` sessions; returns RSS while open, then closes them."""
    ids = pool.create(n)
    pool.reset(ids, [i % pool.num_tasks for i in range(n)])
    pool.step(ids, [action] * n)
    open_rss = rss_mib()
    pool.close(ids)
    return open_rss


def measure(env: str, n: int, cycles: int, action: str) -> dict[str, float]:
    pool = EnvPool(env)
    gc.collect()
    trim_heap()
    before = rss_mib()
    open_rss = [cycle(pool, n, action) for _ in range(cycles)]
    gc.collect()
    after = rss_mib()
    trim_heap()
    trimmed = rss_mib()
    return {
        "trimmed": trimmed,
        "before": before,
        "open_first": open_rss[0],
        "open_last": open_rss[-1],
        "after": after,
        "per_session_kib": (open_rss[0] - before) * 1024 / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=10)
    args = parser.parse_args()
    py = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"machine: {platform.machine()}, {py}")
    print(f"{args.sessions} sessions, {args.cycles} create/reset/step/close cycles per env\n")
    columns = ["env", "RSS before (MiB)", "open, cycle 1", "open, last cycle"]
    columns += ["after close (MiB)", "after malloc_trim", "KiB/session"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for env, action in (("babyai", "turn left"), ("textcraft", "inventory")):
        m = measure(env, args.sessions, args.cycles, action)
        print(
            f"| {env} | {m['before']:.1f} | {m['open_first']:.1f} | {m['open_last']:.1f} "
            f"| {m['after']:.1f} | {m['trimmed']:.1f} | {m['per_session_kib']:.1f} |"
        )


if __name__ == "__main__":
    main()

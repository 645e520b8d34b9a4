"""Sessions driven one at a time, as other RL stacks drive them: today's ``EnvSession`` (one pool
call per session call) against the coalescing sessions (``agentgym.envs.coalesce``), which
gather the concurrent calls into one batched pool call. Both sides in one run.

    python bench/bench_coalesce.py                       # 256 coroutines, 32 threads, BabyAI
    python bench/bench_coalesce.py --env webnav          # a slower step (~30 us)
    python bench/bench_coalesce.py --remote              # sessions on an agentgym-envserver
    python bench/bench_coalesce.py --remote --step-latency-ms 2   # ... whose env takes 2 ms

Coroutines (OpenEnv's server, verl's agent loops): each of ``--coroutines`` sessions resets,
then steps through a fixed cycle of actions, resetting when its episode ends. "EnvSession" calls
``session.step`` (a blocking pool call) from the coroutine; "EnvPool.astep" awaits
``pool.astep([id], [action])`` (today's awaitable, one thread hop per call); "AsyncEnvSession"
awaits the coalesced session. Threads (SkyRL's 32-thread env pool): each of ``--threads``
threads drives one session, with ``EnvSession`` and with ``ThreadSafeEnvSession``.

Prints steps per second (resets not counted), the mean batch the coalescer sent, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import threading
import time
from collections.abc import Callable

from agentgym.envs import AsyncCoalescer, EnvPool, ThreadCoalescer

ACTIONS = {
    "babyai": ["turn left", "move forward", "turn right", "move forward"],
    "textcraft": ["inventory", "get 1 oak log", "craft 4 oak planks using 1 oak log"],
    "webnav": ["scroll [down]", "scroll [up]"],
}


def run_coroutines(pool: EnvPool, kind: str, n: int, seconds: float, window_s: float):
    """Steps per second of ``n`` coroutine sessions of ``kind``; and the coalescer's mean."""
    actions = ACTIONS[pool.env]
    coalescer = AsyncCoalescer(pool, window_s=window_s) if kind == "AsyncEnvSession" else None

    async def one(i: int, stop: float) -> int:
        if coalescer is not None:
            s = coalescer.session()
            reset, step = s.reset, s.step
        else:
            plain = pool.session()
            reset = _awaitable(plain.reset)
            step = _awaitable(plain.step) if kind == "EnvSession" else _astep(pool, plain.id)
            s = plain
        steps = 0
        await reset(i)
        while time.perf_counter() < stop:
            _, _, done, truncated = await step(actions[steps % len(actions)])
            steps += 1
            if done or truncated:
                await reset(i + 1000 * steps)
        s.close()
        return steps

    async def main() -> int:
        stop = time.perf_counter() + seconds
        return sum(await asyncio.gather(*(one(i, stop) for i in range(n))))

    start = time.perf_counter()
    steps = asyncio.run(main())
    rate = steps / (time.perf_counter() - start)
    if coalescer is not None:
        coalescer.shutdown()
    return rate, coalescer.stats().mean_batch if coalescer else 1.0


def _awaitable(call: Callable):
    async def run(*args):
        return call(*args)

    return run


def _astep(pool: EnvPool, sid: int):
    async def step(action: str):
        b = await pool.astep([sid], [action])
        return b.observations[0], float(b.rewards[0]), bool(b.dones[0]), bool(b.truncated[0])

    return step


def run_threads(pool: EnvPool, kind: str, n: int, seconds: float, window_s: float):
    """Steps per second of ``n`` threads, one session each; and the coalescer's mean batch."""
    actions = ACTIONS[pool.env]
    coalescer = ThreadCoalescer(pool, window_s=window_s) if kind == "ThreadSafeEnvSession" else None
    counts: list[int] = []
    stop = time.perf_counter() + seconds

    def one(i: int) -> None:
        s = coalescer.session() if coalescer is not None else pool.session()
        steps = 0
        s.reset(i)
        while time.perf_counter() < stop:
            _, _, done, truncated = s.step(actions[steps % len(actions)])
            steps += 1
            if done or truncated:
                s.reset(i + 1000 * steps)
        s.close()
        counts.append(steps)

    start = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = sum(counts) / (time.perf_counter() - start)
    return rate, coalescer.stats().mean_batch if coalescer else 1.0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="babyai", choices=sorted(ACTIONS))
    ap.add_argument("--coroutines", type=int, default=256)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="the best of this many is reported")
    ap.add_argument("--window-ms", type=float, default=1.0, help="the coalescers' window_s")
    ap.add_argument("--pool-threads", type=int, default=None, help="EnvPool(threads=)")
    ap.add_argument(
        "--remote", action="store_true",
        help="sessions on an in-process agentgym-envserver (EnvPool.remote over HTTP)",
    )  # fmt: skip
    ap.add_argument("--step-latency-ms", type=float, default=0.0, help="the server's added latency")
    args = ap.parse_args(argv)
    server = None
    if args.remote:
        from agentgym import _envserver

        server = _envserver.Server(
            args.env,
            port=0,
            step_latency=args.step_latency_ms / 1000,
            env_threads=args.pool_threads,
        )
        pool = EnvPool.remote(f"http://127.0.0.1:{server.port}", args.env)
    else:
        pool = EnvPool(args.env, threads=args.pool_threads)
    window = args.window_ms / 1000
    where = f"remote (step latency {args.step_latency_ms} ms)" if args.remote else "local"
    print(
        f"{args.env} {where}, pool threads {pool.num_threads}, {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"window {args.window_ms} ms"
    )
    rows = [
        ("coroutines", args.coroutines, kind, run_coroutines)
        for kind in ("EnvSession", "EnvPool.astep", "AsyncEnvSession")
    ] + [
        ("threads", args.threads, kind, run_threads)
        for kind in ("EnvSession", "ThreadSafeEnvSession")
    ]
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for _ in range(args.repeats):  # in turn, so that a load change hits every row alike
        for group, n, kind, run in rows:
            rate, mean = run(pool, kind, n, args.seconds, window)
            if rate > best.get((group, kind), (0.0, 0.0))[0]:
                best[(group, kind)] = (rate, mean)
    print("| callers | session | steps/s | mean batch | vs EnvSession |")
    print("|---|---|---:|---:|---:|")
    for group, n, kind, _ in rows:
        rate, mean = best[(group, kind)]
        base = best[(group, "EnvSession")][0]
        print(f"| {n} {group} | {kind} | {rate:,.0f} | {mean:.1f} | {rate / base:.2f}x |")
    if server is not None:
        server.stop()


if __name__ == "__main__":
    main()

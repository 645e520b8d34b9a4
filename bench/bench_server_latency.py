"""Latency of small requests while another client runs big batches on agentgym-envserver, for
each number of blocking threads (``--blocking-threads``).

One client keeps stepping ``--sessions`` BabyAI sessions with ``/batch/step`` (one request in
flight, as EnvPool.remote does); another steps one session with single ``/step`` requests,
``--pause-ms`` apart, and records each request's latency. Printed per thread count: the small
requests' p50/p90/p99/max latency and the big client's steps/s (what extra threads cost the
batches: a session freed on another thread than it was allocated on goes through the
allocator's slow path).

    python bench/bench_server_latency.py --sessions 50000 --seconds 20 --threads 1 2 4
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time

import requests


def start_server(threads: int, sessions: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "agentgym.cli.envserver", "--env", "babyai", "--port", "0",
           "--blocking-threads", str(threads), "--max-sessions", str(sessions + 16),
           "--max-body-bytes", str(64 << 20)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if "agentgym-envserver:" in line and "http://" in line:
            return proc, line.split()[-1]
    raise RuntimeError("the server did not start")


def big_client(url: str, sessions: int, stop: threading.Event, out: dict) -> None:
    http = requests.Session()
    ids = http.post(url + "/batch/create", json={"n": sessions}, timeout=600).json()["ids"]
    tasks = [i % 40 for i in range(sessions)]
    http.post(url + "/batch/reset", json={"ids": ids, "data_idxs": tasks}, timeout=600)
    out["ready"].set()
    steps, start = 0, time.perf_counter()
    while not stop.is_set():
        body = {"ids": ids, "actions": ["turn left"] * sessions}
        reply = http.post(url + "/batch/step", json=body, timeout=600)
        reply.raise_for_status()
        steps += sessions
    out["steps_per_s"] = steps / (time.perf_counter() - start)


def small_client(url: str, pause_s: float, stop: threading.Event, out: dict) -> None:
    http = requests.Session()
    sid = http.post(url + "/create", json={}, timeout=60).json()["id"]
    http.post(url + "/reset", json={"id": sid, "data_idx": 0}, timeout=60)
    latencies = []
    while not stop.is_set():
        t0 = time.perf_counter()
        http.post(url + "/step", json={"id": sid, "action": "turn left"}, timeout=600)
        latencies.append(time.perf_counter() - t0)
        time.sleep(pause_s)
    out["latencies"] = latencies


def measure(threads: int, sessions: int, seconds: float, pause_s: float) -> dict:
    proc, url = start_server(threads, sessions)
    try:
        stop = threading.Event()
        out: dict = {"ready": threading.Event()}
        big = threading.Thread(target=big_client, args=(url, sessions, stop, out))
        big.start()
        out["ready"].wait()
        small = threading.Thread(target=small_client, args=(url, pause_s, stop, out))
        small.start()
        time.sleep(seconds)
        stop.set()
        big.join()
        small.join()
    finally:
        proc.terminate()
        proc.wait(30)
    ms = sorted(x * 1000 for x in out["latencies"])
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"threads": threads, "requests": len(ms), "p50": q[49], "p90": q[89], "p99": q[98],
            "max": ms[-1], "steps_per_s": out["steps_per_s"]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=50_000)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--pause-ms", type=float, default=20.0)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    args = p.parse_args()
    print(f"{args.sessions} sessions in /batch/step; single /step every {args.pause_ms:g} ms\n")
    print("| blocking threads | small requests | p50 ms | p90 ms | p99 ms | max ms | "
          "batch steps/s |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.threads:
        r = measure(n, args.sessions, args.seconds, args.pause_ms / 1000)
        quantiles = (f"{r[k]:.1f}" for k in ("p50", "p90", "p99", "max"))
        cells = [r["threads"], r["requests"], *quantiles]
        print("| " + " | ".join(map(str, cells)) + f" | {r['steps_per_s']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()

"""HTTP throughput: agentgym-envserver (Rust) against a FastAPI/uvicorn server hosting the Python
reference env, side by side in one run, plus the remote fan-out of EnvPool.remote.

1. Single-step requests/s, keep-alive, each server pinned to one core (``taskset -c 0``), the
   load generator on the other core: EnvPool.remote in per-session mode keeps ``--concurrency``
   single ``/step`` requests in flight over keep-alive connections. Env: BabyAI-text, action
   ``turn left``; the reference server is AgentGym's BabyAI wire format over
   ``agentgym.envs.reference.babyai_text`` (minigrid), sync handlers as in AgentGym's servers.
2. Env steps/s through ``/batch/step``: the same pinned agentgym-envserver, ``--batch-sessions``
   sessions, one ``/batch/step`` per round, by one client, then by two clients stepping half
   the sessions each (two requests in flight, so the server does not wait for the client).
3. Remote fan-out: ``--fanout-sessions`` sessions over 4 agentgym-envservers that add 20 ms of
   latency to each step request; wall time of one batched step with EnvPool.remote (batch
   routes; per-session routes) against a thread pool of ``requests.post`` calls (one connection
   per call, as AgentGym's clients do), and the latency of one lone request.

    maturin develop --release && python bench/bench_http.py

Build the extension with ``--release``: debug builds are much slower.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel

import agentgym

AGENTGYM_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(agentgym.__file__)))


# --- the reference server (run as a subprocess of this script) -------------------------------


class StepBody(BaseModel):
    id: int
    action: str


class ResetBody(BaseModel):
    id: int
    data_idx: int


class IdBody(BaseModel):
    id: int


def reference_app():
    """AgentGym's BabyAI wire format over the Python reference env (FastAPI, sync handlers)."""
    import itertools

    from fastapi import FastAPI

    from agentgym.envs.reference.babyai_text import make_session

    app = FastAPI()
    sessions: dict[int, dict] = {}
    ids = itertools.count(0)

    @app.post("/create")
    def create() -> dict:
        i = next(ids)
        sessions[i] = {"env": None, "score": 0.0}
        return {"id": i}

    @app.post("/reset")
    def reset(body: ResetBody) -> dict:
        env, obs = make_session(body.data_idx)
        sessions[body.id] = {"env": env, "score": 0.0}
        return {"observation": obs, "reward": 0, "score": 0, "deleted": False, "done": False}

    @app.post("/step")
    def step(body: StepBody) -> dict:
        s = sessions[body.id]
        obs, reward, done = s["env"].step(body.action)
        s["score"] += reward
        return {"observation": obs, "reward": reward, "score": s["score"], "done": done}

    @app.post("/close")
    def close(body: IdBody) -> bool:
        return sessions.pop(body.id, None) is not None

    return app


def serve_reference(port: int) -> None:
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    print(f"reference: babyai on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(reference_app(), log_level="warning")).run(sockets=[sock])


# --- process helpers -----------------------------------------------------------------------------


class Server:
    """A server subprocess; ``url`` once it printed its address."""

    def __init__(self, args: list[str], cpu: str | None):
        if cpu is not None and shutil.which("taskset"):
            args = ["taskset", "-c", cpu, *args]
        self.args = args
        # The subprocess imports the same agentgym as this script (installed, or a dev tree
        # with its built extension), never a source tree without the extension.
        env = {**os.environ, "PYTHONPATH": AGENTGYM_ROOT}
        self.p = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        for line in self.p.stdout:
            if "http://" in line:
                self.url = "http://" + line.strip().rsplit("http://", 1)[1]
                break
        else:
            raise RuntimeError(f"{args} exited before serving")
        threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True).start()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait()


SERVER_OPTIONS: list[str] = []
"""``--option KEY=VALUE`` arguments every agentgym-envserver gets (``--server-option``)."""


def envserver(cpu: str | None, *extra: str) -> Server:
    args = [
        sys.executable,
        "-m",
        "agentgym.cli.envserver",
        "--env",
        "babyai",
        "--port",
        "0",
        *SERVER_OPTIONS,
        *extra,
    ]
    if cpu is not None:
        args += ["--workers", "1", "--env-threads", "1"]
    return Server(args, cpu)


def rate(run_round: Callable[[], int], seconds: float) -> float:
    """Units per second of `run_round` (which returns units done) over about `seconds`."""
    run_round()  # warm up connections
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += run_round()
    return done / (time.perf_counter() - start)


def step_and_restart(pool, ids: list[int], actions: list[str]) -> int:
    """One batched step; sessions whose episode ended (done, or truncated at minigrid's step
    limit) start task 0."""
    b = pool.step(ids, actions)
    assert b.ok, [e for e in b.errors if e][:3]
    finished = [i for i, end in zip(ids, b.dones | b.truncated, strict=True) if end]
    if finished:
        pool.reset(finished, [0] * len(finished))
    return len(ids)


# --- the measurements --------------------------------------------------------------------------


def single_step_rps(url: str, concurrency: int, seconds: float) -> float:
    from agentgym.envs import EnvPool

    pool = EnvPool.remote(url, "babyai", batch=False, max_in_flight=concurrency, num_tasks=10**6)
    ids = pool.create(concurrency)
    pool.reset(ids, list(range(concurrency)))
    actions = ["turn left"] * concurrency

    def round_() -> int:
        return step_and_restart(pool, ids, actions)

    result = rate(round_, seconds)
    pool.close(ids)
    return result


def batch_steps(url: str, sessions: int, seconds: float, in_flight: int) -> float:
    """Env steps/s with `in_flight` clients, each stepping its share of `sessions` with one
    /batch/step per round. With one, the server idles while the client decodes a reply and
    sends the next request; with two, one request is served while the other's reply is read,
    as with the 64 single-step requests kept in flight for the requests/s figure."""
    from concurrent.futures import ThreadPoolExecutor

    from agentgym.envs import EnvPool

    pool = EnvPool.remote(url, "babyai")
    ids = pool.create(sessions)
    pool.reset(ids, list(range(sessions)))
    shares = [ids[k::in_flight] for k in range(in_flight)]

    def client(share: list[int]) -> float:
        actions = ["turn left"] * len(share)
        return rate(lambda: step_and_restart(pool, share, actions), seconds)

    with ThreadPoolExecutor(in_flight) as ex:  # the remote step releases the GIL
        result = sum(ex.map(client, shares))
    pool.close(ids)
    return result


def fanout(sessions: int, latency_ms: float, repeats: int, threads: int) -> dict[str, float]:
    """Median wall seconds of one step of `sessions` sessions over 4 slow servers."""
    import requests

    from agentgym.envs import EnvPool

    servers = [envserver(None, "--step-latency-ms", str(latency_ms)) for _ in range(4)]
    urls = [s.url for s in servers]
    out: dict[str, float] = {}
    try:
        remote: list[tuple[str, int]] = []
        for name, batch in (
            ("EnvPool.remote, /batch/step", True),
            ("EnvPool.remote, per-session /step", False),
        ):
            pool = EnvPool.remote(urls, "babyai", batch=batch, max_in_flight=sessions)
            ids = pool.create(sessions)
            pool.reset(ids, list(range(sessions)))
            actions = ["turn left"] * sessions
            times = []
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                step_and_restart(pool, ids, actions)
                times.append(time.perf_counter() - t0)
            out[name] = statistics.median(times[1:])
            # The last pool's sessions stay open for the thread-pool run below, restarted on
            # task 0 (turning in place does not end its episode within the run's few steps;
            # GoToObjS6's 4-cell rooms can, and those steps would answer 409).
            pool.reset(ids, [0] * sessions)
            remote = [(i["server"], i["remote_id"]) for i in pool.info(ids)]

        # Thread pool of requests.post on the sessions the batch pool created (still open).
        def post(target: tuple[str, int]) -> None:
            r = requests.post(
                target[0] + "/step", json={"id": target[1], "action": "turn left"}, timeout=60
            )
            assert r.status_code == 200, (r.status_code, r.text[:200])

        times = []
        with ThreadPoolExecutor(threads) as ex:
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                list(ex.map(post, remote))
                times.append(time.perf_counter() - t0)
        out[f"thread pool ({threads}) of requests.post"] = statistics.median(times[1:])
        lone = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            post(remote[0])
            lone.append(time.perf_counter() - t0)
        out["one request (requests.post)"] = statistics.median(lone)
    finally:
        for s in servers:
            s.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--batch-sessions", type=int, default=1024)
    p.add_argument("--fanout-sessions", type=int, default=1024)
    p.add_argument("--fanout-latency-ms", type=float, default=20.0)
    p.add_argument("--fanout-threads", type=int, default=64)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument(
        "--server-option", action="append", default=[], metavar="KEY=VALUE",
        help="a BabyAI option for every agentgym-envserver (e.g. worlds=own), repeatable",
    )  # fmt: skip
    p.add_argument("--serve-reference", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    SERVER_OPTIONS.extend(arg for opt in args.server_option for arg in ("--option", opt))
    if args.serve_reference:
        serve_reference(args.port)
        return
    pinned = (os.cpu_count() or 1) >= 2
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}; servers pinned to core 0: {pinned}; "
        f"server options: {' '.join(args.server_option) or 'none'}"
    )
    server_cpu, client_cpu = ("0", {1}) if pinned else (None, None)
    if client_cpu:
        os.sched_setaffinity(0, client_cpu)

    rust = envserver(server_cpu)
    reference = Server([sys.executable, os.path.abspath(__file__), "--serve-reference"], server_cpu)
    try:
        rps_rust = single_step_rps(rust.url, args.concurrency, args.seconds)
        rps_ref = single_step_rps(reference.url, args.concurrency, args.seconds)
        batch = {k: batch_steps(rust.url, args.batch_sessions, args.seconds, k) for k in (1, 2)}
    finally:
        rust.stop()
        reference.stop()
    print(
        "\n## Single-step requests/s (one server core, keep-alive, "
        f"{args.concurrency} requests in flight, BabyAI 'turn left')\n"
    )
    print("| server | requests/s |\n|---|---:|")
    print(f"| agentgym-envserver (Rust) | {rps_rust:,.0f} |")
    print(f"| FastAPI/uvicorn + Python reference env | {rps_ref:,.0f} |")
    print(f"| ratio | {rps_rust / rps_ref:.1f}x (goal >= 40x) |")
    print(
        f"\n## Env steps/s through /batch/step (one server core, {args.batch_sessions} sessions)\n"
    )
    print("| /batch/step requests in flight | steps/s | ratio to FastAPI single-step requests/s |")
    print("|---:|---:|---:|")
    for k, steps in batch.items():
        print(f"| {k} | {steps:,.0f} | {steps / rps_ref:.0f}x (goal >= 150x at one in flight) |")

    if client_cpu:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    fan = fanout(args.fanout_sessions, args.fanout_latency_ms, args.repeats, args.fanout_threads)
    lone = fan["one request (requests.post)"]
    print(
        f"\n## Remote fan-out: {args.fanout_sessions} sessions over 4 servers adding "
        f"{args.fanout_latency_ms:g} ms per step (median of {args.repeats})\n"
    )
    print("| one batched step | wall ms | x one request |\n|---|---:|---:|")
    for name, seconds in fan.items():
        print(f"| {name} | {seconds * 1000:,.1f} | {seconds / lone:.1f} |")
    threads = fan[f"thread pool ({args.fanout_threads}) of requests.post"]
    best = fan["EnvPool.remote, /batch/step"]
    print(
        f"\nEnvPool.remote (/batch/step) is {threads / best:.0f}x faster than the thread pool "
        f"(goal >= 10x) and {best / lone:.1f}x one request's latency (goal <= 3x)."
    )


if __name__ == "__main__":
    main()

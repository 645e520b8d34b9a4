"""Faults on the remote side fail only the sessions of the faulty server, each with a clear
error, and a step that may have reached a server is never retried."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests
from httphelpers import envserver_process, fake_server

from agentgym.envs import EnvPool, SessionError


def _servers_of(pool: EnvPool, ids: list[int]) -> list[str]:
    return [info["server"] for info in pool.info(ids)]


@pytest.mark.parametrize("batch", [True, False], ids=["batch-routes", "per-session-routes"])
def test_server_killed_mid_batch(procs, batch):
    healthy = envserver_process("babyai")
    doomed = envserver_process("babyai", "--step-latency-ms", "3000")
    procs += [healthy, doomed]
    pool = EnvPool.remote([healthy.url, doomed.url], "babyai", batch=batch)
    ids = pool.create(6)
    pool.reset(ids, list(range(6)))
    killer = threading.Timer(0.5, doomed.kill)
    killer.start()
    t0 = time.monotonic()
    b = pool.step(ids, ["turn left"] * 6)
    killer.join()
    assert time.monotonic() - t0 < 3.0  # the dead server's sessions failed, nobody waited them out
    for sid, server, error in zip(ids, _servers_of(pool, ids), b.errors, strict=True):
        if server == healthy.url:
            assert error is None
        else:
            assert error and f"session {sid} (server {doomed.url}" in error
            assert "not retried" in error
    failed = [i for i, s in zip(ids, _servers_of(pool, ids), strict=True) if s == doomed.url]
    assert all(info["phase"] == "failed" for info in pool.info(failed))
    # A restarted server on the same port serves new sessions.
    port = doomed.port
    reborn = envserver_process("babyai", "--port", str(port))
    procs.append(reborn)
    assert reborn.port == port
    pool.close(failed)
    new = pool.create(3)
    assert doomed.url in _servers_of(pool, new)
    pool.reset(new, [0, 1, 2])
    assert pool.step(new, ["turn right"] * 3).ok


def test_hanging_server_times_out(procs):
    sleepy = fake_server("sleep", "--sleep", "5")
    fine = fake_server("ok")
    procs += [sleepy, fine]
    pool = EnvPool.remote([sleepy.url, fine.url], "fake", timeout=0.5, num_tasks=10)
    ids = pool.create(4)
    pool.reset(ids, [1, 2, 3, 4])
    t0 = time.monotonic()
    b = pool.step(ids, ["a"] * 4)
    assert time.monotonic() - t0 < 4.0
    for server, error, obs in zip(_servers_of(pool, ids), b.errors, b.observations, strict=True):
        if server == fine.url:
            assert error is None and obs.endswith(":1:a")
        else:
            assert "no reply within the timeout" in error and "not retried" in error
    assert pool.stats()["transport_errors"] == 2


def _wait_stopped(pid: int, timeout_s: float = 5.0) -> None:
    """Until every thread of ``pid`` is stopped: kill() returns before a thread that is
    running or about to run has stopped, and such a thread may still answer a request."""
    from pathlib import Path

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = [
            (t / "stat").read_text().rsplit(")", 1)[1].split()[0]
            for t in Path(f"/proc/{pid}/task").iterdir()
        ]
        if all(s in "tT" for s in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop within {timeout_s} s")


@pytest.mark.parametrize("batch", [True, False], ids=["batch-routes", "per-session-routes"])
def test_stopped_server_costs_one_timeout_per_call(procs, batch):
    """A server that stops answering (SIGSTOP) holds a batched call for one timeout, however many
    of its sessions wait for an in-flight slot; its sessions fail, the other server's do not."""
    if batch:
        hung, fine = envserver_process("babyai"), envserver_process("babyai")
        pool = EnvPool.remote([hung.url, fine.url], "babyai", timeout=1.0, max_in_flight=2)
    else:
        hung, fine = fake_server("ok"), fake_server("ok")
        pool = EnvPool.remote(
            [hung.url, fine.url], "fake", timeout=1.0, max_in_flight=2, num_tasks=100
        )
    procs += [hung, fine]
    ids = pool.create(16)  # 8 per server: 4 rounds of 2 in flight, were 4 timeouts when hung
    pool.reset(ids, list(range(16)))
    on_hung = [s == hung.url for s in _servers_of(pool, ids)]
    assert sum(on_hung) == 8
    os.kill(hung.p.pid, signal.SIGSTOP)
    _wait_stopped(hung.p.pid)
    try:
        bound = 1.0 + 1.5  # one timeout, plus generous scheduling noise
        t0 = time.monotonic()
        b = pool.step(ids, ["turn left" if batch else "a"] * 16)
        assert time.monotonic() - t0 < bound
        for h, error in zip(on_hung, b.errors, strict=True):
            assert (error is not None) == h, error
        assert all("no reply within the timeout" in e or "not sent" in e for e in b.errors if e)

        t0 = time.monotonic()
        with pytest.raises(SessionError) as failed:
            pool.reset(ids, list(range(16)))
        assert time.monotonic() - t0 < bound
        assert sorted(failed.value.errors) == [i for i, h in enumerate(on_hung) if h]
        observations = zip(failed.value.observations, on_hung, strict=True)
        assert all(o is not None for o, h in observations if not h)

        t0 = time.monotonic()
        new = pool.create(16)
        assert time.monotonic() - t0 < bound
        assert set(_servers_of(pool, new)) == {fine.url}

        t0 = time.monotonic()
        pool.close(ids + new)
        assert len(pool) == 0
        assert time.monotonic() - t0 < bound
    finally:
        os.kill(hung.p.pid, signal.SIGCONT)


def test_garbage_server(procs):
    garbage = fake_server("garbage")
    fine = fake_server("ok")
    procs += [garbage, fine]
    pool = EnvPool.remote([garbage.url, fine.url], "fake", num_tasks=10)
    ids = pool.create(2)
    pool.reset(ids, [1, 2])
    b = pool.step(ids, ["a", "b"])
    by_server = dict(
        zip(_servers_of(pool, ids), zip(b.errors, b.observations, strict=True), strict=True)
    )
    assert by_server[fine.url] == (None, "2:1:b")
    assert "not JSON" in by_server[garbage.url][0] and "<html>" in by_server[garbage.url][0]


def test_unreachable_server_gets_no_sessions(procs):
    fine = fake_server("ok")
    procs.append(fine)
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    pool = EnvPool.remote([dead, fine.url], "fake", num_tasks=10, connect_timeout=1.0)
    ids = pool.create(3)
    assert set(_servers_of(pool, ids)) == {fine.url}
    with pytest.raises(ConnectionError, match="could create only 0 of 2"):
        EnvPool.remote([dead], "fake", num_tasks=10, connect_timeout=1.0).create(2)


def test_steps_are_not_retried(procs):
    sleepy = fake_server("sleep", "--sleep", "1.5")
    procs.append(sleepy)
    pool = EnvPool.remote(sleepy.url, "fake", timeout=0.3, num_tasks=10)
    ids = pool.create(1)
    pool.reset(ids, [0])
    assert pool.step(ids, ["a"]).errors[0]
    time.sleep(1.5)
    # The server saw exactly one step; a second attempt is refused locally until a reset.
    again = pool.step(ids, ["a"])
    assert "failed earlier" in again.errors[0]
    assert requests.get(sleepy.url + "/stats").json() == {"steps": 1}

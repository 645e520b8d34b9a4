"""Actors on their own, joining one learner over TCP: one killed mid-run, one joining late."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_train_eval import TINY  # noqa: E402
from tiny_run import QUICKSTART  # noqa: E402
from tiny_run import sets as _sets  # noqa: E402

from agentgym.transport.wire import SCHEMA_VERSION  # noqa: E402


def start(module: str, *args: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", module, *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env)  # fmt: skip


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the learner exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_actors_join_late_and_die_without_stalling_the_learner(tmp_path, free_base_port):
    run_dir, port = tmp_path / "run", free_base_port()
    sets = _sets(TINY + [
        f"run_dir={run_dir}", "transport.kind=tcp", "transport.host=127.0.0.1",
        f"transport.base_port={port}", "learner.groups_per_step=3", "actor.num_actors=3",
        "learner.max_steps=40", "learner.checkpoint_every=0", "learner.max_staleness=8",
    ])  # fmt: skip
    config = [str(QUICKSTART), *sets]
    learner = start("agentgym.cli.learner", *config, log=tmp_path / "learner.log")
    address = f"tcp://127.0.0.1:{port}"
    actors = {
        i: start(
            "agentgym.cli.actor",
            *config,
            "--learner",
            address,
            "--index",
            str(i),
            log=tmp_path / f"actor{i}.log",
        )  # fmt: skip
        for i in range(3)
    }
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 2, 240, "two updates", learner)
        actors[1].send_signal(signal.SIGKILL)  # dies without a word
        actors[3] = start("agentgym.cli.actor", *config, "--learner", address, "--index", "3",
                          log=tmp_path / "actor3.log")  # fmt: skip
        assert learner.wait(timeout=300) == 0, (tmp_path / "learner.log").read_text()[-3000:]
        for i in (0, 2, 3):
            assert actors[i].wait(timeout=60) == 0, (tmp_path / f"actor{i}.log").read_text()[-2000:]
    finally:
        for p in [learner, *actors.values()]:
            if p.poll() is None:
                p.kill()
            p.wait()
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == list(range(1, 41))
    for m in lines:  # every trajectory received came from a named actor and was counted
        assert m["actors/trajectories"] == m["received_total"]
    seen = json.loads((run_dir / "actors.json").read_text())
    assert len(seen) == 4
    by_index = {name.rsplit(":", 1)[1]: rec for name, rec in seen.items()}
    assert all(by_index[i]["trajectories"] > 0 for i in "0123")
    assert max(m["actors/connected"] for m in lines) >= 3
    assert SCHEMA_VERSION >= 1


def test_an_actor_with_another_wire_schema_is_refused_at_connect(tmp_path):
    """The learner answers a hello of another schema with a refusal that names both."""
    import asyncio

    import zmq

    from agentgym.transport.endpoints import Endpoints
    from agentgym.transport.learner_channels import LearnerChannels
    from agentgym.transport.wire import Hello, decode_welcome, encode_hello

    with LearnerChannels(Endpoints.ipc(tmp_path)) as learner:
        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(learner.endpoints.weights)
        dealer.send_multipart([b"", encode_hello(Hello("old:1:0", schema=SCHEMA_VERSION + 7))])
        assert dealer.poll(5000)
        welcome = decode_welcome(dealer.recv_multipart()[1])
        dealer.close()
        ctx.term()
        assert not welcome.accepted
        assert f"schema {SCHEMA_VERSION + 7}" in welcome.reason
        assert learner.actors.counts() == {"known": 0, "connected": 0, "trajectories": 0,
                                           "refused": 1, "unnamed_trajectories": 0}  # fmt: skip

        from agentgym.transport.actor_channels import AsyncActorChannels

        async def greet():
            actor = AsyncActorChannels(learner.endpoints, actor="new:1:0")
            try:
                return await actor.hello(timeout_s=5)
            finally:
                actor.close()

        assert asyncio.run(greet()).accepted
        assert learner.actors.counts()["known"] == 1

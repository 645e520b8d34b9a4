"""A learner serving TCP under ``ulimit -n 256`` against 600 silent connections (libzmq accepts
every one before its key check): it caps each socket's connections, shedding the silent ones,
so an actor with the run's keys still gets in and the learner trains and writes its files
instead of dying for want of a descriptor."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import make_groups, rescore, tiny_model  # noqa: E402

from agentgym.transport import ActorChannels, Endpoints  # noqa: E402
from agentgym.transport.auth import KEYS_FILE, TransportKeys  # noqa: E402

HERE = Path(__file__).parent
FLOOD = 600


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _flood(endpoints: Endpoints) -> list[socket.socket]:
    socks = []
    for i in range(FLOOD):
        target = endpoints.trajectories if i % 3 else endpoints.weights
        try:
            socks.append(socket.create_connection(("127.0.0.1", _port(target)), timeout=5))
        except OSError:
            break  # the learner's backlog is full: that is enough of a flood
    return socks


def _push_until_done(learner: subprocess.Popen, endpoints: Endpoints, keys, timeout_s: float):
    model = tiny_model(seed=3)
    version, seed = 0, 100
    deadline = time.monotonic() + timeout_s
    with ActorChannels(endpoints, keys=keys) as actor:
        while learner.poll() is None and time.monotonic() < deadline:
            control = actor.poll_control(timeout_s=0.05)
            if control is not None:
                version = control.policy_version
            seed += 1
            groups = make_groups(model, num_groups=1, version=version, seed=seed)
            actor.send_trajectories(rescore(model, groups), timeout_s=0.5)


def test_a_flood_of_silent_connections_does_not_kill_a_tcp_learner(tmp_path):
    script = f"ulimit -n 256 && exec {sys.executable} {HERE / 'flood_learner.py'} {tmp_path} 2"
    learner = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)
    flood: list[socket.socket] = []
    try:
        endpoints = Endpoints(**json.loads(learner.stdout.readline()))
        flood = _flood(endpoints)
        assert len(flood) > 256, "the flood must outnumber the learner's descriptors"
        keys = TransportKeys.load(tmp_path / KEYS_FILE)
        _push_until_done(learner, endpoints, keys, timeout_s=60)
        out, _ = learner.communicate(timeout=30)
    finally:
        for s in flood:
            s.close()
        if learner.poll() is None:
            learner.kill()
    assert learner.returncode == 0, out
    shed = int(out.split("shed=")[1].split()[0])
    assert shed > 0, out
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    assert steps == [1, 2]
    assert json.loads((tmp_path / "actors.json").read_text()) is not None

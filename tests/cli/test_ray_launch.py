"""``agentgym train --ray ADDRESS`` on a local Ray head bound to 127.0.0.1: a short quickstart
with two learner ranks, and Ctrl-C stopping a run with nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("ray")

from test_train_eval import TINY  # noqa: E402
from tiny_run import QUICKSTART  # noqa: E402

# Ray resolves 127.0.0.1 to the machine's routable address unless it believes it runs on a
# laptop (this variable): then every node address, and so the learner's sockets, is loopback.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A one-node Ray cluster (4 logical CPUs, 200 MB object store); its address."""
    if sys.platform != "linux":
        pytest.skip("the test reads /proc")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path_factory.mktemp("ray") / "head.log"
    # Ray's session files and its "current cluster" record stay out of the shared /tmp/ray;
    # a short path, since Ray's Unix socket paths live under it
    temp_dir = tempfile.mkdtemp(prefix="agentgym-ray-")
    ray = Path(sys.executable).with_name("ray")
    cmd = [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--num-cpus", "4", "--include-dashboard", "false",
           "--object-store-memory", str(200 * 2**20), "--disable-usage-stats",
           "--temp-dir", temp_dir]  # fmt: skip
    with open(log_path, "wb") as log:
        head = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **LOOPBACK},
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_for(lambda: "Ray runtime started" in log_path.read_text(), 120, head, log_path)
        yield f"127.0.0.1:{port}", head.pid
    finally:
        head.terminate()  # `ray start --block` stops the processes it started
        head.wait(60)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for(ready, timeout_s, proc, log_path) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.5)


def _train(run_dir: Path, address: str, sets: list[str]) -> subprocess.Popen:
    args = [f"run_dir={run_dir}", *TINY, *sets]
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", str(QUICKSTART), "--quiet",
           "--ray", address, *[a for item in args for a in ("--set", item)]]  # fmt: skip
    with open(run_dir.parent / "launcher.log", "wb") as out:  # the child keeps its own copy
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **LOOPBACK}
        )


def _launcher_log(run_dir: Path) -> str:
    return (run_dir.parent / "launcher.log").read_text()[-4000:]


def _left_behind(run_dir: Path, head_pid: int, timeout_s: float = 15.0) -> list[str]:
    """Processes of the run still alive after ``timeout_s``: its children, or Ray hosts under
    the head (a killed host may take a moment to exit)."""
    deadline = time.monotonic() + timeout_s
    while (found := _alive(run_dir, head_pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def _alive(run_dir: Path, head_pid: int) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            session = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if str(run_dir) in cmdline or (session == head_pid and "ProcessHost" in cmdline):
            found.append(cmdline)
    return found


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.slow
def test_quickstart_with_two_learner_ranks_on_a_local_ray_head(ray_head, tmp_path):
    address, head_pid = ray_head
    run_dir = tmp_path / "run"
    launcher = _train(run_dir, address, ["learner.ranks=2"])
    assert launcher.wait(300) == 0, _launcher_log(run_dir)
    assert [m["step"] for m in _metrics(run_dir)] == [1, 2]
    assert (run_dir / "checkpoints" / "step_00000002" / "dcp" / ".metadata").exists()
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    assert all(url.startswith("tcp://127.0.0.1:") for url in endpoints.values())
    logs = run_dir / "logs"
    assert "rank 1 of 2 (gloo, cpu)" in (logs / "learner1.log").read_text()
    assert "done at version 2" in (logs / "learner.log").read_text()
    assert "groups pushed" in (logs / "actor0.log").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["actors"]["groups_pushed"] >= 2
    assert "learner on 127.0.0.1, learner1 on 127.0.0.1 (Ray)" in _launcher_log(run_dir)
    assert _left_behind(run_dir, head_pid) == []


@pytest.mark.slow
def test_ctrl_c_checkpoints_and_stops_every_ray_child(ray_head, tmp_path):
    address, head_pid = ray_head
    run_dir = tmp_path / "run"
    launcher = _train(run_dir, address, ["learner.max_steps=100000"])
    deadline = time.monotonic() + 240
    while len(_metrics(run_dir)) < 2:
        assert launcher.poll() is None, _launcher_log(run_dir)
        assert time.monotonic() < deadline, _launcher_log(run_dir)
        time.sleep(0.5)
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(120) == 130, _launcher_log(run_dir)
    steps = [m["step"] for m in _metrics(run_dir)]
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step_{steps[-1]:08d}"  # the learner checkpointed as it stopped
    assert _left_behind(run_dir, head_pid) == []

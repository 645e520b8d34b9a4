"""The plain cluster path without ``agentgym train``: the learner under two torchrun agents (two
"nodes", node ranks 0 and 1, master on node 0) and an ``agentgym-actor`` started on its own, as
any scheduler would, finding the learner at the config's TCP address."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_train_eval import TINY  # noqa: E402
from tiny_run import QUICKSTART  # noqa: E402

from agentgym.actor.policy import prepare_model  # noqa: E402
from agentgym.config import dump_config, load_config  # noqa: E402


def _free_ports(count: int) -> int:
    """A port p with p .. p+count-1 free on 127.0.0.1 now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        with ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError("no free port range")


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_torchrun_on_two_nodes_and_an_actor_started_apart(tmp_path):
    run_dir = tmp_path / "run"
    base_port = _free_ports(3)
    transport = [
        "transport.kind=tcp",
        "transport.host=127.0.0.1",
        f"transport.base_port={base_port}",
    ]
    config = load_config(QUICKSTART, [*TINY, f"run_dir={run_dir}", *transport])
    path = tmp_path / "run.yaml"
    dump_config(config, path)
    prepare_model(config)  # on a real cluster: model.path on shared storage
    master = str(_free_ports(1))

    def torchrun(node_rank: int) -> list[str]:
        # static node ranks: node 0 holds global rank 0, the one that binds transport.host
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc-per-node", "1", "--node-rank", str(node_rank), "--master-addr",
                "127.0.0.1", "--master-port", master, "--module", "agentgym.cli.learner",
                str(path)]  # fmt: skip

    actor = [sys.executable, "-m", "agentgym.cli.actor", str(path), "--index", "0"]
    procs = {
        "node0": _start(torchrun(0), tmp_path / "node0.log"),
        "node1": _start(torchrun(1), tmp_path / "node1.log"),
        "actor": _start(actor, tmp_path / "actor.log"),
    }
    deadline = time.monotonic() + 300
    try:
        for name, proc in procs.items():
            code = proc.wait(max(deadline - time.monotonic(), 1))
            assert code == 0, f"{name}:\n" + (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert (run_dir / "checkpoints" / "step_00000002" / "dcp" / ".metadata").exists()
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    assert endpoints["trajectories"] == f"tcp://127.0.0.1:{base_port}"
    assert "rank 0 of 2" in (tmp_path / "node0.log").read_text()
    assert "rank 1 of 2" in (tmp_path / "node1.log").read_text()

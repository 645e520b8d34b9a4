"""The launcher's watch and stop logic, with fake children (no processes, no Ray), and the
resources and torchrun variables the Ray launcher gives each process."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the config schema lives under agentgym.learner

from agentgym.cli.common import ENDPOINTS_FILE
from agentgym.cli.ray_launch import actor_options, learner_bundle, rank_env
from agentgym.cli.train import Launcher
from agentgym.config import load_config


class FakeChild:
    """A child that runs until told to stop, or exits with ``code`` after ``after`` polls."""

    def __init__(self, name: str, events: list[str], code: int | None = None, after: int = 0):
        self.name, self.events, self.log_path = name, events, Path(f"/nonexistent/{name}.log")
        self.code, self.after, self.polls, self.stopped = code, after, 0, False

    def poll(self) -> int | None:
        self.polls += 1
        if self.stopped:
            return 0
        return self.code if self.code is not None and self.polls > self.after else None

    def terminate(self) -> None:
        self.events.append(f"terminate {self.name}")

    def wait(self, timeout_s: float) -> None:
        self.events.append(f"wait {self.name}")
        self.stopped = True

    def tail(self, lines: int = 15) -> str:
        return f"{self.name} log"


class FakeProcesses:
    """Starts fake children; the learner 'binds' by writing the endpoints file."""

    def __init__(self, run_dir: Path, events: list[str], ranks: int, failing_actor: int):
        self.run_dir, self.events = run_dir, events
        self.ranks, self.failing_actor = ranks, failing_actor

    def start_learner(self, extra, stopping):
        (self.run_dir / ENDPOINTS_FILE).write_text("{}")
        names = ["learner"] + [f"learner{r}" for r in range(1, self.ranks)]
        return [FakeChild(n, self.events) for n in names]

    def start_actors(self, extras, stopping):
        codes = [3 if i == self.failing_actor else None for i in range(len(extras))]
        return [FakeChild(f"actor{i}", self.events, code, after=2) for i, code in enumerate(codes)]

    def close(self):
        self.events.append("close")


@pytest.fixture
def keep_signal_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_failed_actor_stops_every_learner_rank_before_the_actors(
    tmp_path, keep_signal_handlers, capsys
):
    config = load_config(
        None, [f"run_dir={tmp_path}", "actor.num_actors=2", "learner.groups_per_step=2"]
    )
    events: list[str] = []
    processes = FakeProcesses(tmp_path, events, ranks=2, failing_actor=1)
    launcher = Launcher(config, sync=False, resume=False, quiet=True, processes=processes)
    assert launcher.run() == 1
    assert events == [
        "terminate learner", "terminate learner1", "wait learner", "wait learner1",
        "terminate actor0", "terminate actor1", "wait actor0", "wait actor1",
        "close",
    ]  # fmt: skip
    err = capsys.readouterr().err
    assert "actor1 exited with code 3" in err and "actor1 log" in err
    assert (tmp_path / "summary.json").exists()


def test_ray_resources_follow_the_devices():
    cpu = load_config(None, ["torch_threads=2", "actor.torch_threads=3"])
    assert learner_bundle(cpu) == {"CPU": 2.0}
    assert actor_options(cpu) == {"num_cpus": 3.0, "num_gpus": 0.0}
    gpu = load_config(None, ["learner.device=cuda", "engine.device=cuda"])
    assert learner_bundle(gpu) == {"CPU": 1.0, "GPU": 1.0}
    assert actor_options(gpu) == {"num_cpus": 1.0, "num_gpus": 1.0}


def test_rank_env_is_what_torchrun_would_set():
    ips = ["10.0.0.1", "10.0.0.1", "10.0.0.2"]
    cpu = [rank_env(r, ips, 29500, gpu=False) for r in range(3)]
    assert [e["RANK"] for e in cpu] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in cpu} == {"3"}
    assert [e["LOCAL_RANK"] for e in cpu] == ["0", "1", "0"]
    assert [e["LOCAL_WORLD_SIZE"] for e in cpu] == ["2", "2", "1"]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in cpu} == {("10.0.0.1", "29500")}
    # a GPU rank sees only its own GPU (Ray sets CUDA_VISIBLE_DEVICES): cuda:0, local rank 0
    assert {rank_env(r, ips, 29500, gpu=True)["LOCAL_RANK"] for r in range(3)} == {"0"}

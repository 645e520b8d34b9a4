"""The launcher's watch and stop logic, with fake children (no processes)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the config schema lives under agentgym.learner

from agentgym.cli.common import ENDPOINTS_FILE
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

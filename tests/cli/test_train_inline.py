"""``agentgym train --inline``: the learner and actors as threads of one process, over inproc
channels; the run, its checkpoints, resume, Ctrl-C and deterministic metrics are those of the
run in processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tiny_run

pytest.importorskip("torch")

from agentgym.cli.inline import INLINE_LOG, ThreadChild  # noqa: E402
from agentgym.cli.main import main  # noqa: E402
from agentgym.cli.rundir import checkpoint_step  # noqa: E402


def _steps(run_dir: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train(run_dir: Path, *settings: str, inline: bool = True) -> int:
    args = tiny_run.sets([*tiny_run.TINY, f"run_dir={run_dir}", *settings])
    return main(["train", str(tiny_run.QUICKSTART), *args, "--quiet", *["--inline"] * inline])


def test_an_inline_run_trains_checkpoints_and_resumes(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _train(run_dir) == 0
    out = capsys.readouterr().out
    assert f"agentgym train: run dir {run_dir} (async, inline, 1 actor(s))" in out
    assert _steps(run_dir) == [1, 2] and checkpoint_step(run_dir) == 2
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    assert all(e.startswith("inproc://") for e in endpoints.values())
    log = (run_dir / "logs" / INLINE_LOG).read_text().splitlines()
    assert any(" learner serving at " in line for line in log)
    assert any(" actor0 done: " in line for line in log)
    assert not (run_dir / "logs" / "learner.log").exists()
    assert json.loads((run_dir / "summary.json").read_text())["exit_code"] == 0

    more = ["--set", "learner.max_steps=3", "--quiet", "--inline"]
    assert main(["train", "--resume", str(run_dir), *more]) == 0
    assert "resuming from the checkpoint at step 2" in capsys.readouterr().out
    assert _steps(run_dir) == [1, 2, 3] and checkpoint_step(run_dir) == 3


@pytest.mark.parametrize(
    ("settings", "flags", "message"),
    [
        ([], ["--ray"], "drop --ray or --inline"),
        (["learner.ranks=2"], [], "learner.ranks is 2"),
        (["actor.torch_threads=2"], [], "differs from actor.torch_threads (2); set them equal"),
        (["engine.python=/usr/bin/python3"], [], "engine.python is /usr/bin/python3"),
    ],
)
def test_what_cannot_run_inline_is_refused_before_any_run_file(tmp_path, settings, flags, message):
    run_dir = tmp_path / "run"
    args = tiny_run.sets([*tiny_run.TINY, f"run_dir={run_dir}", *settings])
    with pytest.raises(SystemExit) as refusal:
        main(["train", str(tiny_run.QUICKSTART), *args, "--inline", *flags])
    assert message in str(refusal.value.code)
    assert not (run_dir / "config.yaml").exists() and not (run_dir / "logs").exists()


def _child(target, tmp_path: Path) -> ThreadChild:
    child = ThreadChild("worker", target, tmp_path / "missing.log").start()
    child.wait(10)
    return child


def test_a_thread_child_exit_code_is_its_entry_points_result(tmp_path):
    assert _child(lambda stop_on: 3, tmp_path).poll() == 3
    assert _child(lambda stop_on: None, tmp_path).poll() == 0

    def refuses(stop_on):
        raise SystemExit("worker: no such run dir")

    assert _child(refuses, tmp_path).poll() == 1

    def crashes(stop_on):
        raise RuntimeError("boom")

    assert _child(crashes, tmp_path).poll() == 1


def test_a_stop_asked_before_the_child_can_take_it_reaches_it_when_it_can(tmp_path):
    ready, stopped = threading.Event(), threading.Event()

    def target(stop_on):
        ready.wait(10)  # still building, as a learner loading its model
        stop_on(stopped.set)
        return 0 if stopped.wait(10) else 5

    child = ThreadChild("worker", target, tmp_path / "missing.log").start()
    assert child.poll() is None
    child.terminate()  # before the child handed over its stopper
    ready.set()
    child.wait(10)
    assert child.poll() == 0


@pytest.mark.slow
def test_ctrl_c_stops_an_inline_run_with_a_checkpoint_and_it_resumes(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", str(tiny_run.QUICKSTART),
           *tiny_run.sets([*tiny_run.TINY, f"run_dir={run_dir}", "learner.max_steps=200",
                           "learner.checkpoint_every=0"]), "--inline"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        lines: list[str] = []
        while not any(line.startswith("step ") for line in lines):
            line = proc.stdout.readline()
            assert line, f"no progress line; stderr: {proc.stderr.read()[-3000:]}"
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate()
    finally:
        watchdog.cancel()
    assert proc.returncode == 130, out[-3000:]
    step = checkpoint_step(run_dir)
    assert step is not None and step >= 1
    assert f"resume        agentgym train --resume {run_dir}" in out
    more = ["--set", f"learner.max_steps={step + 1}", "--quiet", "--inline"]
    assert main(["train", "--resume", str(run_dir), *more]) == 0
    assert _steps(run_dir) == list(range(1, step + 2))


TIMING = ("time", "step_time_s", "tokens_per_s")


def _metrics(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in m.items() if k not in TIMING and not k.startswith("actors/")}
        for m in lines
    ]


@pytest.mark.slow
def test_an_inline_deterministic_run_writes_the_metrics_of_a_run_in_processes(tmp_path):
    """The quickstart, four steps, two actors, ``deterministic: true``: inline and in
    processes differ only in transport, so every metric but timings and actor counts agrees."""
    settings = ["learner.max_steps=4", "learner.checkpoint_every=4", "actor.num_actors=2",
                "deterministic=true"]  # fmt: skip
    runs = []
    for name, inline in (("inline", True), ("processes", False)):
        run_dir = tmp_path / name
        args = tiny_run.sets([*settings, f"run_dir={run_dir}"])
        flags = ["--quiet", *["--inline"] * inline]
        assert main(["train", str(tiny_run.QUICKSTART), *args, *flags]) == 0
        runs.append(_metrics(run_dir))
    assert len(runs[0]) == 4 and runs[0] == runs[1]
    assert any(m["loss/policy"] != 0 for m in runs[0])

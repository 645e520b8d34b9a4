"""One run per run dir: ``agentgym train`` refuses a dir holding a run (``--resume`` continues
it, ``--overwrite`` deletes its files first), says when a resumed run is already finished, and
prints progress per step, where the files are and, when stopped, how to resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tiny_run

pytest.importorskip("torch")  # the config schema lives under agentgym.learner

from agentgym.cli.common import ENDPOINTS_FILE  # noqa: E402
from agentgym.cli.rundir import checkpoint_step, eval_out, trim_metrics  # noqa: E402
from agentgym.cli.train import Launcher  # noqa: E402
from agentgym.config import dump_config, load_config  # noqa: E402

TINY = [*tiny_run.TINY, "tasks.eval.limit=2", "eval.samples=1"]


def agentgym(*args: str, module: str = "agentgym.cli.main") -> subprocess.CompletedProcess:
    """Run a command as a user would, capturing its output."""
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def fake_run(run_dir: Path, step: int, max_steps: int = 2) -> None:
    """A run dir as a run that checkpointed at ``step`` leaves it."""
    config = load_config(
        tiny_run.QUICKSTART, [f"run_dir={run_dir}", f"learner.max_steps={max_steps}"]
    )
    (run_dir / "checkpoints" / f"step_{step:08d}").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest").write_text(f"step_{step:08d}")
    dump_config(config, run_dir / "config.yaml")
    lines = [json.dumps({"step": s}) + "\n" for s in range(1, step + 1)]
    (run_dir / "metrics.jsonl").write_text("".join(lines))


def test_a_second_train_in_the_same_run_dir_is_refused_and_touches_nothing(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, step=1)
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    done = agentgym("train", str(tiny_run.QUICKSTART), "--set", f"run_dir={run_dir}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"agentgym train: {run_dir} already holds a training run (config.yaml, metrics.jsonl, "
        "checkpoints/; its newest checkpoint is step 1).",
        f"  continue it:  agentgym train --resume {run_dir}",
        "  start over:   the same command with --overwrite (deletes those files first)",
        "  or give the new run another run_dir (--set run_dir=...)",
    ]
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before


def test_resume_of_a_finished_run_or_one_without_a_checkpoint_fails_saying_why(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, step=2, max_steps=2)
    done = agentgym("train", "--resume", str(run_dir))
    assert done.returncode == 1  # it trained nothing: a script must not take it for a run
    assert done.stdout == ""
    assert done.stderr.strip() == (
        f"agentgym train: {run_dir} is finished: its checkpoint is at step 2 of "
        f"learner.max_steps 2. To train further: agentgym train --resume {run_dir} "
        "--set learner.max_steps=4"
    )
    (run_dir / "checkpoints" / "latest").unlink()
    done = agentgym("train", "--resume", str(run_dir))
    assert done.returncode == 1
    assert f"{run_dir} has no checkpoint to resume from" in done.stderr
    assert not (run_dir / "logs").exists()


def test_a_model_built_with_other_settings_is_refused_before_the_run_starts(tmp_path):
    from agentgym.actor.menu import MANIFEST

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / MANIFEST).write_text("{}")
    done = agentgym("train", str(tiny_run.QUICKSTART), "--set", f"run_dir={tmp_path}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "holds a different menu model" in done.stderr
    assert f"delete {tmp_path / 'model'} to build the configured model" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_learner_and_train_take_resume_run_dir_alike(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, step=1)
    (run_dir / "checkpoints" / "latest").unlink()
    for module, prog in (("agentgym.cli.main", "agentgym train"),
                         ("agentgym.cli.learner", "agentgym-learner")):  # fmt: skip
        pre = ["train"] if module == "agentgym.cli.main" else []
        both = agentgym(*pre, str(tiny_run.QUICKSTART), "--resume", str(run_dir), module=module)
        assert both.returncode != 0 and "Traceback" not in both.stderr
        assert prog in both.stderr and "CONFIG" in both.stderr
        alone = agentgym(*pre, "--resume", str(run_dir), module=module)
        assert alone.returncode != 0 and "Traceback" not in alone.stderr
        assert "no checkpoint" in alone.stderr, alone.stderr
        assert "--resume RUN_DIR" in agentgym(*pre, "--help", module=module).stdout


def test_resume_drops_metrics_recorded_after_the_checkpoint(tmp_path):
    fake_run(tmp_path, step=3)
    (tmp_path / "checkpoints" / "latest").write_text("step_00000002")
    assert trim_metrics(tmp_path, 2) == [3]
    steps = [
        json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2]


def test_eval_results_go_to_the_run_dir_by_step(tmp_path):
    ckpts = tmp_path / "checkpoints" / "step_00000012"
    assert eval_out(tmp_path, ckpts, 12) == tmp_path / "eval" / "step_12.json"
    sft = tmp_path / "sft" / "checkpoints" / "step_00000040"
    assert eval_out(tmp_path, sft, 40) == tmp_path / "eval" / "sft_step_40.json"
    assert eval_out(tmp_path, tmp_path / "model", None) == tmp_path / "eval" / "model.json"


class Child:
    """A fake learner or actor: runs until stopped; the learner writes metrics as it polls
    and, at the ``stop_at`` poll, Ctrl-C reaches the launcher."""

    def __init__(self, name: str, run_dir: Path, launcher_stop=None, stop_at: int = 0):
        self.name, self.run_dir, self.log_path = name, run_dir, run_dir / f"{name}.log"
        self.polls, self.stop_at, self.launcher_stop = 0, stop_at, launcher_stop
        self.waited: list[float] = []

    def poll(self) -> int | None:
        self.polls += 1
        if self.launcher_stop is not None and self.polls == self.stop_at:
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                # a step that took 200 s since the launch (a CPU update)
                record = {"step": 1, "reward/all": 0.5, "dropped_stale_total": 3,
                          "skipped_steps_total": 2, "time": time.time() + 200}  # fmt: skip
                f.write(json.dumps(record))
                f.write("\n")
            self.launcher_stop()
        return None

    def terminate(self) -> None:
        if self.launcher_stop is not None:  # the learner checkpoints as it stops
            (self.run_dir / "checkpoints" / "step_00000001").mkdir(parents=True)
            (self.run_dir / "checkpoints" / "latest").write_text("step_00000001")

    def wait(self, timeout_s: float) -> None:
        self.waited.append(timeout_s)

    def tail(self, lines: int = 15) -> str:
        return ""


class Processes:
    def __init__(self, run_dir: Path):
        self.run_dir, self.launcher = run_dir, None

    def start_learner(self, args, stopping):
        (self.run_dir / ENDPOINTS_FILE).write_text("{}")
        self.learner = Child("learner", self.run_dir, self.launcher._request_stop, stop_at=3)
        return [self.learner]

    def start_actors(self, extras, stopping):
        return [Child("actor0", self.run_dir)]

    def close(self):
        pass


def test_ctrl_c_prints_progress_the_checkpoint_and_the_resume_command(tmp_path, capsys):
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    config = load_config(tiny_run.QUICKSTART, [f"run_dir={tmp_path}", "learner.max_steps=2"])
    processes = Processes(tmp_path)
    launcher = Launcher(config, sync=False, resume=False, quiet=False, processes=processes)
    processes.launcher = launcher
    try:
        assert launcher.run() == 130
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    out = capsys.readouterr().out.splitlines()
    progress = [line for line in out if line.startswith("step ")]
    assert len(progress) == 1 and progress[0].startswith("step 1/2  reward 0.500")
    assert "stale-dropped 3" in progress[0] and " eta " in progress[0]
    assert "  skipped-steps 2  " in progress[0]  # optimizer steps with a gradient not finite
    # The learner is given twice its slowest step to finish the update under way and checkpoint.
    stopping = "agentgym train: stopping; the learner finishes the update under way and writes a "
    given = [line.removeprefix(stopping) for line in out if line.startswith(stopping)]
    assert len(given) == 1 and re.fullmatch(r"checkpoint \(given up to 40[01] s\)", given[0])
    assert 399 < processes.learner.waited[0] <= 402, processes.learner.waited
    ckpts = tmp_path / "checkpoints"
    assert out[-7].startswith("agentgym train: stopped at step 1/2 after ")
    assert out[-6:] == [
        f"  checkpoints   {ckpts} (newest: step 1)",
        f"  metrics       {tmp_path / 'metrics.jsonl'}",
        f"  trajectories  {tmp_path / 'trajectories.jsonl'}",
        f"  logs          {tmp_path / 'logs'}",
        f"  evaluate      agentgym eval {tmp_path / 'config.yaml'} --checkpoint {ckpts}",
        f"  resume        agentgym train --resume {tmp_path}",
    ]


@pytest.mark.slow
def test_overwrite_starts_a_clean_run_and_eval_writes_into_the_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    keep_one = [f"run_dir={run_dir}", "learner.keep_checkpoints=1", "eval.every=2",
                "eval.every_tasks=1"]  # fmt: skip
    first = agentgym("train", str(tiny_run.QUICKSTART), *tiny_run.sets(TINY + keep_one))
    assert first.returncode == 0, first.stderr[-3000:]
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["latest", "step_00000002"]  # step 1's checkpoint deleted after step 2's
    first_metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert "eval/avg@1" not in first_metrics[0]  # periodic eval every 2 steps, on 1 task
    assert first_metrics[1]["eval/tasks"] == 1 and 0 <= first_metrics[1]["eval/avg@1"] <= 1
    assert "  eval on 1 held-out tasks: avg@1 " in first.stdout
    steps = [line for line in first.stdout.splitlines() if line.startswith("step ")]
    assert [s.split()[1] for s in steps] == ["1/2", "2/2"] and all(" eta " in s for s in steps)
    out = first.stdout.splitlines()
    assert out[-6].startswith("agentgym train: finished at step 2/2 after ")
    assert out[-5:] == [
        f"  checkpoints   {run_dir / 'checkpoints'} (newest: step 2)",
        f"  metrics       {run_dir / 'metrics.jsonl'}",
        f"  trajectories  {run_dir / 'trajectories.jsonl'}",
        f"  logs          {run_dir / 'logs'}",
        f"  evaluate      agentgym eval {run_dir / 'config.yaml'} --checkpoint "
        f"{run_dir / 'checkpoints'}",
    ]
    assert "Writing model shards" not in first.stderr and "Loading weights" not in first.stderr
    saved = load_config(run_dir / "config.yaml")
    assert saved.run_dir == str(run_dir) and Path(saved.run_dir).is_absolute()

    evaluated = agentgym("eval", str(run_dir / "config.yaml"), "--checkpoint",
                         str(run_dir / "checkpoints"), "--limit", "2")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "evaluating step 2 (" in evaluated.stdout
    result = json.loads((run_dir / "eval" / "step_2.json").read_text())
    assert result["step"] == 2 and result["num_tasks"] == 2
    kept = (run_dir / "eval" / "step_2.episodes.jsonl").read_text().splitlines()
    assert len(kept) == len(result["episodes"]) and "record" not in result["episodes"][0]
    assert {json.loads(x)["task_id"] for x in kept} == {e["task_id"] for e in result["episodes"]}

    again = agentgym(
        "train", str(tiny_run.QUICKSTART), *tiny_run.sets(TINY + [f"run_dir={run_dir}"])
    )
    assert again.returncode == 1 and "already holds a training run" in again.stderr
    overwrite = tiny_run.sets(TINY + [f"run_dir={run_dir}", "learner.max_steps=1"])
    fresh = agentgym("train", str(tiny_run.QUICKSTART), *overwrite, "--overwrite")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "--overwrite: deleted config.yaml, metrics.jsonl, checkpoints/" in fresh.stdout
    assert "eval/step_2.json" in fresh.stdout and not (run_dir / "eval" / "step_2.json").exists()
    assert not (run_dir / "eval" / "step_2.episodes.jsonl").exists()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "latest",
        "step_00000001",
    ]
    assert (run_dir / "model").is_dir()  # the untrained model is an input, kept


@pytest.mark.slow
def test_ctrl_c_mid_run_checkpoints_and_the_printed_resume_command_continues(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", str(tiny_run.QUICKSTART),
           *tiny_run.sets(TINY + [f"run_dir={run_dir}", "learner.max_steps=200",
                         "learner.checkpoint_every=0"])]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        lines = []
        while not any(line.startswith("step ") for line in lines):
            line = proc.stdout.readline()
            assert line, f"no progress line; stderr: {proc.stderr.read()[-3000:]}"
            lines.append(line)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
        out, _ = proc.communicate()
    finally:
        watchdog.cancel()
    assert proc.returncode == 130
    out = out.splitlines()
    assert any(line.startswith("agentgym train: stopping; the learner finishes") for line in out)
    step = checkpoint_step(run_dir)
    assert step is not None and step >= 1
    # The closing block; a "note" line on steps without signal may follow it (a tiny model).
    head = next(i for i, line in enumerate(out) if line.startswith("agentgym train: stopped"))
    assert out[head].startswith(f"agentgym train: stopped at step {step}/200 after ")
    assert out[head + 1] == f"  checkpoints   {run_dir / 'checkpoints'} (newest: step {step})"
    assert out[head + 6] == f"  resume        agentgym train --resume {run_dir}"

    resumed = agentgym("train", "--resume", str(run_dir), "--set", f"learner.max_steps={step + 1}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from the checkpoint at step {step}" in resumed.stdout
    progress = [line for line in resumed.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == [f"{step + 1}/{step + 1}"]
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, step + 2))


def test_an_eval_under_other_settings_keeps_the_earlier_result(tmp_path):
    from agentgym.cli.eval import result_path

    path = tmp_path / "eval" / "step_30.json"
    cap8 = {"horizon_cap": 8, "num_tasks": 60, "k": 2, "temperature": 0.3, "rows": {}}
    assert result_path(path, cap8) == path  # nothing there yet
    path.parent.mkdir()
    path.write_text(json.dumps(cap8))
    assert result_path(path, dict(cap8)) == path  # the same settings again replace their own
    cap16 = {**cap8, "horizon_cap": 16}
    assert result_path(path, cap16) == tmp_path / "eval" / "step_30-2.json"
    (tmp_path / "eval" / "step_30-2.json").write_text(json.dumps(cap16))
    assert result_path(path, cap16) == tmp_path / "eval" / "step_30-2.json"
    more = {**cap8, "num_tasks": 150}
    assert result_path(path, more) == tmp_path / "eval" / "step_30-3.json"
    path.write_text("not json")  # an unreadable result is kept too
    assert result_path(path, cap8) == tmp_path / "eval" / "step_30-3.json"
    # as many tasks, but other ones (another level set): another result, kept
    levels = {**cap8, "episodes": [{"task_id": 3, "level": "level 3"}]}
    path.write_text(json.dumps({**cap8, "episodes": [{"task_id": 8, "level": "level 8"}]}))
    assert result_path(path, levels) == tmp_path / "eval" / "step_30-3.json"
    path.write_text(json.dumps(levels))
    assert result_path(path, dict(levels)) == path


def test_a_run_dir_in_use_is_refused_naming_its_holder(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, step=1)
    # another run's process holding the lock as lock_run_dir takes it (flock, who in the file)
    lock = run_dir / ".lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, time; "
         f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
         "os.write(fd, f'agentgym train (pid {os.getpid()})'.encode()); print('held', flush=True); "
         "time.sleep(120)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.name != ".lock"}
        resumed = agentgym("train", "--resume", str(run_dir))
        fresh = tiny_run.sets(TINY + [f"run_dir={run_dir}", "learner.max_steps=1"])
        over = agentgym("train", str(tiny_run.QUICKSTART), "--overwrite", *fresh)
        learner = agentgym("--resume", str(run_dir), module="agentgym.cli.learner")
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    for done in (resumed, over, learner):
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by agentgym train (pid {holder.pid}" in lines[0]
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.name != ".lock"} == before


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_kill_9_of_train_ends_its_children_and_no_second_run_overlaps_them(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", str(tiny_run.QUICKSTART),
           *tiny_run.sets(TINY + [f"run_dir={run_dir}", "learner.max_steps=200"])]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        while not (line := proc.stdout.readline()).startswith("step "):
            assert line, "no progress line"
        children = _children(proc.pid)
        assert len(children) == 2  # the learner and the actor
        second = agentgym("train", "--resume", str(run_dir))
        assert second.returncode == 1 and f"(pid {proc.pid}" in second.stderr, second.stderr
        proc.kill()  # SIGKILL: the launcher cannot stop its children itself
        proc.wait()
        proc.stdout.close()
        deadline = time.monotonic() + 90  # the learner writes a checkpoint first
        while any(map(_running, children)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_running, children)), "children outlived the launcher"
    finally:
        watchdog.cancel()
        for pid in _children(proc.pid) if proc.poll() is None else []:
            os.kill(pid, signal.SIGKILL)
    step = checkpoint_step(run_dir)
    resumed = agentgym("train", "--resume", str(run_dir), "--set", f"learner.max_steps={step + 1}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, step + 2)), "no step trained twice"


@pytest.mark.slow
def test_resume_passes_over_a_damaged_checkpoint_for_the_newest_intact(tmp_path):
    run_dir = tmp_path / "run"
    first = agentgym(
        "train", str(tiny_run.QUICKSTART), *tiny_run.sets(TINY + [f"run_dir={run_dir}"])
    )
    assert first.returncode == 0, first.stderr[-3000:]
    newest = run_dir / "checkpoints" / "step_00000002" / "model.safetensors"
    with newest.open("r+b") as f:  # 96 bytes overwritten, the size unchanged
        f.seek(newest.stat().st_size // 2)
        f.write(b"\xff" * 96)
    resumed = agentgym("train", "--resume", str(run_dir), "--set", "learner.max_steps=3")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "checkpoint step_00000002 is damaged (model.safetensors differs" in resumed.stdout
    assert "resuming from the checkpoint at step 1" in resumed.stdout
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]

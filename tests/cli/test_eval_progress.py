"""``agentgym eval`` shows its progress while it runs: tasks and episodes done of the total,
success so far and an ETA, as whole lines when its output is a log."""

from __future__ import annotations

import pytest
import tiny_run

pytest.importorskip("torch")

from agentgym.actor.policy import prepare_model  # noqa: E402
from agentgym.cli.main import main  # noqa: E402
from agentgym.config import load_config  # noqa: E402


def test_eval_reports_progress_per_task(tmp_path, capsys):
    overrides = [*tiny_run.TINY, f"run_dir={tmp_path / 'run'}", "tasks.eval.limit=5"]
    prepare_model(load_config(tiny_run.QUICKSTART, overrides))
    args = ["eval", str(tiny_run.QUICKSTART), *tiny_run.sets(overrides), "--set", "eval.samples=2"]
    assert main([*args, "--checkpoint", str(tmp_path / "run" / "model")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err  # captured output is no terminal: whole lines
    lines = err.splitlines()
    assert lines[0] == "eval: loading the policy"
    assert lines[1].startswith("eval babyai: 0/5 tasks (0/10 episodes), success so far -, ")
    last = lines[-1]
    assert last.startswith("eval babyai: 5/5 tasks (10/10 episodes), success so far 0.")
    assert last.endswith("eta 0s")

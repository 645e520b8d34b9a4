"""A training run with a level curriculum: the stage opens on success, and no episode of a level
runs before the learner has opened it."""

from __future__ import annotations

import json

import pytest
import tiny_run

pytest.importorskip("torch")

from agentgym.cli.main import main  # noqa: E402


@pytest.mark.slow
def test_levels_open_during_training_and_no_episode_runs_early(tmp_path):
    run_dir = tmp_path / "run"
    settings = [
        *tiny_run.TINY, f"run_dir={run_dir}", "learner.max_steps=6", "deterministic=true",
        "tasks.curriculum={stages: [[0], [1]], promote_at: 0.2, window: 8}",
    ]  # fmt: skip
    assert main(["train", str(tiny_run.QUICKSTART), *tiny_run.sets(settings), "--quiet"]) == 0
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    stages = [m["curriculum_stage/babyai"] for m in lines]
    assert stages[0] == 0 and stages[-1] == 1 and stages == sorted(stages)
    opened_at = lines[stages.index(1)]["version"]  # the version whose control opened level 1
    samples = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert samples
    for s in samples:
        if s["task_id"] % 40 == 1:
            assert min(s["versions"]) >= opened_at, s["versions"]
        else:
            assert s["task_id"] % 40 == 0
    assert any(s["task_id"] % 40 == 1 for s in samples)

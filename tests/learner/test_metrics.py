"""The metrics writer: JSONL lines, and the mirrors the config asks for (a missing package is a
config error at load, naming the field)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentgym.configtools import ConfigError, from_dict
from agentgym.learner.config import LearnerConfig
from agentgym.learner.metrics import MetricsWriter


def test_jsonl_lines_carry_step_time_and_finite_values(tmp_path):
    writer = MetricsWriter(tmp_path / "m.jsonl")
    writer.write(1, {"loss": 0.5, "bad": float("nan"), "n": 3})
    writer.close()
    (row,) = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["loss"] == 0.5 and row["bad"] is None and row["n"] == 3


@pytest.mark.parametrize(
    ("field", "value", "module"),
    [("tensorboard_dir", "tb", "tensorboard"), ("wandb_project", "p", "wandb")],
)
def test_a_mirror_without_its_package_is_refused_at_load(field, value, module):
    if importlib.util.find_spec(module) is not None:
        LearnerConfig(**{field: value})  # installed: accepted
        return
    with pytest.raises(ConfigError, match=f"{field}: needs the {module} package"):
        from_dict(LearnerConfig, {field: value})


def test_scalars_go_to_the_wandb_run_at_their_step(tmp_path):
    logged = []

    class Run:
        def log(self, data, step):
            logged.append((step, data))

        def finish(self):
            logged.append("finished")

    writer = MetricsWriter(tmp_path / "m.jsonl")
    writer._wandb = Run()
    writer.write(1, {"loss": 0.5, "text": "x", "bad": float("inf")})
    writer.write(2, {"loss": 0.25})
    writer.close()
    assert logged == [(1, {"loss": 0.5}), (2, {"loss": 0.25}), "finished"]


def test_an_offline_wandb_run_is_written_under_the_run_dir(tmp_path):
    pytest.importorskip("wandb")
    writer = MetricsWriter(
        tmp_path / "m.jsonl",
        wandb={"project": "agentgym-test", "name": "run", "dir": tmp_path, "mode": "offline",
               "id": "agentgym-test-run"},
    )  # fmt: skip
    writer.write(1, {"loss": 0.5})
    writer.close()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*-agentgym-test-run")
    assert list(run_dir.glob("*.wandb"))

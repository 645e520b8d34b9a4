"""``deterministic: true``: two runs of one config give the same metrics at every step."""

from __future__ import annotations

import json

import pytest
import tiny_run

pytest.importorskip("torch")

from agentgym.cli.main import main  # noqa: E402

# the quickstart itself, four steps, two actors. Without the mode (``--sync`` alone) two such
# runs may part, by timing: an episode's behaviour log-probs depend on which other requests
# share its engine batch (seen at the second step in some pairs of runs), and each step's
# groups arrive from the two actors in either order
SETTINGS = ["learner.max_steps=4", "learner.checkpoint_every=4", "actor.num_actors=2",
            "deterministic=true"]  # fmt: skip
TIMING = ("time", "step_time_s", "tokens_per_s")


def _metrics(run_dir) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in m.items() if k not in TIMING and not k.startswith("actors/")}
        for m in lines
    ]


@pytest.mark.slow
def test_two_deterministic_runs_give_the_same_metrics(tmp_path):
    runs = []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        args = tiny_run.sets([*SETTINGS, f"run_dir={run_dir}"])
        assert main(["train", str(tiny_run.QUICKSTART), *args, "--quiet"]) == 0
        runs.append(_metrics(run_dir))
    assert len(runs[0]) == 4 and runs[0] == runs[1]
    assert any(m["loss/policy"] != 0 for m in runs[0])  # the runs did train


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_resumed_deterministic_run_writes_the_metrics_of_an_uninterrupted_one(tmp_path, ranks):
    """The checkpoint keeps how far each actor's task stream was trained on: the actors of
    the resumed run sample the groups the uninterrupted run sampled next (under other launch
    numbers, so under other ids), and every metric but timings and actor counts agrees."""
    settings = [*SETTINGS[1:], "learner.checkpoint_every=2", f"learner.ranks={ranks}"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for run_dir, steps in ((whole, 6), (cut, 4)):
        args = tiny_run.sets([*settings, f"learner.max_steps={steps}", f"run_dir={run_dir}"])
        assert main(["train", str(tiny_run.QUICKSTART), *args, "--quiet"]) == 0
    more = tiny_run.sets(["learner.max_steps=6"])
    assert main(["train", "--resume", str(cut), *more, "--quiet"]) == 0
    resumed, uninterrupted = _metrics(cut), _metrics(whole)
    assert [m["step"] for m in resumed] == list(range(1, 7))
    assert resumed == uninterrupted


def test_deterministic_needs_the_hf_engine():
    from agentgym.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="deterministic: needs engine.backend hf"):
        load_config(
            tiny_run.QUICKSTART,
            ["deterministic=true", "engine.backend=vllm", "model.menu_policy=false",
             "actor.reply_format=action_line", "engine.max_new_tokens=8"],
        )  # fmt: skip

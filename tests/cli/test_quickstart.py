"""The quickstart learns: held-out success after RL against the same run's untrained policy.

Both tests run ``agentgym train configs/quickstart.yaml`` for real (learner and actor
processes, async) and evaluate the run's untrained model and its checkpoint on held-out tasks.
A learner that trains the wrong way (an advantage of the wrong sign: issue 34) still trains and
exits 0; these tests fail it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_run

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.cli.eval import evaluate  # noqa: E402
from agentgym.cli.main import main  # noqa: E402
from agentgym.config import load_config  # noqa: E402


def train_and_evaluate(run_dir: Path, seed: int, *settings: str) -> tuple[dict, dict]:
    """(untrained row, trained row) of the quickstart trained with ``settings``."""
    sets = [f"run_dir={run_dir}", f"actor.seed={seed}", f"learner.seed={seed}", *settings]
    code = main(["train", str(tiny_run.QUICKSTART), *tiny_run.sets(sets), "--quiet"])
    assert code == 0, (run_dir / "logs" / "learner.log").read_text()[-3000:]
    config = load_config(run_dir / "config.yaml")
    untrained = evaluate(config, run_dir / "model")["rows"]["babyai"]
    trained = evaluate(config, run_dir / "checkpoints")["rows"]["babyai"]
    return untrained, trained


SHORT = ["learner.max_steps=8", "learner.checkpoint_every=8", "learner.horizon.every=2",
         "tasks.eval.limit=20"]  # fmt: skip
"""The quickstart cut to 8 steps (the cap still goes 2, 3, 4) and 20 held-out tasks x 4."""


def test_eight_quickstart_steps_beat_the_untrained_policy(tmp_path):
    """8 steps of the quickstart, held-out Avg@4 on 20 tasks x 4 (30-80 s on a busy 2-core box).
    Measured over seeds 0-7 and seed 0 again (async, so runs of one seed vary): untrained
    0.14-0.20, trained 0.49-0.73 (mean 0.65), gains +0.35 to +0.56 (mean +0.49, sd 0.07; an
    earlier build's nine runs: +0.24 to +0.58). The bar, +0.15, is 5 sd under the mean gain.
    With the GRPO advantage's sign flipped the trained policy scores 0.05 against 0.16."""
    untrained, trained = train_and_evaluate(tmp_path / "run", 0, *SHORT)
    assert untrained["episodes"] == trained["episodes"] == 80
    assert trained["avg@4"] >= untrained["avg@4"] + 0.15, (untrained, trained)


@pytest.mark.slow
def test_the_readme_quickstart_figures():
    """The README's quickstart table and its spread over seeds (bench/RESULTS.md, "End to end:
    quickstart training"): untrained Avg@4 0.265 on the 50 held-out tasks (seed 0; eval is
    seeded, so it is the same on every run), trained 0.949 on average over seeds 0-3,
    0.920-0.970 per seed.
    Those are one async run per seed, and runs of one seed vary with timing: a second set gave
    0.990, 0.855, 0.995, 0.970 (mean 0.953), a single seed-0 run 0.980. So the bars are what
    that spread supports (sd ~0.04 per run): every seed >= 0.80 and their mean >= 0.90. Four
    whole quickstart runs and eight evals: 3.5-6 minutes on the 2-core box under load."""
    import tempfile

    trained = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(4):
            untrained, row = train_and_evaluate(Path(tmp) / f"qs-{seed}", seed)
            assert row["tasks"] == 50 and row["episodes"] == 200
            if seed == 0:
                assert untrained["avg@4"] == pytest.approx(0.265, abs=0.011), untrained
            trained.append(row["avg@4"])
    assert min(trained) >= 0.80, trained
    assert sum(trained) / len(trained) >= 0.90, trained

"""The learner config schema: nested YAML overrides, unknown keys named with their file."""

import pytest

pytest.importorskip("torch")

from agentgym.configtools import ConfigError, from_dict, load_yaml, merge  # noqa: E402
from agentgym.learner.config import LearnerConfig  # noqa: E402


def test_nested_overrides(tmp_path):
    path = tmp_path / "learner.yaml"
    path.write_text(
        "groups_per_step: 8\n"
        "loss: {clip_eps_high: 0.28, behaviour_weight: sequence}\n"
        "optim: {lr: 1, betas: [0.9, 0.95]}\n"
        "horizon: {schedule: stepwise, rounds: [6, 13, 20], every: 100}\n"
    )
    cfg = load_yaml(LearnerConfig, path)
    assert cfg.groups_per_step == 8 and cfg.loss.clip_eps_high == 0.28
    assert cfg.loss.clip_eps == 0.2  # untouched default
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.optim.betas == (0.9, 0.95) and cfg.horizon.rounds == (6, 13, 20)
    again = merge(cfg, {"loss": {"kl_coef": 0.1}}, "cli")
    assert again.loss.kl_coef == 0.1 and again.loss.clip_eps_high == 0.28


def test_unknown_and_ill_typed_keys_are_errors(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("loss:\n  clip_epss: 0.3\n")
    with pytest.raises(ConfigError, match=r"loss\.clip_epss: unknown key .*bad\.yaml"):
        load_yaml(LearnerConfig, path)
    with pytest.raises(ConfigError, match="aggregation: must be one of"):
        from_dict(LearnerConfig, {"loss": {"aggregation": "mean"}})
    with pytest.raises(ConfigError, match="bf16: must be bool"):
        from_dict(LearnerConfig, {"bf16": "yes"})
    with pytest.raises(ConfigError, match="micro_batch_size: must be >= 1"):
        from_dict(LearnerConfig, {"micro_batch_size": 0})


def test_bad_step_counts_and_rates_are_refused_at_load():
    from pathlib import Path

    from agentgym.config import load_config
    from agentgym.configtools import ConfigError

    quickstart = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    cases = {
        "learner.max_steps=-5": "learner.max_steps: must be >= 1 (or null: no limit), got -5",
        "learner.optim.lr=-0.1": "learner.optim.lr: must be > 0, got -0.1",
        "learner.optim.grad_clip=0": "learner.optim.grad_clip: must be > 0 (or null), got 0.0",
        "actor.group_size=0": "actor.group_size: must be >= 1, got 0",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError) as raised:
            load_config(quickstart, [override])
        assert raised.value.problems == [f"{message} (--set {override})"]

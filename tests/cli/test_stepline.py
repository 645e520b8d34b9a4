"""The step line shows what the step measured and marks what it did not: no success carried
over from an earlier step for a level the step had no episode of, throughput only where two
steps give it an interval, the step's own staleness, invalid replies and the share of groups
with a learning signal; a run whose steps go by without signal is warned about."""

from __future__ import annotations

import numpy as np

from agentgym.cli.stepline import SignalWatch, StepLine
from agentgym.learner.learner import _episode_metrics, signal_share
from agentgym.transport.wire import Trajectory


def record(step: int, **extra) -> dict:
    return {"step": step, "time": 100.0 + 2 * step, "reward/all": 0.5, "success/all": 0.5,
            "horizon_cap": 4, "dropped_stale_total": 0, **extra}  # fmt: skip


def test_a_level_without_episodes_this_step_is_marked_not_carried_over():
    line = StepLine(total=10)
    first = line.format(record(1, **{"success/babyai": 0.5, "success/babyai/level_0": 0.25,
                                     "success/babyai/level_1": 0.75}))  # fmt: skip
    assert "success 0.500 (level_0 0.250, level_1 0.750)" in first
    second = line.format(record(2, **{"success/babyai": 0.0, "success/babyai/level_0": 0.0}))
    assert "(level_0 0.000, level_1 -)" in second


def test_several_envs_show_each_env_and_mark_a_missing_one():
    line = StepLine(total=None)
    line.format(record(1, **{"success/babyai": 0.5, "success/textcraft": 0.25}))
    text = line.format(record(2, **{"success/babyai": 1.0}))
    assert text.startswith("step 2/?  ") and "(babyai 1.000, textcraft -)" in text


def test_rates_are_measured_between_steps_and_marked_before():
    line = StepLine(total=3)
    first = line.format(record(1, received_total=16, tokens=4000))
    assert "samples/s -  tokens/s -" in first
    second = line.format(record(2, received_total=48, tokens=6000))  # 2 s later
    assert "samples/s 16.0  tokens/s 3000" in second


def test_staleness_invalid_and_signal_are_the_steps_own():
    line = StepLine(total=3)
    line.format(record(1, **{"staleness/0": 16}))
    text = line.format(record(2, **{"staleness/1": 8, "staleness/3": 8, "invalid/all": 0.125,
                                    "signal/all": 0.75}))  # fmt: skip
    assert "staleness 2.00" in text and "invalid 0.125" in text and "signal 0.75" in text
    assert "invalid -" in line.format(record(3))  # a learner that measured none: not 0


def test_steps_without_signal_are_warned_about():
    watch = SignalWatch("grpo")
    said = [watch.observe({"step": s, "signal/all": 0.0, "grad_norm": 0.0}) for s in (1, 2, 3)]
    assert said[:2] == [None, None]
    assert said[2].startswith("agentgym train: warning: steps 1-3 had no group whose")
    assert watch.observe({"step": 4, "signal/all": 0.5}) is None
    assert watch.observe({"step": 5, "signal/all": 0.0}) is None  # a new streak starts
    assert watch.silent_steps == 4
    # equal rewards still carry a signal under global whitening: no warning
    other = SignalWatch("reinforce_pp")
    assert all(other.observe({"step": s, "signal/all": 0.0}) is None for s in range(1, 9))


def trajectory(group: int, reward: float, turns: int, invalid: int) -> Trajectory:
    n = 6
    return Trajectory(
        episode_id=group * 10 + int(reward * 3) + turns, group_id=group, group_size=2,
        env="babyai", task_id=group, horizon_cap=8,
        turn_versions=np.zeros(turns, np.int32), tokens=np.arange(n, dtype=np.int32),
        logprobs=np.zeros(n, np.float32), loss_mask=np.ones(n, np.uint8), prompt_len=1,
        reward=reward, success=reward > 0, truncation="", num_turns=turns,
        invalid_replies=invalid,
    )  # fmt: skip


def test_the_learner_measures_invalid_replies_and_signal():
    ts = [trajectory(1, 0.0, 4, 1), trajectory(1, 1.0, 4, 0),  # rewards differ: signal
          trajectory(2, 0.0, 2, 2), trajectory(2, 0.0, 2, 0)]  # fmt: skip
    metrics = _episode_metrics(ts)
    assert metrics["invalid/all"] == 3 / 12
    assert metrics["signal/all"] == metrics["signal/babyai"] == 0.5
    assert signal_share(ts[2:]) == 0.0

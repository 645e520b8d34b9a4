"""Horizon schedules: every kind, the shipped configs, and exact resume at a stage boundary."""

from pathlib import Path

import pytest

from agentgym.configtools import ConfigError, from_dict, load_yaml
from agentgym.horizon import HorizonConfig, HorizonController, HorizonStats

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "horizon"
NONE = HorizonStats(0, 0, 0)


def run(ctl: HorizonController, n: int, stats=NONE) -> list:
    caps = []
    for _ in range(n):
        ctl.observe(stats(ctl) if callable(stats) else stats)
        caps.append(ctl.cap)
    return caps


def test_fixed():
    ctl = HorizonController(HorizonConfig(cap=7))
    assert ctl.cap == 7 and run(ctl, 5) == [7] * 5
    assert HorizonController(HorizonConfig()).cap is None


def test_stepwise_changes_exactly_at_stage_boundaries():
    ctl = HorizonController(HorizonConfig(schedule="stepwise", rounds=(6, 13, 20), every=3))
    assert ctl.cap == 6
    assert run(ctl, 10) == [6, 6, 13, 13, 13, 20, 20, 20, 20, 20]


def test_linear_stops_at_max():
    cfg = HorizonConfig(schedule="linear", start=2, delta=3, every=2, max_cap=9)
    ctl = HorizonController(cfg)
    assert ctl.cap == 2 and run(ctl, 8) == [2, 5, 5, 8, 8, 9, 9, 9]


@pytest.mark.parametrize(
    ("name", "rounds", "every"),
    [
        ("babyai", (6, 13, 20), 100),
        ("textcraft", (10, 20, 30), 100),
        ("sciworld", (10, 20, 30), 100),
        ("searchqa", (5, 8, 10), 100),
        ("webarena", (8, 12, 15), 80),
    ],
)
def test_shipped_schedules(name, rounds, every):
    cfg = load_yaml(HorizonConfig, CONFIGS / f"{name}.yaml")
    assert cfg == HorizonConfig(schedule="stepwise", rounds=rounds, every=every)
    ctl = HorizonController(cfg)
    caps = [ctl.cap, *run(ctl, 3 * every)]
    assert caps[every - 1] == rounds[0] and caps[every] == rounds[1]
    assert caps[2 * every - 1] == rounds[1] and caps[2 * every] == rounds[2]


@pytest.mark.parametrize(
    "cfg",
    [
        HorizonConfig(schedule="stepwise", rounds=(6, 13, 20), every=4),
        HorizonConfig(schedule="linear", start=1, delta=2, every=4, max_cap=20),
        HorizonConfig(schedule="adaptive", start=3, window=4, raise_truncation=0.5),
    ],
)
@pytest.mark.parametrize("stop_at", [4, 8, 5])
def test_resume_gives_the_uninterrupted_schedule(cfg, stop_at):
    # a climbing success rate with many truncations, so the adaptive rule moves too
    def stats(ctl):
        return HorizonStats(10, 8, min(10, ctl.steps // 2))

    whole = HorizonController(cfg)
    expected = run(whole, 16, stats)
    first = HorizonController(cfg)
    head = run(first, stop_at, stats)
    state = first.state_dict()
    resumed = HorizonController(cfg)
    resumed.load_state_dict(state)
    assert resumed.cap == head[-1]
    assert head + run(resumed, 16 - stop_at, stats) == expected
    assert len(set(expected)) > 1


def adaptive(**kw) -> HorizonController:
    base = dict(schedule="adaptive", start=4, delta=2, max_cap=8, window=4)
    return HorizonController(HorizonConfig(**{**base, **kw}))


def test_adaptive_raises_on_truncation_with_rising_success():
    ctl = adaptive()
    rising = iter([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9])
    caps = run(ctl, 12, lambda c: HorizonStats(10, 6, next(rising)))
    assert caps == [4, 4, 4, 6, 6, 6, 6, 8, 8, 8, 8, 8]


def test_adaptive_holds_when_success_is_flat_or_truncation_rare():
    flat = adaptive()
    assert run(flat, 12, HorizonStats(10, 9, 5)) == [4] * 12
    rising = iter(range(12))
    few_truncated = adaptive()
    assert run(few_truncated, 12, lambda c: HorizonStats(10, 1, next(rising) % 11)) == [4] * 12


def test_adaptive_ignores_episodes_from_older_caps():
    stats = HorizonStats.from_episodes(
        [(4, True, False), (6, True, True), (None, False, True), (4, False, True)], cap=4
    )
    assert stats == HorizonStats(2, 1, 1)


def test_adaptive_lowers_after_collapse_but_never_below_mastered():
    ctl = adaptive(max_cap=10, mastery_success=0.7, collapse_drop=0.2)
    # master cap 4 while rising with truncation: 0.6, 0.7, 0.8, 0.9 -> mean 0.75 >= 0.7
    run(ctl, 4, lambda c: HorizonStats(10, 6, 6 + c.steps % 4))
    assert ctl.cap == 6 and ctl.mastered == 4
    # collapse at cap 6: success 0.1 < 0.75 - 0.2 -> back to 4, and not lower
    assert run(ctl, 4, HorizonStats(10, 0, 1)) == [6, 6, 6, 4]
    assert run(ctl, 8, HorizonStats(10, 0, 0)) == [4] * 8


def test_load_state_rejects_other_schedule():
    state = HorizonController(HorizonConfig(cap=3)).state_dict()
    with pytest.raises(ValueError, match="stepwise"):
        HorizonController(HorizonConfig(schedule="stepwise", rounds=(1,))).load_state_dict(state)


def test_bad_configs_are_errors_naming_the_key(tmp_path):
    bad = tmp_path / "h.yaml"
    bad.write_text("schedule: stepwise\nrounds: [1, 2]\nevry: 3\n")
    with pytest.raises(ConfigError, match=r"evry: unknown key.*h\.yaml"):
        load_yaml(HorizonConfig, bad)
    with pytest.raises(ConfigError, match="schedule: must be one of"):
        from_dict(HorizonConfig, {"schedule": "sideways"})
    with pytest.raises(ConfigError, match="rounds"):
        from_dict(HorizonConfig, {"schedule": "stepwise"})
    with pytest.raises(ConfigError, match=r"every: must be int"):
        from_dict(HorizonConfig, {"every": "3"})

"""The level curriculum: stages open on success, actors draw only open levels, the learner sends
the stage and keeps it across a resume, and configs that cannot work are refused at load."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentgym.actor.actor import Actor, ActorSettings, EnvDraw
from agentgym.config import ConfigError, load_config
from agentgym.curriculum import Curriculum, CurriculumConfig, open_task_ids
from agentgym.transport.endpoints import Endpoints
from agentgym.transport.wire import Control, decode_control, encode_control

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
STAGES = CurriculumConfig(stages=((0,), (1, 2), (3,)), promote_at=0.75, window=4)


def level(lvl: int, successes: list[bool]) -> list[tuple[int, bool]]:
    """Episodes of BabyAI level ``lvl`` (task ids lvl, lvl + 40, ...) with these successes."""
    return [(lvl + 40 * i, s) for i, s in enumerate(successes)]


def test_a_stage_opens_when_the_window_reaches_the_threshold_and_the_count_restarts():
    c = Curriculum(STAGES)
    assert not c.observe(level(0, [True, True, True]))  # 3 of a window of 4: too few yet
    assert c.observe(level(0, [False])) is True and c.stage == 1  # 3/4 = 0.75
    assert c.success == 0.0  # counting starts over at the new stage
    assert not c.observe(level(1, [True, False]) + level(2, [False, True, True]))  # last 4: 2/4
    assert c.observe(level(2, [True])) and c.stage == 2  # last 4: 3/4
    assert not c.observe(level(3, [True] * 10)) and c.stage == 2  # the last stage stays
    again = Curriculum(STAGES)
    again.load_state_dict(c.state_dict())
    assert again.stage == 2 and again.success == c.success


def test_a_stage_is_judged_only_on_its_own_levels():
    """An async run keeps training on episodes of earlier levels after a stage opened (sampled
    before it opened, or drawn among all open levels): they never count for it, so the next
    stage cannot open before an episode of the new levels was seen."""
    c = Curriculum(STAGES)
    assert c.observe(level(0, [True] * 4)) and c.stage == 1
    assert not c.observe(level(0, [True] * 16)) and c.stage == 1 and c.success == 0.0
    assert not c.observe(level(3, [True] * 8)) and c.stage == 1  # a level of a later stage
    assert not c.observe(level(1, [True, True]) + level(0, [True] * 8))  # 2 of 4 so far
    assert c.observe(level(2, [False, True])) and c.stage == 2  # levels 1, 2: 3 of 4


def test_open_task_ids_keep_the_open_levels():
    ids = list(range(200))
    assert {t % 40 for t in open_task_ids(ids, STAGES, 0)} == {0}
    assert {t % 40 for t in open_task_ids(ids, STAGES, 1)} == {0, 1, 2}
    assert {t % 40 for t in open_task_ids(ids, STAGES, 2)} == {0, 1, 2, 3}


def test_curricula_that_cannot_work_are_refused_at_load():
    def problems(*items):
        with pytest.raises(ConfigError) as e:
            load_config(QUICKSTART, list(items))
        return "\n".join(e.value.problems)

    assert "must list at least two non-empty stages" in problems("tasks.curriculum={stages: [[0]]}")
    assert "lists a level twice" in problems("tasks.curriculum={stages: [[0], [0, 1]]}")
    assert "leaves out ([0, 7])" in problems("tasks.curriculum={stages: [[0], [7]]}")
    assert "promote_at: must be in (0, 1]" in problems(
        "tasks.curriculum={stages: [[0], [1]], promote_at: 0}"
    )
    textcraft = problems(
        "env.name=textcraft", "tasks.train.levels=[]", "tasks.eval.levels=[]",
        "tasks.curriculum={stages: [[0], [1]]}", "model.menu_policy=false",
        "actor.reply_format=action_line", "engine.max_new_tokens=8",
    )  # fmt: skip
    assert "tasks.curriculum: stages BabyAI levels: babyai only" in textcraft
    assert "env_mix.mode: by_failure needs two or more envs" in problems("env_mix.mode=by_failure")


def test_the_actor_draws_only_from_the_stage_the_learner_sent():
    settings = ActorSettings((EnvDraw("babyai", tuple(range(400)), curriculum=STAGES),))
    actor = Actor(settings, None, None, None, None, Endpoints())
    (draw,) = settings.draws
    actor._control = Control(0, {"": 5})
    assert {t % 40 for t in actor._open_tasks(draw)} == {0}
    actor._control = decode_control(encode_control(Control(1, {"": 5}, env_stages={"babyai": 1})))
    rng = random.Random(0)
    drawn = {rng.choice(actor._open_tasks(draw)) % 40 for _ in range(200)}
    assert drawn == {0, 1, 2}


def test_env_weights_move_toward_the_envs_not_yet_mastered():
    from agentgym.curriculum import EnvMix, EnvMixConfig

    mix = EnvMix(EnvMixConfig(mode="by_failure", window=4, floor=0.25), {"a": 1.0, "b": 2.0})
    assert mix.weights() == {"a": 1.0, "b": 2.0}  # nothing seen yet: the configured weights
    mix.observe([("a", True)] * 4 + [("b", True), ("b", False)] + [("c", True)])
    assert mix.weights() == {"a": 0.25, "b": 1.0}  # a mastered: its floor; b half solved
    again = EnvMix(mix.config, mix.base)
    again.load_state_dict(mix.state_dict())
    assert again.weights() == mix.weights()
    fixed = EnvMix(EnvMixConfig(), {"a": 1.0, "b": 2.0})
    fixed.observe([("a", True)] * 10)
    assert fixed.weights() == {"a": 1.0, "b": 2.0}


def test_actors_draw_envs_with_the_weights_the_learner_sent():
    from collections import Counter

    draws = (EnvDraw("babyai", (0,), 1.0, 4), EnvDraw("textcraft", (0,), 1.0, 4))
    settings = ActorSettings(draws)
    actor = Actor(settings, None, {"babyai": None, "textcraft": None}, None, None, Endpoints())
    sent = Control(3, {"": 5}, env_weights={"babyai": 0.1, "textcraft": 0.9})
    actor._control = decode_control(encode_control(sent))
    rng = random.Random(0)
    picks = Counter(actor._draw_env(rng).name for _ in range(2000))
    assert 0.05 < picks["babyai"] / 2000 < 0.15

"""BabyAI-text: the Rust env against the Python reference on minigrid, text for text.

Worlds come from minigrid (level, seed), are exported as layouts and loaded into the Rust env
with ``layout=``; both sides then play the same random valid high-level actions and must give
identical observations, rewards and dones. Also: task ids are deterministic, options are checked.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("minigrid")

import gymnasium as gym  # noqa: E402

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.reference import minigrid_layout  # noqa: E402
from agentgym.envs.reference.babyai_text import LEVELS, BabyAIText  # noqa: E402
from agentgym.envs.reference.minigrid_layout import make_level  # noqa: E402


def minigrid_session(task_id: int, primitive: bool = False) -> BabyAIText:
    """The reference session on AgentGym task `task_id`, reset."""
    env = gym.make(LEVELS[task_id % 40])
    env.reset(seed=task_id // 40)
    return BabyAIText(env, primitive)


def rust_twin(session: BabyAIText, primitive: bool = False) -> tuple[EnvPool, int]:
    """A one-session Rust pool replaying the reference session's current world."""
    layout = minigrid_layout.layout_json(session.env)
    pool = EnvPool("babyai", layout=layout, primitive=primitive)
    (sid,) = pool.create(1)
    return pool, sid


def play_both(task_id: int, steps: int, rng: random.Random, primitive: bool = False) -> int:
    """Plays up to `steps` random valid actions on both sides, asserting identical results.
    Returns the number of steps played."""
    ref = minigrid_session(task_id, primitive)
    pool, sid = rust_twin(ref, primitive)
    where = f"task {task_id} ({LEVELS[task_id % 40]})"
    assert pool.reset([sid], [0]) == [ref.start()], f"reset text differs on {where}"
    for k in range(steps):
        actions = ref.available_actions()
        assert pool.available_actions([sid]) == [actions], f"menus differ on {where}, step {k}"
        action = rng.choice(actions)
        observation, reward, done = ref.step(action)
        batch = pool.step([sid], [action])
        context = f"{where}, step {k}, action {action!r}"
        assert batch.errors == [None], context
        assert batch.observations == [observation], context
        assert batch.rewards[0] == np.float32(reward), context
        assert bool(batch.dones[0]) == done, context
        if done:
            return k + 1
    return steps


@pytest.mark.parametrize("level", range(40), ids=lambda i: LEVELS[i].split("-")[1])
def test_text_parity_on_every_level(level: int) -> None:
    play_both(level + 40 * (level % 3), steps=12, rng=random.Random(level))


@pytest.mark.slow
@pytest.mark.parametrize("level", range(40), ids=lambda i: LEVELS[i].split("-")[1])
def test_text_parity_many_seeds(level: int) -> None:
    rng = random.Random(1000 + level)
    for seed in range(2, 12):
        play_both(level + 40 * seed, steps=40, rng=rng)


def test_text_parity_reaches_episode_ends() -> None:
    # GoTo levels with few objects end quickly under random valid actions: dones and success
    # rewards must agree, not only mid-episode text.
    rng = random.Random(7)
    ends = 0
    for seed in range(8):
        played = play_both(0 + 40 * seed, steps=40, rng=rng)
        ends += played < 40
    assert ends >= 3


@pytest.mark.parametrize("task_id", [0, 11, 23, 31])
def test_primitive_mode_parity(task_id: int) -> None:
    play_both(task_id, steps=40, rng=random.Random(task_id), primitive=True)


def test_same_task_same_episode_different_seed_different() -> None:
    a, b = EnvPool("babyai"), EnvPool("babyai")
    ids_a, ids_b = a.create(3), b.create(3)
    tasks = [5, 45, 5 + 40 * 77]  # one level, three seeds
    first = a.reset(ids_a, tasks)
    assert b.reset(ids_b, tasks) == first
    assert first[0] != first[1] and first[0] != first[2]
    rng_a, rng_b = random.Random(3), random.Random(3)
    for _ in range(20):
        acts_a = [rng_a.choice(m) for m in a.available_actions(ids_a)]
        acts_b = [rng_b.choice(m) for m in b.available_actions(ids_b)]
        assert acts_a == acts_b
        ba, bb = a.step(ids_a, acts_a), b.step(ids_b, acts_b)
        assert ba.observations == bb.observations
        live = [i for i, d in zip(ids_a, ba.dones, strict=True) if not d]
        if len(live) < len(ids_a):
            break


def test_every_level_resets_with_its_goal() -> None:
    pool = EnvPool("babyai")
    ids = pool.create(40)
    observations = pool.reset(ids, list(range(40)))
    infos = pool.info(ids)
    for k, (obs, info) in enumerate(zip(observations, infos, strict=True)):
        assert obs.startswith("Your goal: "), LEVELS[k]
        assert "\nAvailable actions: [" in obs and obs.endswith('"check available actions"]')
        # AgentGym's GoToObjS6-v0 is minigrid 3.x's GoToObjS4-v0 (see make_level)
        assert make_level(info["level"]).spec.id == make_level(LEVELS[k]).spec.id, info["level"]
        reference = make_level(LEVELS[k])
        minigrid_layout.reset_quietly(reference, 0)
        assert info["max_steps"] == reference.max_steps, k


def test_go_to_obj_s6_is_minigrid_2_3_1s_four_cell_room() -> None:
    pool = EnvPool("babyai")
    ids = pool.create(8)
    pool.reset(ids, [3 + 40 * s for s in range(8)])  # level 3 over 8 seeds
    for info in pool.info(ids):
        assert info["level"] == "BabyAI-GoToObjS6-v0"
        assert info["max_steps"] == 16
        # a 4-cell room inside the outer wall: positions 1..2 on each axis
        assert all(1 <= c <= 2 for c in info["agent_pos"]), info["agent_pos"]


def test_bad_options_are_rejected() -> None:
    for options in ({"colour": "red"}, {"primitive": "maybe"}, {"num_seeds": 0}):
        with pytest.raises(ValueError):
            EnvPool("babyai", **options)
    assert EnvPool("babyai", num_seeds=3).num_tasks == 120


def test_garbage_actions_explain_themselves() -> None:
    pool = EnvPool("babyai")
    (sid,) = pool.create(1)
    pool.reset([sid], [3])
    for action in ["", "   ", "go to the moon", "pickup red ball 99", "\x00\x01", "é" * 200]:
        batch = pool.step([sid], [action])
        assert batch.errors == [None]
        assert not batch.dones[0] and batch.rewards[0] == 0.0
        assert "\nAvailable actions: [" in batch.observations[0]

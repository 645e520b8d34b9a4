"""BabyAI task ids are AgentGym's: the Rust env's world for a task id is minigrid's world for
AgentGym's level and seed (``data_idx % 40``, ``data_idx // 40``, ``env.reset(seed=...)``).

Each case resets minigrid as AgentGym's server does (twice, with minigrid 2.3.1's kept locked
room; ``minigrid_layout.reset_like_agentgym``) and compares, for the same task id, the
Rust env's grid (every cell's object, colour and door state), agent position and direction,
carried object, mission, step limit and first observation (the reference text session on
minigrid, ``babyai_text.make_session``) with it.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("minigrid")

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.reference.babyai_text import LEVELS, make_session  # noqa: E402
from agentgym.envs.reference.minigrid_layout import (  # noqa: E402
    make_level,
    reset_like_agentgym,
    state,
)

SEEDS_PER_LEVEL = 25
_KIND = {"wall": "W", "floor": ".", "key": "K", "ball": "A", "box": "B", "goal": "G", "lava": "V"}
_COLOR = {"red": "R", "green": "G", "blue": "B", "purple": "P", "yellow": "Y", "grey": "E"}


def _letter(obj: Any) -> str:
    if obj.type == "door":
        return "d" if obj.is_open else ("L" if obj.is_locked else "D")
    return _KIND[obj.type]


def _grid_rows(env: Any) -> list[str]:
    """minigrid's grid in the Rust world's ``grid`` format (two letters a cell)."""
    grid = env.grid
    rows = []
    for y in range(grid.height):
        cells = (grid.get(x, y) for x in range(grid.width))
        rows.append("".join("  " if o is None else _letter(o) + _COLOR[o.color] for o in cells))
    return rows


def _minigrid_world(task_id: int) -> dict[str, Any]:
    """What AgentGym's server builds for ``data_idx = task_id``, in the Rust info's terms."""
    env = make_level(LEVELS[task_id % len(LEVELS)])
    reset_like_agentgym(env, task_id // len(LEVELS))
    facts = {key: value for key, value in state(env).items() if key != "step_count"}
    rows = _grid_rows(env)
    return {**facts, "grid": rows, "mission": env.mission, "max_steps": int(env.max_steps)}


def _rust_worlds(task_ids: list[int], **options: str) -> tuple[list[str], list[dict[str, Any]]]:
    pool = EnvPool("babyai", threads=1, **options)
    ids = pool.create(len(task_ids))
    observations = pool.reset(ids, task_ids)
    return observations, pool.info(ids)


def _compare(task_ids: list[int]) -> dict[str, int]:
    """Matches per level name; a mismatch fails with the first differing field."""
    observations, infos = _rust_worlds(task_ids)
    matched: dict[str, int] = {}
    for task_id, observation, info in zip(task_ids, observations, infos, strict=True):
        expected = _minigrid_world(task_id)
        got = {key: info[key] for key in expected}
        where = f"task {task_id} ({LEVELS[task_id % len(LEVELS)]})"
        for key in expected:
            assert got[key] == expected[key], f"{where} {key}: {got[key]!r} != {expected[key]!r}"
        assert observation == make_session(task_id)[1], f"{where} first observation"
        level = LEVELS[task_id % len(LEVELS)]
        matched[level] = matched.get(level, 0) + 1
    return matched


def _short(level: int) -> str:
    return LEVELS[level].removeprefix("BabyAI-")


@pytest.mark.parametrize("level", range(len(LEVELS)), ids=_short)
def test_every_level_builds_minigrids_world(level: int) -> None:
    task_ids = [level + len(LEVELS) * seed for seed in range(SEEDS_PER_LEVEL)]
    assert _compare(task_ids) == {LEVELS[level]: SEEDS_PER_LEVEL}


def test_large_ids_play_their_own_seed_like_agentgym() -> None:
    # AgentGym has no last data_idx: 40_000_007 is level 7 with seed 1_000_000, not task 7;
    # seeds past 2**32 take two words of SeedSequence entropy.
    big = [40_000_000 + 7, 40 * 10**6 + 39, 40 * (2**32 + 3) + 11, 2**62 + 5]
    _compare(big)
    pool = EnvPool("babyai")
    assert pool.num_tasks == 40 * 10**6
    ids = pool.create(2)
    first = pool.reset(ids, [7, 40_000_007])
    assert first[0] != first[1]


def test_own_worlds_stay_available() -> None:
    task_ids = list(range(40))
    agentgym = _rust_worlds(task_ids)[1]
    own = _rust_worlds(task_ids, worlds="own")[1]
    differing = sum(
        a["grid"] != b["grid"] or a["agent_pos"] != b["agent_pos"]
        for a, b in zip(agentgym, own, strict=True)
    )
    assert differing > 30
    pool = EnvPool("babyai", worlds="own")
    with pytest.raises(ValueError):
        pool.reset(pool.create(1), [pool.num_tasks])
    with pytest.raises(ValueError, match="worlds"):
        EnvPool("babyai", worlds="minigrid")

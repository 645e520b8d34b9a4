"""``agentgym demos ENV --tasks A:B --out FILE.jsonl``: expert demonstrations from planners.

Plans each task with the env's planner (``agentgym.envs.planners``: TextCraft's recipe tree;
BabyAI's bot over the true world state, for every level; webnav's planner over the generated
site; the search env's chain finder over the gold answers), replays the plan in a fresh session
and writes the successful episodes as ``messages`` records (system instruction, observations,
replies in the family's format: ``Thought: ... Action: ...``, WebArena's for webnav,
``<think>...</think>`` and a tag for search), the form ``agentgym sft`` reads. Prints the
planner's success rate per eval group (TextCraft: goal depth; BabyAI: level; webnav: site/kind;
search: data source) and the tasks it could not solve, with the reasons the planner gave. Env
options come as ``-o KEY=VALUE`` (search: ``-o index=DIR -o qa=FILE``); ``--levels`` (BabyAI,
``task_id % 40``) and ``--templates`` (webnav, ``task_id % 46``) keep only some ids of the range;
``--goal-in-thought`` (BabyAI, TextCraft) starts every thought with the episode's goal line.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from agentgym.cli.progress import Progress
from agentgym.envs.families import TASK_FILTERS

PLANNED_ENVS = ("textcraft", "babyai", "webnav", "search")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", choices=PLANNED_ENVS, help="env with a planner")
    parser.add_argument(
        "--tasks",
        default="0:100",
        help="task ids START:STOP[:STRIDE] (default 0:100; 0:125:2 is the even ids, a recipe's "
        "training split when its eval takes the odd ones)",
    )
    parser.add_argument(
        "--levels",
        default=None,
        help="babyai: keep only these levels (task_id %% 40), comma-separated, e.g. 0,1",
    )
    parser.add_argument(
        "--templates",
        default=None,
        help="webnav: keep only these templates (task_id %% 46), comma-separated, e.g. 6,7",
    )
    parser.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env option, repeatable (search: -o index=DIR -o qa=FILE)",
    )
    parser.add_argument(
        "--goal-in-thought",
        action="store_true",
        help='start every thought with "My goal: <goal>." as the first observation words the '
        "goal (babyai, textcraft): a reply then names the goal it serves, which small models "
        "copy from the goal line more easily than they recall it",
    )
    parser.add_argument(
        "--worked-example",
        action="store_true",
        help="open every episode with the family's worked example, as actor.worked_example "
        "does (babyai, textcraft, search); its reply carries no loss",
    )
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def parse_tasks(text: str) -> range:
    """``"A:B"`` as range(A, B), ``"A:B:S"`` as range(A, B, S)."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        start, stop, stride = int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 1
        if start < 0 or stride < 1:
            raise ValueError
        tasks = range(start, stop, stride)
    except ValueError:
        raise SystemExit(
            f"--tasks: expected START:STOP[:STRIDE] (ids >= 0, stride >= 1), got {text!r}"
        ) from None
    if not tasks:
        raise SystemExit(f"--tasks {text}: empty range")
    return tasks


def parse_options(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as env options."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--option: expected KEY=VALUE, got {pair!r}")
        options[key] = value
    return options


def run(args: argparse.Namespace) -> int:
    """``agentgym demos``: returns the exit code (1 when no task was solved)."""
    from agentgym.agent.demos import demo_episode
    from agentgym.envs import EnvPool
    from agentgym.envs.families import family

    span = parse_tasks(args.tasks)
    tasks = _filtered(list(span), "--levels", args.levels, TASK_FILTERS["levels"].modulus)
    tasks = _filtered(tasks, "--templates", args.templates, TASK_FILTERS["templates"].modulus)
    if not tasks:
        raise SystemExit(f"--tasks {args.tasks}: no task id left after --levels/--templates")
    rules, solved, failed = family(args.env), defaultdict(int), defaultdict(list)
    if args.goal_in_thought and rules.goal is None:
        raise SystemExit(f"--goal-in-thought: {args.env} states no goal line to restate")
    if args.worked_example and rules.example is None:
        raise SystemExit(f"--worked-example: {args.env}'s family has no worked example")
    try:
        pool = EnvPool(args.env, **parse_options(args.option))
    except ValueError as e:
        raise SystemExit(f"agentgym demos {args.env}: {e}") from None
    if span.stop > pool.num_tasks:
        raise SystemExit(f"--tasks {args.tasks}: {args.env} has task ids 0..{pool.num_tasks - 1}")
    reasons: dict[str, Counter] = defaultdict(Counter)
    names: dict[str, str] = {}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    progress = None if args.quiet else Progress()
    with open(out, "w") as f:
        for k, task in enumerate(tasks, start=1):
            steps, why = _plan(pool, args.env, task)
            record = None
            if steps:
                record = demo_episode(
                    pool, args.env, task, steps, args.goal_in_thought, args.worked_example
                )
            group, names[group] = _group(pool, rules, args.env, task)
            if record is not None and record["success"]:
                f.write(json.dumps(record) + "\n")
                solved[group] += 1
            else:
                failed[group].append(task)
                reasons[group][why or "the replayed demo did not succeed"] += 1
            if progress is not None:
                progress.show(_progress_line(k, len(tasks), solved, progress))
    if progress is not None:
        progress.finish(_progress_line(len(tasks), len(tasks), solved, progress))
    print(_report(solved, failed, reasons, names))
    print(f"written to {out}")
    return 0 if sum(solved.values()) else 1


def _progress_line(done: int, total: int, solved: dict[str, int], progress: Progress) -> str:
    return (
        f"demos {done}/{total} tasks, {sum(solved.values())} solved, {progress.elapsed()} "
        f"elapsed, eta {progress.eta(done, total)}"
    )


def _filtered(tasks: list[int], flag: str, keep: str | None, period: int) -> list[int]:
    """The ids whose ``id % period`` is in the comma-separated list ``keep`` (None: all)."""
    if keep is None:
        return tasks
    try:
        wanted = {int(x) for x in keep.split(",")}
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated numbers, got {keep!r}") from None
    if not all(0 <= v < period for v in wanted):
        raise SystemExit(f"{flag} {keep}: each must be in [0, {period})")
    return [t for t in tasks if t % period in wanted]


def _plan(pool, env: str, task: int):
    """The planned steps (None when not solved) and why not."""
    from agentgym.envs.planners import plan_textcraft, run_expert

    if env == "textcraft":
        steps = plan_textcraft(pool, task)
        return steps, None if steps else "the recipe tree planner did not craft the goal"
    run = run_expert(pool, task)
    return (run.steps if run.success else None), run.why


def _group(pool, rules, env: str, task: int) -> tuple[str, str]:
    """The task's eval group and a name for it (BabyAI: the level's)."""
    (sid,) = pool.create(1)
    try:
        pool.reset([sid], [task])
        info = pool.info([sid])[0]
        return rules.group(env, task, info), str(info.get("level", ""))
    finally:
        pool.close([sid])


def _report(
    solved: dict[str, int],
    failed: dict[str, list[int]],
    reasons: dict[str, Counter],
    names: dict[str, str],
) -> str:
    groups = sorted(set(solved) | set(failed), key=_natural)
    width = max([10, *(len(g) + 2 for g in groups)])  # webnav's "shop/information_seeking"
    lines = [f"{'':<{width}}{'solved':>8}{'tasks':>7}{'rate':>8}"]
    for group in groups:
        n = solved[group] + len(failed[group])
        row = f"{group:<{width}}{solved[group]:>8}{n:>7}{solved[group] / n:>8.1%}"
        lines.append(f"{row}  {names.get(group, '')}".rstrip())
        if failed[group]:
            lines.append(f"  not solved: {failed[group][:20]}")
            for why, count in reasons[group].most_common(3):
                lines.append(f"    {count}x {why}")
    total = sum(solved.values())
    n = total + sum(len(f) for f in failed.values())
    lines.append(f"{'all':<{width}}{total:>8}{n:>7}{total / max(n, 1):>8.1%}")
    return "\n".join(lines)


def _natural(group: str) -> tuple:
    """``level 2`` before ``level 10``."""
    head, _, tail = group.rpartition(" ")
    return (head, int(tail)) if tail.isdigit() else (group, 0)

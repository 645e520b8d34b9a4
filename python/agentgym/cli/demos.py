"""``agentgym demos ENV --tasks A:B --out FILE.jsonl``: expert demonstrations from planners.

Plans each task with the env's planner (``agentgym.envs.planners``: TextCraft's recipe tree;
BabyAI's search for GoTo goals over the listed actions), replays the
plan in a fresh session and writes the successful episodes as ``messages`` records (system
instruction, observations, ``Thought: ... Action: ...`` replies), the form ``agentgym sft``
reads. Prints the planner's success rate per eval group (TextCraft: goal depth) and the tasks
it could not solve.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

PLANNED_ENVS = ("textcraft", "babyai")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", choices=PLANNED_ENVS, help="env with a planner")
    parser.add_argument("--tasks", default="0:100", help="task ids START:STOP (default 0:100)")
    parser.add_argument(
        "--levels",
        default=None,
        help="babyai: keep only these levels (task_id %% 40), comma-separated, e.g. 0,1",
    )
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def parse_tasks(text: str) -> range:
    """``"A:B"`` as range(A, B)."""
    start, sep, stop = text.partition(":")
    try:
        if not sep:
            raise ValueError
        tasks = range(int(start), int(stop))
    except ValueError:
        raise SystemExit(f"--tasks: expected START:STOP, got {text!r}") from None
    if not tasks:
        raise SystemExit(f"--tasks {text}: empty range")
    return tasks


def run(args: argparse.Namespace) -> int:
    """``agentgym demos``: returns the exit code (1 when no task was solved)."""
    from agentgym.envs import EnvPool
    from agentgym.envs.families import family
    from agentgym.envs.planners import demo_episode, plan_babyai_goto, plan_textcraft

    span = parse_tasks(args.tasks)
    tasks = list(span)
    if args.levels:
        keep = {int(x) for x in args.levels.split(",")}
        tasks = [t for t in tasks if t % 40 in keep]
    pool = EnvPool(args.env)
    if span.stop > pool.num_tasks:
        raise SystemExit(f"--tasks {args.tasks}: {args.env} has task ids 0..{pool.num_tasks - 1}")
    rules, solved, failed = family(args.env), defaultdict(int), defaultdict(list)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for k, task in enumerate(tasks, start=1):
            plan = plan_textcraft if args.env == "textcraft" else plan_babyai_goto
            steps = plan(pool, task)
            record = demo_episode(pool, args.env, task, steps) if steps else None
            group = _group(pool, rules, args.env, task)
            if record is not None and record["success"]:
                f.write(json.dumps(record) + "\n")
                solved[group] += 1
            else:
                failed[group].append(task)
            if not args.quiet:
                print(f"\rdemos {k}/{len(tasks)}", end="", file=sys.stderr, flush=True)
    if not args.quiet:
        print(file=sys.stderr)
    print(_report(solved, failed))
    print(f"written to {out}")
    return 0 if sum(solved.values()) else 1


def _group(pool, rules, env: str, task: int) -> str:
    (sid,) = pool.create(1)
    try:
        pool.reset([sid], [task])
        return rules.group(env, task, pool.info([sid])[0])
    finally:
        pool.close([sid])


def _report(solved: dict[str, int], failed: dict[str, list[int]]) -> str:
    lines = [f"{'':<10}{'solved':>8}{'tasks':>7}{'rate':>8}"]
    for group in sorted(set(solved) | set(failed)):
        n = solved[group] + len(failed[group])
        lines.append(f"{group:<10}{solved[group]:>8}{n:>7}{solved[group] / n:>8.1%}")
        if failed[group]:
            lines.append(f"  not solved: {failed[group][:20]}")
    return "\n".join(lines)

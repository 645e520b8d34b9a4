"""``agentgym textcraft-goals URL --out FILE``: record the goal order of a TextCraft server.

Resets task ids ``0..COUNT`` (default 544, AgentGym's goal count) on a running AgentGym-style
TextCraft server, reads each goal from the reset observation and writes a goal-order file.
``EnvPool("textcraft", goal_order=FILE)`` (or ``--option goal_order=FILE`` of
``agentgym-envserver``, or ``env.options.goal_order`` in a config) then plays that server's goal
for every task id.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agentgym.envs.textcraft import AGENTGYM_NUM_GOALS

    parser.add_argument("url", help="base URL of the server, e.g. http://127.0.0.1:36001")
    parser.add_argument("--out", required=True, help="goal-order file to write")
    parser.add_argument(
        "--count",
        type=int,
        default=AGENTGYM_NUM_GOALS,
        help=f"task ids to record, 0..COUNT (default {AGENTGYM_NUM_GOALS})",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")


def run(args: argparse.Namespace) -> int:
    """Records the goals and writes the file; returns the exit code."""
    from agentgym.envs.textcraft import format_goal_order, record_goal_order

    if args.count < 1:
        raise SystemExit(f"--count {args.count}: record at least one task id")
    goals = record_goal_order(args.url, args.count, timeout=args.timeout)
    first_seen: dict[str, int] = {}
    for task, goal in enumerate(goals):
        if goal in first_seen:
            raise SystemExit(
                f"task id {task} plays {goal} again (as id {first_seen[goal]}): the server has "
                f"fewer goals than --count {args.count}; rerun with --count {task}"
            )
        first_seen[goal] = task
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_goal_order(goals, args.url))
    print(f"{len(goals)} goals of {args.url} -> {out}")
    return 0

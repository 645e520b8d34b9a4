"""``agentgym export-tasks --for verl|skyrl|trl|openenv --env ENV --out DIR [CONFIG]``: the
task datasets another stack trains on.

Writes DIR/train and DIR/test (parquet for verl, SkyRL and TRL, JSONL for OpenEnv; ``--format``
overrides): one row per task id of agentgym's splits, ``tasks.train`` and ``tasks.eval`` (of
CONFIG's entry for ENV when given, else agentgym's defaults), in the layout that stack reads
(``agentgym.integrations.tasks`` lists the columns); for verl also DIR/agent_loop.yaml, the
agent loop's registry entry. The pages under docs/integrations/ show how each stack picks
them up.
"""

from __future__ import annotations

import argparse
import sys

from agentgym.cli.common import add_set_arg
from agentgym.integrations.tasks import FORMATS, STACKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", default=None, help="run config (its tasks)")
    parser.add_argument("--for", dest="stack", required=True, choices=STACKS)
    parser.add_argument("--env", required=True, help="native env: babyai, textcraft, ...")
    parser.add_argument("--out", required=True, help="directory to write train/test into")
    parser.add_argument("--format", choices=FORMATS, default=None, help="file format")
    add_set_arg(parser, example="tasks.train.limit=512")


def run(args: argparse.Namespace) -> int:
    """Writes the files; returns the exit code (2 for a bad env, format or missing pyarrow)."""
    from agentgym.config import load_config
    from agentgym.integrations.tasks import export

    config = load_config(args.config, args.overrides)
    entries = [e for e in config.entries if e.env.name == args.env]
    if args.config and not entries:
        print(f"agentgym export-tasks: {args.config} has no env {args.env!r}", file=sys.stderr)
        return 2
    tasks = entries[0].tasks if entries else config.tasks
    try:
        written = export(args.stack, args.env, args.out, tasks=tasks, fmt=args.format)
    except (ValueError, ImportError) as e:
        print(f"agentgym export-tasks: {e}", file=sys.stderr)
        return 2
    for split, path in written.items():
        if split == "agent_loop":
            print(f"verl agent loop entry -> {path} (rollout.agent.agent_loop_config_path)")
            continue
        count = len(getattr(tasks, "train" if split == "train" else "eval").ids())
        print(f"{split}: {count} tasks -> {path}")
    return 0

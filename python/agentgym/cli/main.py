"""``agentgym``: ``train`` (learner + actors on one machine), ``eval`` (held-out tasks),
``compare`` (two eval results, paired by task), ``sft`` (supervised fine-tuning on trajectory
datasets), ``demos`` (expert demonstrations), ``pairs`` and ``dpo`` (preference pairs and offline
preference optimisation), ``export`` (a checkpoint as a Hugging Face model directory),
``textcraft-goals`` (record a TextCraft server's goal order), ``hub`` (a local web app: runs,
live curves, trajectory replay), ``index`` (build a search index; generate the multi-hop search
world)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from agentgym.cli import (
        compare,
        configcmd,
        demos,
        export,
        hub,
        index,
        offline,
        textcraft_goals,
        train,
    )
    from agentgym.cli import eval as eval_cmd

    train.add_arguments(sub.add_parser("train", help="train: learner and actors, live progress"))
    eval_cmd.add_arguments(sub.add_parser("eval", help="evaluate a checkpoint on held-out tasks"))
    compare.add_arguments(
        sub.add_parser("compare", help="two eval results of the same tasks, paired by task")
    )
    offline.add_sft_arguments(sub.add_parser("sft", help="supervised fine-tuning on datasets"))
    demos.add_arguments(sub.add_parser("demos", help="write expert demonstrations (planners)"))
    offline.add_pairs_arguments(sub.add_parser("pairs", help="preference pairs per task"))
    offline.add_dpo_arguments(sub.add_parser("dpo", help="offline preference optimisation"))
    export.add_arguments(sub.add_parser("export", help="a checkpoint as a Hugging Face model"))
    textcraft_goals.add_arguments(
        sub.add_parser("textcraft-goals", help="record a TextCraft server's goal order")
    )
    hub.add_arguments(sub.add_parser("hub", help="web app: runs, live curves, replays"))
    index.add_arguments(sub.add_parser("index", help="search env data: build an index, generate"))
    configcmd.add_arguments(
        sub.add_parser("config", help="show a config with its defaults; the config reference")
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``agentgym``; an invalid config exits with code 2 listing its problems."""
    from agentgym.configtools import ConfigError

    args = build_parser().parse_args(argv)
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a closed pipe raises here, not in the interpreter's exit
        return code
    except ConfigError as e:
        from agentgym.cli.common import report_config_error

        return report_config_error(f"agentgym {args.command}", e)
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of stdout went away (``agentgym compare ... | head``): exit quietly, as a
    shell tool does, with stdout pointed at /dev/null so that the interpreter's final flush
    raises nothing either."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, what a shell reports for a command a closed pipe stopped


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "train":
        from agentgym.cli import train

        return train.run(args)
    if args.command == "export":
        from agentgym.cli import export

        return export.run(args)
    if args.command == "demos":
        from agentgym.cli import demos

        return demos.run(args)
    if args.command in ("sft", "pairs", "dpo"):
        from agentgym.cli import offline

        run = {"sft": offline.run_sft, "pairs": offline.run_pairs, "dpo": offline.run_dpo}
        return run[args.command](args)
    if args.command == "compare":
        from agentgym.cli import compare

        return compare.run(args)
    if args.command == "hub":
        from agentgym.cli import hub

        return hub.run(args)
    if args.command == "index":
        from agentgym.cli import index

        return index.run(args)
    if args.command == "config":
        from agentgym.cli import configcmd

        return configcmd.run(args)
    if args.command == "textcraft-goals":
        from agentgym.cli import textcraft_goals

        return textcraft_goals.run(args)
    from agentgym.cli import eval as eval_cmd

    return eval_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())

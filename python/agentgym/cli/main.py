"""``agentgym``: ``train`` (learner + actors on one machine) and ``eval`` (held-out tasks)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from agentgym.cli import eval as eval_cmd
    from agentgym.cli import train

    train.add_arguments(sub.add_parser("train", help="train: learner and actors, live progress"))
    eval_cmd.add_arguments(sub.add_parser("eval", help="evaluate a checkpoint on held-out tasks"))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``agentgym``."""
    args = build_parser().parse_args(argv)
    if args.command == "train":
        from agentgym.cli import train

        return train.run(args)
    from agentgym.cli import eval as eval_cmd

    return eval_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())

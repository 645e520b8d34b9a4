"""``agentgym``: ``train`` (learner + actors on one machine), ``eval`` (held-out tasks),
``compare`` (two eval results, paired by task), ``sft`` (supervised fine-tuning on trajectory
datasets), ``demos`` (expert demonstrations), ``pairs`` and ``dpo`` (preference pairs and offline
preference optimisation), ``export`` (a checkpoint as a Hugging Face model directory),
``textcraft-goals`` (record a TextCraft server's goal order), ``hub`` (a local web app: runs,
live curves, trajectory replay), ``index`` (build a search index; generate the multi-hop search
world), ``model`` (fetch or import a real model from a GGUF file), ``config`` (a config with its
defaults), ``engine`` (vLLM's CPU build in an environment of its own), ``openenv-serve`` (a
native env as an OpenEnv server) and ``export-tasks`` (task datasets for verl, SkyRL, TRL and
OpenEnv)."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
High-throughput multi-turn reinforcement learning for LLM agents.

Start with: agentgym train configs/quickstart.yaml
Each command's --help says what it does; the documentation is in docs/ (docs/index.md)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from agentgym.cli import (
        compare,
        configcmd,
        demos,
        engine,
        export,
        export_tasks,
        hub,
        index,
        model,
        offline,
        openenv_serve,
        textcraft_goals,
        train,
    )
    from agentgym.cli import eval as eval_cmd
    from agentgym.cli.common import help_parser

    def command(name: str, summary: str, module) -> argparse.ArgumentParser:
        return help_parser(sub, name, summary, module.__doc__)

    train.add_arguments(command("train", "train: learner and actors, live progress", train))
    eval_cmd.add_arguments(command("eval", "evaluate a checkpoint on held-out tasks", eval_cmd))
    compare.add_arguments(
        command("compare", "two eval results of the same tasks, paired by task", compare)
    )
    offline.add_sft_arguments(command("sft", "supervised fine-tuning on datasets", offline))
    demos.add_arguments(command("demos", "write expert demonstrations (planners)", demos))
    offline.add_pairs_arguments(command("pairs", "preference pairs per task", offline))
    offline.add_dpo_arguments(command("dpo", "offline preference optimisation", offline))
    export.add_arguments(command("export", "a checkpoint as a Hugging Face model", export))
    textcraft_goals.add_arguments(
        command("textcraft-goals", "record a TextCraft server's goal order", textcraft_goals)
    )
    hub.add_arguments(command("hub", "web app: runs, live curves, replays", hub))
    index.add_arguments(command("index", "search env data: build an index, generate", index))
    configcmd.add_arguments(
        command("config", "show a config with its defaults; the config reference", configcmd)
    )
    model.add_arguments(command("model", "fetch or import a real model (GGUF)", model))
    openenv_serve.add_arguments(
        command("openenv-serve", "a native env as an OpenEnv server", openenv_serve)
    )
    export_tasks.add_arguments(
        command("export-tasks", "task datasets for verl, SkyRL, TRL, OpenEnv", export_tasks)
    )
    engine.add_arguments(command("engine", "install an engine's environment (vLLM CPU)", engine))
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
    if args.command == "engine":
        from agentgym.cli import engine

        return engine.run(args)
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
    if args.command == "model":
        from agentgym.cli import model

        return model.run(args)
    if args.command == "openenv-serve":
        from agentgym.cli import openenv_serve

        return openenv_serve.run(args)
    if args.command == "export-tasks":
        from agentgym.cli import export_tasks

        return export_tasks.run(args)
    if args.command == "textcraft-goals":
        from agentgym.cli import textcraft_goals

        return textcraft_goals.run(args)
    from agentgym.cli import eval as eval_cmd

    return eval_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())

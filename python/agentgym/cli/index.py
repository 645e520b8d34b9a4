"""``agentgym index``: the search env's data.

- ``agentgym index build CORPUS.jsonl INDEX_DIR``: build the BM25 index of a Search-R1/FlashRAG
  corpus (multi-threaded, with a progress line; skipped lines are counted and the first are named).
- ``agentgym index generate OUT_DIR``: write the generated multi-hop world (``corpus.jsonl`` and
  ``qa.jsonl``; see ``agentgym.envs.search_data``).
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


def run(args: argparse.Namespace) -> int:
    """Runs ``agentgym index build`` or ``generate``; returns the exit code."""
    if args.index_command == "generate":
        return _generate(args)
    return _build(args)


def _generate(args: argparse.Namespace) -> int:
    from agentgym.envs.search_data import write_dataset

    data = write_dataset(args.out_dir, seed=args.seed, num_questions=args.questions)
    n = len(data.questions)
    print(
        f"{len(data.corpus)} passages -> {args.out_dir}/corpus.jsonl; {n} questions -> "
        f"{args.out_dir}/qa.jsonl (task ids 0..{n}; a config's tasks.train and tasks.eval "
        "ranges split them)"
    )
    return 0


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

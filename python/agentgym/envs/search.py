"""The search env's index: build one from a Search-R1/FlashRAG corpus, open one for queries.

>>> from agentgym.envs.search import build_index
>>> report = build_index("corpus.jsonl", "index/")  # doctest: +SKIP
>>> pool = EnvPool("search", index="index/", qa="qa.jsonl", topk=3)  # doctest: +SKIP

Or with passages from a retrieval server of Search-R1's API (``POST /retrieve {"queries",
"topk", "return_scores"}``; e.g. an E5/FAISS retriever on a GPU), no local index needed; the
searches of one batched step go out as one request, and a retriever that fails or answers
garbage within ``retriever_timeout`` seconds gives the searching sessions a per-session error:

>>> url = "http://127.0.0.1:8000/retrieve"
>>> pool = EnvPool("search", retriever=url, qa="qa.jsonl")  # doctest: +SKIP

Corpus lines are ``{"id": ..., "contents": "\\"Title\\"\\ntext"}``; a line that is not such a JSON
object is skipped and counted (``IndexBuildReport.first_skipped`` names the first line numbers).
Ranking is BM25 (k1 = 1.2, b = 0.75) over alphanumeric, lower-cased tokens; the index directory
records its format version and tokenizer, and an index of another version is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentgym import _envserver

SearchIndex = _envserver.SearchIndex
"""An opened index: ``SearchIndex(dir).search(queries, k) -> [[(id, score), ...], ...]``."""

ProgressFn = Callable[[int, int, int, int], None]
"""``progress(bytes_read, bytes_total, passages, skipped)``."""


@dataclass(frozen=True)
class IndexBuildReport:
    """What a finished index build did."""

    passages: int
    skipped: int
    first_skipped: list[tuple[int, str]]
    """(1-based line number, why) of the first skipped corpus lines."""
    seconds: float
    index_bytes: int


def build_index(
    corpus: str | Path,
    index_dir: str | Path,
    *,
    threads: int | None = None,
    memory_mb: int | None = None,
    progress: ProgressFn | None = None,
) -> IndexBuildReport:
    """Builds the BM25 index of ``corpus`` (JSONL) into ``index_dir`` (absent or empty).

    ``threads`` indexing threads (default: cores, at most 8) share ``memory_mb`` of buffers
    (default 256). ``progress`` is called every 10,000 lines and once all lines are read, before
    the index is written and merged into one segment (about a fifth of the build); an exception
    in it, or Ctrl-C, cancels the build and leaves ``index_dir`` unusable.
    """
    passages, skipped, first, seconds, size = _envserver.build_search_index(
        str(corpus), str(index_dir), threads=threads, memory_mb=memory_mb, progress=progress
    )
    return IndexBuildReport(passages, skipped, list(first), seconds, size)

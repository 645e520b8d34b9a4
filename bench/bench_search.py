"""The search env's retriever: index build time and size, queries/s and latency, beside bm25s.

Generates a corpus of N passages (60-140 words each, drawn from a Zipf-distributed vocabulary
of invented words, so term statistics look like text rather than templates) and queries of 2-6
words taken from random passages, then measures on the same machine, in one run:

- agentgym: ``agentgym index build`` (multi-threaded) and ``SearchIndex.search`` (batched over
  threads; and one query at a time for latency);
- bm25s (if installed) with the same k1, b, idf and tokens: index time, batched retrieve, latency;
- top-10 agreement of the two, tie-aware (a hit agrees when bm25s scores it at least as high as
  its own 10th best).

    python bench/bench_search.py                          # 100,000 passages, 2,000 queries
    python bench/bench_search.py --passages 1000000 --queries 5000 --threads 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentgym.envs.search import SearchIndex, build_index


def make_corpus(path: Path, n: int, vocab_size: int, seed: int) -> list[str]:
    """Writes ``n`` passages as Search-R1 JSONL; returns their texts (title line included)."""
    rng = np.random.default_rng(seed)
    syllables = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou")]
    words = []
    seen: set[str] = set()
    while len(words) < vocab_size:
        w = "".join(rng.choice(syllables, size=rng.integers(2, 5)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    ranks = np.arange(1, vocab_size + 1)
    p = 1.0 / ranks**1.05
    p /= p.sum()
    texts = []
    with path.open("w") as f:
        for i in range(n):
            body = rng.choice(vocab_size, size=rng.integers(60, 141), p=p)
            title = " ".join(words[k].capitalize() for k in rng.choice(vocab_size, size=2, p=p))
            contents = f'"{title}"\n' + " ".join(words[k] for k in body) + "."
            texts.append(contents)
            f.write(json.dumps({"id": str(i), "contents": contents}) + "\n")
    return texts


def tokens(text: str) -> list[str]:
    """The index's tokenizer in Python: alphanumeric runs under 40 bytes, lower-cased."""
    return [t.lower() for t in re.findall(r"[^\W_]+", text) if len(t.encode()) < 40]


def write_qa(path: Path, n: int) -> None:
    """``n`` placeholder QA rows (a search env needs a QA set; these benches time searches)."""
    rows = ({"question": f"question {i}?", "golden_answers": [f"answer {i}"]} for i in range(n))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@dataclass(frozen=True)
class Queries:
    """Distinct query sets: warm-up, the timed batch, and one-at-a-time latency."""

    warm: list[str]
    batch: list[str]
    single: list[str]


def make_queries(texts: list[str], n: int, seed: int) -> Queries:
    """``n`` batch queries of 2-6 words from random passages, plus warm-up and latency sets."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n + 550:
        words = tokens(rng.choice(texts))
        q = " ".join(rng.sample(words, rng.randrange(2, 7)))
        key = " ".join(sorted(set(tokens(q))))  # what the index's result cache keys on
        if key not in seen:
            seen.add(key)
            out.append(q)
    return Queries(warm=out[:50], batch=out[50 : 50 + n], single=out[50 + n :])


def latency_ms(fn, queries: list[str]) -> tuple[float, float]:
    """p50 and p99 of one query at a time, in ms."""
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def bench_agentgym(corpus: Path, work: Path, queries: Queries, threads: int) -> dict:
    index_dir = work / "index"
    report = build_index(corpus, index_dir, threads=threads)
    index = SearchIndex(str(index_dir))
    index.search(queries.warm, 10, threads)  # the page cache and the doc store's block cache
    # Every query below is new to the index's result cache: these are search times, not lookups.
    t = time.perf_counter()
    hits = index.search(queries.batch, 10, threads)
    batch_s = time.perf_counter() - t
    p50, p99 = latency_ms(lambda q: index.search([q], 10, 1), queries.single)
    return {
        "build_s": report.seconds,
        "size_mib": report.index_bytes / 2**20,
        "qps": len(queries.batch) / batch_s,
        "p50_ms": p50,
        "p99_ms": p99,
        "hits": hits,
    }


def bench_bm25s(texts: list[str], queries: Queries, threads: int) -> dict | None:
    try:
        import bm25s
    except ImportError:
        return None
    t = time.perf_counter()
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index([tokens(x) for x in texts], show_progress=False)
    build_s = time.perf_counter() - t
    vocab = retriever.vocab_dict
    query_tokens = [[w for w in sorted(set(tokens(q))) if w in vocab] for q in queries.batch]
    t = time.perf_counter()
    retriever.retrieve(query_tokens, k=10, n_threads=threads, show_progress=False)
    batch_s = time.perf_counter() - t

    def one(q: str) -> None:
        retriever.retrieve(
            [[w for w in sorted(set(tokens(q))) if w in vocab]], k=10, show_progress=False
        )

    p50, p99 = latency_ms(one, queries.single)
    return {
        "build_s": build_s,
        "qps": len(queries.batch) / batch_s,
        "p50_ms": p50,
        "p99_ms": p99,
        "retriever": retriever,
        "query_tokens": query_tokens,
    }


def agreement(ours: list, retriever, query_tokens: list[list[str]], limit: int = 1000) -> float:
    """Mean tie-aware top-10 agreement over the first ``limit`` queries."""
    fractions = []
    for hits, toks in zip(ours[:limit], query_tokens[:limit], strict=False):
        if not toks or not hits:
            continue
        scores = retriever.get_scores(toks)
        tenth = np.sort(scores)[-min(10, len(hits))]
        fractions.append(sum(scores[int(h)] >= tenth * (1 - 1e-4) for h, _ in hits) / len(hits))
    return float(np.mean(fractions))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2_000)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-search-"))
    try:
        corpus = work / "corpus.jsonl"
        texts = make_corpus(corpus, args.passages, args.vocab, args.seed)
        corpus_mib = corpus.stat().st_size / 2**20
        queries = make_queries(texts, args.queries, args.seed)
        ours = bench_agentgym(corpus, work, queries, args.threads)
        theirs = bench_bm25s(texts, queries, args.threads)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{args.threads} threads; {args.passages:,} passages "
        f"({corpus_mib:.0f} MiB), "
        f"{args.queries:,} queries"
    )
    print("| retriever | build s | index MiB | queries/s (batch) | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    print(
        f"| agentgym (tantivy) | {ours['build_s']:.1f} | {ours['size_mib']:.0f} | "
        f"{ours['qps']:,.0f} | {ours['p50_ms']:.2f} | {ours['p99_ms']:.2f} |"
    )
    if theirs is None:
        print("bm25s not installed: pip install bm25s")
        return
    print(
        f"| bm25s | {theirs['build_s']:.1f} | - | {theirs['qps']:,.0f} | "
        f"{theirs['p50_ms']:.2f} | {theirs['p99_ms']:.2f} |"
    )
    overlap = agreement(ours["hits"], theirs["retriever"], theirs["query_tokens"])
    print(f"top-10 agreement (tie-aware, first 1000 queries): {overlap:.4f}")


if __name__ == "__main__":
    main()

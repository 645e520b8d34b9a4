"""The search env's retrieval against what users run today: a Python retrieval server of
Search-R1's shape (FastAPI + uvicorn, ``POST /retrieve``) wrapping bm25s.

Builds a generated corpus (``bench_search.make_corpus``), the embedded tantivy index, and starts
the retrieval server in its own process (its bm25s index built at start-up, with the same k1, b,
idf and tokens as bench_search). Then ``--sessions`` search sessions each send one search per
step, every step's queries new (no result-cache hits), and one batched step is timed, median of
``--steps``:

- embedded: ``EnvPool("search", index=...)``, the batch's searches spread over the pool's threads;
- remote, batched: ``EnvPool("search", retriever=URL)``, one ``/retrieve`` request per step with
  every session's query (what the env's remote retriever sends);
- per-query requests: the same queries as one ``/retrieve`` request each from a thread pool
  (``--client-threads``), as a client that forwards each session's query on its own does.

    python bench/bench_search_server.py                         # 100,000 passages, 1,024 sessions
    python bench/bench_search_server.py --passages 1000000 --sessions 1024
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.search import build_index  # noqa: E402
from bench_search import make_corpus, make_queries, tokens, write_qa  # noqa: E402


def serve(corpus: Path, port: int, threads: int) -> None:
    """The retrieval server: bm25s over ``corpus``, Search-R1's request and response shape."""
    import bm25s
    import uvicorn
    from fastapi import Body, FastAPI

    docs = [json.loads(line) for line in corpus.read_text().splitlines()]
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index([tokens(d["contents"]) for d in docs], show_progress=False)
    vocab = retriever.vocab_dict
    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(body: dict = Body(...)) -> dict:  # noqa: B008 (FastAPI's way to take the body)
        queries, topk = body["queries"], int(body.get("topk", 3))
        query_tokens = [[w for w in sorted(set(tokens(q))) if w in vocab] or [""] for q in queries]
        ids, scores = retriever.retrieve(
            query_tokens, k=topk, n_threads=threads, show_progress=False
        )
        lists = []
        for row_ids, row_scores in zip(ids.tolist(), scores.tolist(), strict=True):
            hits = [docs[i] for i in row_ids]
            if body.get("return_scores"):
                hits = [{"document": d, "score": s} for d, s in zip(hits, row_scores, strict=True)]
            lists.append(hits)
        return {"result": lists}

    @app.get("/health")
    def health() -> dict:
        return {"ok": True}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(corpus: Path, threads: int, timeout_s: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(corpus), "--port", str(port),
         "--threads", str(threads)],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the retrieval server exited with {proc.returncode}")
        try:
            if requests.get(url + "/health", timeout=1).ok:
                return proc, url + "/retrieve"
        except requests.RequestException:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"the retrieval server did not answer within {timeout_s:.0f} s")


def time_env(pool: EnvPool, steps: list[list[str]]) -> tuple[float, int]:
    """Median ms of one batched step with ``steps[k]``'s queries; errors seen."""
    ids = pool.create(len(steps[0]))
    pool.reset(ids, list(range(len(ids))))
    times, errors = [], 0
    for queries in steps:
        replies = [f"<search> {q} </search>" for q in queries]
        t = time.perf_counter()
        out = pool.step(ids, replies)
        times.append((time.perf_counter() - t) * 1e3)
        errors += sum(e is not None for e in out.errors)
    pool.close(ids)
    return statistics.median(times), errors


def time_per_query(url: str, steps: list[list[str]], topk: int, threads: int) -> float:
    """Median ms to answer one step's queries as one request each from ``threads`` threads."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=threads, pool_maxsize=threads)
    session.mount("http://", adapter)

    def one(q: str) -> None:
        r = session.post(
            url, json={"queries": [q], "topk": topk, "return_scores": True}, timeout=60
        )
        r.raise_for_status()

    times = []
    with ThreadPoolExecutor(threads) as ex:
        for queries in steps:
            t = time.perf_counter()
            list(ex.map(one, queries))
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1_024)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per side (median)")
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--client-threads", type=int, default=64)
    ap.add_argument("--server-timeout", type=float, default=1800.0,
                    help="seconds to wait for the server's bm25s index")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(Path(args.serve), args.port, args.threads)
        return
    if args.sessions < 1 or args.steps < 1 or args.passages < 1:
        raise SystemExit("--sessions, --steps and --passages must be >= 1")
    work = Path(tempfile.mkdtemp(prefix="bench-search-server-"))
    server = None
    try:
        corpus = work / "corpus.jsonl"
        texts = make_corpus(corpus, args.passages, args.vocab, args.seed)
        queries = make_queries(texts, args.sessions * (3 * args.steps + 1), args.seed).batch
        n = args.sessions
        chunks = [queries[k * n : (k + 1) * n] for k in range(3 * args.steps + 1)]
        warm, rest = chunks[0], chunks[1:]
        embedded_steps, remote_steps, single_steps = (
            rest[: args.steps], rest[args.steps : 2 * args.steps], rest[2 * args.steps :]
        )  # fmt: skip
        qa = work / "qa.jsonl"
        write_qa(qa, n)
        build_index(corpus, work / "index", threads=args.threads)
        t = time.perf_counter()
        server, url = start_server(corpus, args.threads, args.server_timeout)
        server_start_s = time.perf_counter() - t
        options = {"qa": str(qa), "topk": args.topk, "max_turns": 10 * args.steps}
        embedded = EnvPool("search", threads=args.threads, index=str(work / "index"), **options)
        remote = EnvPool("search", threads=args.threads, retriever=url, retriever_timeout=600,
                         **options)  # fmt: skip
        time_env(embedded, [warm])  # page cache, doc store
        time_env(remote, [warm])  # connection, the server's first request
        emb_ms, emb_err = time_env(embedded, embedded_steps)
        rem_ms, rem_err = time_env(remote, remote_steps)
        one_ms = time_per_query(url, single_steps, args.topk, args.client_threads)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{args.threads} threads; {args.passages:,} passages, {n:,} sessions, top-{args.topk}, "
        f"median of {args.steps} steps; retrieval server ready in {server_start_s:.1f} s"
    )
    print("| one step of every session's search | ms | x embedded |")
    print("|---|---:|---:|")
    print(f"| embedded index (EnvPool) | {emb_ms:,.1f} | 1.0 |")
    print(f"| retrieval server, one request per step (EnvPool retriever=) | {rem_ms:,.1f} | "
          f"{rem_ms / emb_ms:.1f} |")  # fmt: skip
    print(f"| retrieval server, one request per query ({args.client_threads} threads) | "
          f"{one_ms:,.1f} | {one_ms / emb_ms:.1f} |")  # fmt: skip
    if emb_err or rem_err:
        print(f"errors: embedded {emb_err}, remote {rem_err}")


if __name__ == "__main__":
    main()

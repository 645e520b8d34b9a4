"""The search env's memory: RSS per open session, and N env servers sharing one index.

Builds the index of a generated corpus (``bench_search.make_corpus``: Zipf-distributed invented
words), then measures on this machine, in one run:

- sessions: in this process, RSS (anonymous and file-backed) before the pool, after opening it
  (the index is memory-mapped: only the pages touched count, as file-backed), after creating,
  resetting and stepping ``--sessions`` sessions (one distinct search each, top-3), and after
  closing them. What a session holds is the anonymous memory its close gives back (the shared
  result cache, bounded at 4,096 results, and Python's own arenas stay);
- servers: ``--servers`` ``agentgym-envserver --env search`` processes over the same index
  directory, each serving the same batch of searches; per process RSS and PSS (proportional set
  size: shared pages divided among the processes that map them) and the file-backed share
  (``/proc/PID/smaps_rollup``). Page-cache pages of the index count once in PSS however many
  servers map them.

    python bench/bench_search_memory.py    # 100,000 passages, 10,000 sessions, 4 servers
    python bench/bench_search_memory.py --passages 1000000 --servers 8

Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from agentgym.envs import EnvPool
from agentgym.envs.search import build_index

sys.path.insert(0, str(Path(__file__).parent))
from bench_search import make_corpus, tokens, write_qa  # noqa: E402


def memory_kib(pid: int | str = "self") -> dict[str, int]:
    """Rss, Pss and the file-backed/anonymous parts of a process, in KiB (smaps_rollup)."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            out[key] = int(rest.split()[0])
    return out


def search_actions(texts: list[str], n: int, seed: int) -> list[str]:
    """``n`` replies each searching 2-6 words of a random passage (distinct queries)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = tokens(rng.choice(texts))
        out.append(f"<search>{' '.join(rng.sample(words, rng.randrange(2, 7)))}</search>")
    return out


def bench_sessions(
    index: Path, qa: Path, actions: list[str], threads: int
) -> dict[str, dict[str, int]]:
    """Memory (KiB) of this process at each stage, for ``len(actions)`` sessions."""
    n = len(actions)
    stages = {"start": memory_kib()}
    pool = EnvPool("search", index=index, qa=qa, topk=3, threads=threads)
    stages["pool open"] = memory_kib()
    ids = pool.create(n)
    stages["created"] = memory_kib()
    pool.reset(ids, [i % pool.num_tasks for i in range(n)])
    stages["reset"] = memory_kib()
    batch = pool.step(ids, actions)
    assert all(e is None for e in batch.errors), batch.errors[:3]
    del batch
    stages["one search each"] = memory_kib()
    pool.close(ids)
    stages["closed"] = memory_kib()
    return stages


def start_server(index: Path, qa: Path) -> tuple[subprocess.Popen, str]:
    args = [sys.executable, "-m", "agentgym.cli.envserver", "--env", "search", "--port", "0"]
    args += ["-o", f"index={index}", "-o", f"qa={qa}", "--env-threads", "1"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        if "agentgym-envserver: search on " in line:
            return p, line.rsplit(" ", 1)[-1].strip()
    raise RuntimeError(f"the server did not start (exit {p.wait()})")


def bench_servers(index: Path, qa: Path, actions: list[str], n: int) -> list[dict[str, int]]:
    """Per server: memory after serving ``actions`` through the batch routes."""
    procs = []
    try:
        for _ in range(n):
            procs.append(start_server(index, qa))
        with requests.Session() as http:
            for _, url in procs:
                ids = http.post(f"{url}/batch/create", json={"n": len(actions)}).json()["ids"]
                body = {"ids": ids, "data_idxs": list(range(len(ids)))}
                http.post(f"{url}/batch/reset", json=body).raise_for_status()
                r = http.post(f"{url}/batch/step", json={"ids": ids, "actions": actions})
                r.raise_for_status()
        time.sleep(0.5)
        return [memory_kib(p.pid) for p, _ in procs]
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait(timeout=30)
            p.stdout.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--server-searches", type=int, default=1_000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-search-mem-"))
    try:
        corpus, qa, index = work / "corpus.jsonl", work / "qa.jsonl", work / "index"
        texts = make_corpus(corpus, args.passages, args.vocab, args.seed)
        write_qa(qa, 1000)
        report = build_index(corpus, index, threads=args.threads)
        del texts[args.passages // 10 :]  # queries come from the first tenth; free the rest
        actions = search_actions(texts, args.sessions, args.seed)
        sessions = bench_sessions(index, qa, actions, args.threads)
        servers = bench_servers(index, qa, actions[: args.server_searches], args.servers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"{args.passages:,} passages, index {report.index_bytes / 2**20:.0f} MiB"
    )
    n = args.sessions
    print(f"\n{n:,} sessions in one process (MiB; change per session, KiB)")
    print("| stage | RSS | anonymous | file-backed | anonymous change per session |")
    print("|---|---|---|---|---|")
    previous = None
    for stage, m in sessions.items():
        anon = m.get("Anonymous", 0)
        per = "" if previous is None else f"{(anon - previous) / n:+.2f}"
        print(f"| {stage} | {m['Rss'] / 1024:.1f} | {anon / 1024:.1f} | "
              f"{(m['Rss'] - anon) / 1024:.1f} | {per} |")  # fmt: skip
        previous = anon
    held = sessions["one search each"]["Anonymous"] - sessions["closed"]["Anonymous"]
    print(f"held by an open session after one search (given back by close): {held / n:.2f} KiB")
    print(f"\n{args.servers} agentgym-envserver processes over one index, after "
          f"{args.server_searches:,} searches each (MiB)")  # fmt: skip
    print("| server | RSS | PSS | file-backed RSS | anonymous |")
    print("|---|---|---|---|---|")
    for i, m in enumerate(servers):
        file_backed = m["Rss"] - m.get("Anonymous", 0)
        print(
            f"| {i + 1} | {m['Rss'] / 1024:.1f} | {m['Pss'] / 1024:.1f} | "
            f"{file_backed / 1024:.1f} | {m.get('Anonymous', 0) / 1024:.1f} |"
        )
    rss = sum(m["Rss"] for m in servers) / 1024
    pss = sum(m["Pss"] for m in servers) / 1024
    print(f"| all | {rss:.1f} | {pss:.1f} | | |")


if __name__ == "__main__":
    main()

"""The search env with a remote retriever: a Search-R1-style retrieval server on 127.0.0.1 that
answers from the local index, so remote and local episodes can be compared observation for
observation; batching (one request per batched step), and a retriever that hangs, fails,
answers garbage or the wrong number of lists."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentgym.envs import EnvPool
from agentgym.envs.search import SearchIndex, build_index
from agentgym.envs.search_data import write_dataset


class Retriever:
    """``POST /retrieve`` of Search-R1's ``retrieval_server.py``, ranking with the local index.

    ``mode`` picks the answer: ``ok``, ``hang`` (no reply until released), ``500``,
    ``not_json``, ``wrong_count`` (one list fewer), ``bad_first`` (the first query's list
    is malformed). Every request body is kept in ``requests``."""

    def __init__(self, index_dir: Path, corpus: Path):
        self.index = SearchIndex(str(index_dir))
        rows = [json.loads(line) for line in corpus.read_text().splitlines()]
        self.docs = {row["id"]: row for row in rows}
        self.mode = "ok"
        self.requests: list[dict] = []
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/retrieve"

    def answer(self, body: dict) -> tuple[int, bytes]:
        queries, k = body["queries"], body["topk"]
        lists = [
            [{"document": self.docs[doc_id], "score": score} for doc_id, score in hits]
            for hits in self.index.search(queries, k)
        ]
        if self.mode == "hang":
            self.release.wait(30)
        if self.mode == "500":
            return 500, b"Internal Server Error"
        if self.mode == "not_json":
            return 200, b"<html>oops</html>"
        if self.mode == "wrong_count":
            lists = lists[1:]
        if self.mode == "bad_first":
            lists[0] = [{"document": {"id": "1"}, "score": 1.0}]
        return 200, json.dumps({"result": lists}).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        retriever = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                retriever.requests.append({"path": self.path, **body})
                status, payload = retriever.answer(body)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (timeout tests)
                    pass

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("search-remote")
    write_dataset(out, seed=1, num_questions=40)
    build_index(out / "corpus.jsonl", out / "index", threads=2)
    return {"corpus": out / "corpus.jsonl", "qa": out / "qa.jsonl", "index": out / "index"}


@pytest.fixture
def retriever(world: dict[str, Path]) -> Iterator[Retriever]:
    server = Retriever(world["index"], world["corpus"])
    yield server
    server.close()


def _questions(world: dict[str, Path]) -> list[str]:
    return [json.loads(line)["question"] for line in world["qa"].read_text().splitlines()]


def _entity(question: str) -> str:
    return question.rsplit(" of ", 1)[1].removesuffix(" born?")


def test_remote_episodes_match_local_ones(world: dict[str, Path], retriever: Retriever) -> None:
    options = {"qa": world["qa"], "topk": 3, "max_passage_chars": 40, "threads": 2}
    local = EnvPool("search", index=world["index"], **options)
    remote = EnvPool("search", retriever=retriever.url, **options)
    questions = _questions(world)
    n = 12
    replies = [
        *[f"<think>first hop</think><search>{_entity(q)}</search>" for q in questions[:8]],
        "<search>?!</search>",  # no words: corrective, never sent
        "no tags at all",
        "<answer>nowhere</answer>",
        "<search>zzzz unknown qqqq</search>",  # no passage matches
    ]
    runs = []
    for pool in (local, remote):
        sids = pool.create(n)
        first = pool.reset(sids, list(range(n)))
        batch = pool.step(sids, replies)
        assert batch.errors == [None] * n
        runs.append((first, batch.observations, batch.rewards.tolist(), batch.dones.tolist()))
        runs.append([{k: v for k, v in i.items() if k != "task_id"} for i in pool.info(sids)])
    assert runs[0] == runs[2] and runs[1] == runs[3]
    assert runs[0][1][0].startswith("<information>Doc 1(Title: ") and "..." in runs[0][1][0]
    assert "No passage matches" in runs[0][1][11]
    (request,) = retriever.requests
    sent = sorted({_entity(q) for q in questions[:8]} | {"zzzz unknown qqqq"})
    assert request == {"path": "/retrieve", "queries": sent, "topk": 3, "return_scores": True}


def test_one_request_per_batched_step(world: dict[str, Path], retriever: Retriever) -> None:
    pool = EnvPool("search", retriever=retriever.url, qa=world["qa"], threads=2)
    questions = _questions(world)
    sids = pool.create(32)
    pool.reset(sids, [i % 8 for i in range(32)])  # groups of 4 sessions ask alike
    for step in range(3):
        actions = [f"<search>{_entity(questions[i % 8])} {step}</search>" for i in range(32)]
        batch = pool.step(sids, actions)
        assert batch.errors == [None] * 32
        assert len(retriever.requests) == step + 1
        assert len(retriever.requests[-1]["queries"]) == 8, "identical queries are sent once"
    assert [i["searches"] for i in pool.info(sids)] == [3] * 32


def _mixed_step(pool: EnvPool, world: dict[str, Path]) -> tuple[list[int], object]:
    """Three sessions search, one answers, one replies without tags."""
    questions = _questions(world)
    sids = pool.create(5)
    pool.reset(sids, list(range(5)))
    actions = [f"<search>{_entity(q)}</search>" for q in questions[:3]]
    return sids, pool.step(sids, [*actions, "<answer>Nowhere</answer>", "hm"])


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("500", "HTTP 500"),
        ("not_json", "not JSON"),
        ("wrong_count", "2 result lists for 3 queries"),
    ],
)
def test_a_failing_retriever_fails_only_the_searching_sessions(
    world: dict[str, Path], retriever: Retriever, mode: str, message: str
) -> None:
    pool = EnvPool("search", retriever=retriever.url, qa=world["qa"], retriever_timeout=5)
    retriever.mode = mode
    sids, batch = _mixed_step(pool, world)
    for k in range(3):
        assert batch.errors[k] is not None and message in batch.errors[k], batch.errors[k]
        assert f"retriever {retriever.url}" in batch.errors[k]
    assert batch.errors[3:] == [None, None]
    assert batch.dones[3] and batch.observations[4].startswith("My previous action is invalid")
    # The failed sessions are unchanged and step normally once the retriever recovers.
    assert [i["turns"] for i in pool.info(sids[:3])] == [0, 0, 0]
    retriever.mode = "ok"
    again = pool.step(sids[:3], [f"<search>{_entity(q)}</search>" for q in _questions(world)[:3]])
    assert again.errors == [None] * 3
    assert all(o.startswith("<information>") for o in again.observations)


def test_a_malformed_list_fails_only_its_query(
    world: dict[str, Path], retriever: Retriever
) -> None:
    pool = EnvPool("search", retriever=retriever.url, qa=world["qa"])
    retriever.mode = "bad_first"
    _, batch = _mixed_step(pool, world)
    first = sorted(_entity(q) for q in _questions(world)[:3])[0]  # the request's queries are sorted
    for k, q in enumerate(_questions(world)[:3]):
        if _entity(q) == first:
            assert 'no string "contents"' in batch.errors[k], batch.errors[k]
        else:
            assert batch.errors[k] is None and batch.observations[k].startswith("<information>")


def test_a_hung_retriever_times_out(world: dict[str, Path], retriever: Retriever) -> None:
    pool = EnvPool("search", retriever=retriever.url, qa=world["qa"], retriever_timeout=1.0)
    retriever.mode = "hang"
    start = time.perf_counter()
    _, batch = _mixed_step(pool, world)
    elapsed = time.perf_counter() - start
    assert 0.9 < elapsed < 3.0, elapsed
    assert all("no reply within the timeout" in e for e in batch.errors[:3]), batch.errors
    assert batch.errors[3:] == [None, None]


def test_an_unreachable_retriever_is_a_per_session_error(world: dict[str, Path]) -> None:
    with socket_port() as port:
        url = f"http://127.0.0.1:{port}/retrieve"
    pool = EnvPool("search", retriever=url, qa=world["qa"], retriever_timeout=2)
    _, batch = _mixed_step(pool, world)
    assert all("could not connect" in e for e in batch.errors[:3]), batch.errors
    assert batch.errors[3:] == [None, None]


class socket_port:  # noqa: N801 (a context manager used like a function)
    """A loopback port that was free a moment ago (nothing listens on it after the block)."""

    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.s.close()


def test_retriever_options_are_checked(world: dict[str, Path]) -> None:
    url = "http://127.0.0.1:9/retrieve"
    with pytest.raises(ValueError, match="not both"):
        EnvPool("search", index=world["index"], retriever=url, qa=world["qa"])
    with pytest.raises(ValueError, match="https is not supported"):
        EnvPool("search", retriever="https://example.com/retrieve", qa=world["qa"])
    with pytest.raises(ValueError, match="retriever_timeout"):
        EnvPool("search", retriever=url, qa=world["qa"], retriever_timeout=0)
    with pytest.raises(ValueError, match="only applies with `retriever`"):
        EnvPool("search", index=world["index"], qa=world["qa"], retriever_timeout=3)
    with pytest.raises(ValueError, match="retriever"):
        EnvPool("search", qa=world["qa"])


def test_the_env_server_serves_a_remote_retriever(
    world: dict[str, Path], retriever: Retriever
) -> None:
    """agentgym-envserver's sessions search through the retriever; a batched step over HTTP
    is still one retrieval request."""
    from agentgym import _envserver

    options = {"retriever": retriever.url, "qa": str(world["qa"])}
    server = _envserver.Server("search", host="127.0.0.1", port=0, options=options)
    try:
        pool = EnvPool.remote(f"http://127.0.0.1:{server.port}", "search")
        sids = pool.create(6)
        pool.reset(sids, list(range(6)))
        queries = [f"<search>{_entity(q)}</search>" for q in _questions(world)[:6]]
        batch = pool.step(sids, queries)
        assert batch.errors == [None] * 6
        assert all(o.startswith("<information>Doc 1(Title: ") for o in batch.observations)
        assert len(retriever.requests) == 1 and len(retriever.requests[0]["queries"]) == 6
    finally:
        server.stop()

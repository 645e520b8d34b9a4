"""The ``agentgym-envserver`` command line: starts, serves, stops cleanly on Ctrl-C."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from httphelpers import envserver_process, native_server, url_of

from agentgym.cli.envserver import TOKEN_ENV, build_parser, parse_options
from agentgym.httpguard import exposed_without_token, resolve_token


def test_cli_serves_and_stops_on_ctrl_c(procs):
    p = envserver_process("textcraft", "--token", "t0k", "--max-sessions", "2")
    procs.append(p)
    auth = {"Authorization": "Bearer t0k"}
    health = requests.get(p.url + "/health", headers=auth, timeout=10).json()
    assert health["env"] == "textcraft" and health["max_sessions"] == 2
    assert requests.get(p.url + "/health", timeout=10).status_code == 401
    assert p.interrupt() == 0
    assert any("stopping" in line for line in p.output) or p.p.returncode == 0


def test_token_from_a_file_and_any_case_of_the_scheme(procs, tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    p = envserver_process("babyai", "--token-file", str(secret))
    procs.append(p)
    for scheme in ("Bearer", "bearer", "BEARER"):
        headers = {"Authorization": f"{scheme} s3cret"}
        assert requests.get(p.url + "/health", headers=headers, timeout=10).status_code == 200
    headers = {"Authorization": "Basic s3cret"}
    assert requests.get(p.url + "/health", headers=headers, timeout=10).status_code == 401
    assert not any("warning" in line for line in p.output)


def test_token_sources_and_exposure_warning(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTGYM_ENVSERVER_TOKEN", raising=False)
    parse = build_parser().parse_args
    assert resolve_token(parse(["--env", "babyai"]), TOKEN_ENV) is None
    monkeypatch.setenv("AGENTGYM_ENVSERVER_TOKEN", "from-env")
    assert resolve_token(parse(["--env", "babyai"]), TOKEN_ENV) == "from-env"
    assert resolve_token(parse(["--env", "babyai", "--token", "t"]), TOKEN_ENV) == "t"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no token"):
        resolve_token(parse(["--env", "babyai", "--token-file", str(empty)]), TOKEN_ENV)
    with pytest.raises(ValueError, match="cannot read"):
        resolve_token(
            parse(["--env", "babyai", "--token-file", str(tmp_path / "missing")]), TOKEN_ENV
        )
    with pytest.raises(ValueError, match="not both"):
        resolve_token(
            parse(["--env", "babyai", "--token", "t", "--token-file", str(empty)]), TOKEN_ENV
        )
    assert exposed_without_token("0.0.0.0", None) and exposed_without_token("10.1.2.3", "")
    assert not exposed_without_token("0.0.0.0", "t")
    assert not exposed_without_token("127.0.0.1", None) and not exposed_without_token("::1", None)
    assert not exposed_without_token("localhost", None)


def test_cli_warns_when_exposed_without_token(procs, monkeypatch):
    monkeypatch.delenv("AGENTGYM_ENVSERVER_TOKEN", raising=False)
    p = envserver_process("babyai", "--host", "0.0.0.0")
    procs.append(p)
    assert p.interrupt() == 0
    assert any("without a bearer token" in line for line in p.output), p.output


def test_cli_options():
    args = build_parser().parse_args(["--env", "babyai", "-o", "primitive=true"])
    assert args.host == "127.0.0.1" and args.port == 36001
    assert parse_options("babyai", ["primitive=true"]) == {"primitive": "true"}
    assert "recipes_dir" in parse_options("textcraft", [])


def test_blocking_threads_option():
    assert build_parser().parse_args(["--env", "babyai"]).blocking_threads == 2
    with pytest.raises(ValueError, match="blocking_threads must be at least 1"):
        native_server("babyai", blocking_threads=0)
    server = native_server("babyai", blocking_threads=3, env_threads=2)
    url = url_of(server)
    try:
        ids = requests.post(url + "/batch/create", json={"n": 12}, timeout=10).json()["ids"]
        requests.post(url + "/batch/reset", json={"ids": ids, "data_idxs": ids}, timeout=10)

        def play(share: list[int]) -> list[str]:
            reply = requests.post(
                url + "/batch/step",
                json={"ids": share, "actions": ["turn left"] * len(share)},
                timeout=10,
            ).json()
            return reply["errors"]

        with ThreadPoolExecutor(3) as ex:
            errors = [e for errs in ex.map(play, [ids[k::3] for k in range(3)]) for e in errs]
        assert errors == [None] * 12
    finally:
        server.stop()


def test_closed_ids_stay_closed_when_steps_race_closes():
    """With several blocking threads a /step may finish after a /close of its session; the id
    stays closed (a second close answers false) and no session is left behind."""
    server = native_server("babyai", blocking_threads=4, env_threads=2)
    url = url_of(server)
    try:
        with requests.Session() as a, requests.Session() as b, ThreadPoolExecutor(2) as ex:
            for _ in range(150):
                sid = a.post(url + "/create", json={}, timeout=10).json()["id"]
                a.post(url + "/reset", json={"id": sid, "data_idx": 0}, timeout=10)
                step = ex.submit(a.post, url + "/step", json={"id": sid, "action": "turn left"})
                close = ex.submit(b.post, url + "/close", json={"id": sid})
                assert step.result().status_code in (200, 404, 409)
                assert close.result().json() is True
                assert b.post(url + "/close", json={"id": sid}, timeout=10).json() is False
        assert requests.get(url + "/health", timeout=10).json()["sessions"] == 0
    finally:
        server.stop()


def test_cli_serves_the_search_env(procs, tmp_path):
    from agentgym.envs.search import build_index
    from agentgym.envs.search_data import write_dataset

    data = write_dataset(tmp_path, seed=1, num_questions=10)
    build_index(tmp_path / "corpus.jsonl", tmp_path / "index", threads=1)
    index, qa = f"index={tmp_path / 'index'}", f"qa={tmp_path / 'qa.jsonl'}"
    p = envserver_process("search", "-o", index, "-o", qa, "-o", "topk=2")
    procs.append(p)
    ids = requests.post(p.url + "/batch/create", json={"n": 2}, timeout=10).json()["ids"]
    reset = requests.post(p.url + "/batch/reset", json={"ids": ids, "data_idxs": [0, 1]}).json()
    questions = [q["question"] for q in data.questions[:2]]
    assert reset["observations"] == [f"Question: {q}" for q in questions]
    actions = ["<search>firm founded novel</search>", "no tags here"]
    step = requests.post(p.url + "/batch/step", json={"ids": ids, "actions": actions}).json()
    first, second = step["observations"]
    assert first.startswith("<information>Doc 1(Title: ") and "Doc 3(" not in first
    assert second.startswith("My previous action is invalid.")
    assert p.interrupt() == 0

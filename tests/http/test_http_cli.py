"""The ``agentgym-envserver`` command line: starts, serves, stops cleanly on Ctrl-C."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from httphelpers import envserver_process, native_server, url_of

from agentgym.cli.envserver import build_parser, parse_options


def test_cli_serves_and_stops_on_ctrl_c(procs):
    p = envserver_process("textcraft", "--token", "t0k", "--max-sessions", "2")
    procs.append(p)
    auth = {"Authorization": "Bearer t0k"}
    health = requests.get(p.url + "/health", headers=auth, timeout=10).json()
    assert health["env"] == "textcraft" and health["max_sessions"] == 2
    assert requests.get(p.url + "/health", timeout=10).status_code == 401
    assert p.interrupt() == 0
    assert any("stopping" in line for line in p.output) or p.p.returncode == 0


def test_cli_options():
    args = build_parser().parse_args(["--env", "babyai", "-o", "primitive=true"])
    assert args.host == "127.0.0.1" and args.port == 36001
    assert parse_options("babyai", ["primitive=true"]) == {"primitive": "true"}
    assert "recipes_dir" in parse_options("textcraft", [])


def test_blocking_threads_option():
    assert build_parser().parse_args(["--env", "babyai"]).blocking_threads == 1
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

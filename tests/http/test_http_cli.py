"""The ``agentgym-envserver`` command line: starts, serves, stops cleanly on Ctrl-C."""

from __future__ import annotations

import requests
from httphelpers import envserver_process

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

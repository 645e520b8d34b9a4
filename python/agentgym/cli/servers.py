"""Env servers a run starts for itself (``env.serve``): ``agentgym-envserver`` for a native env,
``agentgym-sciworld-server`` for ScienceWorld, on free ports of 127.0.0.1.

``agentgym train`` and ``agentgym eval`` wrap their work in :func:`served`: the servers start,
answer ``GET /health``, and the config handed on has ``env.remote`` set to their URLs (so the
saved ``config.yaml`` names the servers the actors used); they are stopped when the work ends.
A server that does not come up within the timeout, or exits, is an error with its log's tail.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from agentgym.cli.processes import LocalChild, exit_description, spawn, stop_all
from agentgym.config import RunConfig

START_TIMEOUT_S = 120.0  # a ScienceWorld server imports the simulator (a JVM) before it answers
STOP_GRACE_S = 10.0


class ServerFailed(RuntimeError):
    """An env server did not start or died; the message has its log's last lines."""


def server_command(config: RunConfig, port: int) -> list[str]:
    """The command line of one server for ``config.env`` on ``port``."""
    env = config.env
    if env.name == "sciworld":
        head = [sys.executable, "-m", "agentgym.envs.sciworld_server"]
    else:
        options = [a for k, v in env.options.items() for a in ("--option", f"{k}={v}")]
        head = [sys.executable, "-m", "agentgym.cli.envserver", "--env", env.name, *options]
    return [*head, "--host", "127.0.0.1", "--port", str(port), *env.serve_args]


@contextlib.contextmanager
def served(config: RunConfig, log_dir: Path) -> Iterator[tuple[RunConfig, list]]:
    """Start ``config.env.serve`` servers (logs in ``log_dir/envserver<i>.log``); yields the
    config using them and the server children (``poll``/``tail``, for watching). Without
    ``env.serve``, yields ``config`` unchanged and no children."""
    if config.env.serve == 0:
        yield config, []
        return
    children: list[LocalChild] = []
    try:
        urls = []
        for i in range(config.env.serve):
            port = _free_port()
            name = f"envserver{i}"
            children.append(spawn(name, server_command(config, port), log_dir / f"{name}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        for child, url in zip(children, urls, strict=True):
            _wait_healthy(child, url)
        yield replace(config, env=replace(config.env, remote=tuple(urls))), children
    finally:
        stop_all(children, grace_s=STOP_GRACE_S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(child: LocalChild, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            raise ServerFailed(
                f"{child.name} ({url}) {exit_description(code)} at start; last lines of "
                f"{child.log_path}:\n{child.tail()}"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2.0) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise ServerFailed(
        f"{child.name} ({url}) did not answer GET /health within {START_TIMEOUT_S:.0f} s; last "
        f"lines of {child.log_path}:\n{child.tail()}"
    )

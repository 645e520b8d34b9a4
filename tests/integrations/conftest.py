"""Helpers of the integration tests: each stack's tests skip, naming the install command, when
its extra is absent (tests/run.sh installs them)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


def need(module: str, extra: str, how: str = "tests/run.sh does") -> Any:
    """``module`` imported, or the test skipped with the command that installs it."""
    return pytest.importorskip(
        module, reason=f"needs {module}: pip install 'agentgym-rs[{extra}]' ({how})"
    )


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_ping_interval=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()

"""Fixtures shared by every test folder."""

import os
from collections.abc import Callable

import pytest


def _run_forked(body: Callable[[], bool]) -> int:
    """Runs ``body`` in a forked child: 0 if it returned True, 3 if False, 1 if it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 3
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    status = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    return status[0] if status else 1


@pytest.fixture
def run_forked() -> Callable[[Callable[[], bool]], int]:
    """``run_forked(body)``: the child's verdict on ``body()`` (0: True) after ``os.fork()``."""
    return _run_forked

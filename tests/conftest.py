"""Fixtures shared by every test folder."""

import os
import socket
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


def _free_base_port(count: int = 3) -> int:
    """A port p with p .. p + count - 1 free on 127.0.0.1 (checked, not reserved)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            for p in range(base + 1, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports")


@pytest.fixture
def free_base_port() -> Callable[..., int]:
    """``free_base_port(count=3)``: a base port with the ``count`` ports from it free."""
    return _free_base_port


REAL_PARTS = ("tests/hub/test_hub_browser.py", "tests/cli/test_ray_launch.py",
              "tests/http/test_http_sciworld.py")  # fmt: skip
"""Tests of the real parts (a browser, a Ray cluster, ScienceWorld's Java server): they skip
where those are missing, and CI, which installs them (``tests/run.sh``), sets
``AGENTGYM_REQUIRE_REAL_PARTS=1`` so that a skip of theirs fails the run instead."""


def _required_skip(path: str, report) -> None:
    """Turn ``report``'s skip into a failure where the real parts are required."""
    if not (report.skipped and os.environ.get("AGENTGYM_REQUIRE_REAL_PARTS") == "1"):
        return
    if not any(path.replace(os.sep, "/").endswith(part) for part in REAL_PARTS):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped where CI requires it to run (AGENTGYM_REQUIRE_REAL_PARTS=1): {reason}"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _required_skip(str(item.path), outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _required_skip(str(getattr(collector, "path", "")), outcome.get_result())

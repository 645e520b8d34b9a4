"""Fixtures of the HTTP tests (servers on free loopback ports, stopped or killed after)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from httphelpers import Proc, native_server, url_of


@pytest.fixture
def textcraft_url() -> Iterator[str]:
    server = native_server("textcraft")
    yield url_of(server)
    server.stop()


@pytest.fixture
def babyai_url() -> Iterator[str]:
    server = native_server("babyai")
    yield url_of(server)
    server.stop()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Subprocesses to kill at the end of the test."""
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()

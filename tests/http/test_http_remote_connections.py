"""EnvPool.remote's pooled connections against what servers do to them between calls: a server
that closes idle connections sooner than the client would (uvicorn's and gunicorn's short
keep-alives), and a connection carrying a surplus reply (two responses to one request)."""

from __future__ import annotations

import sys
import time

import pytest
from httphelpers import HERE, Proc
from proxies import DuplicatingProxy

from agentgym.envs import EnvPool

TASKS = [0, 1, 2, 3]


def test_connections_the_server_closed_while_idle_are_not_reused(procs):
    # uvicorn closing kept-alive connections after 1 s; the pool pauses 1.5 s between calls
    server = Proc([sys.executable, str(HERE / "uvicorn_agentgym_app.py"), "--keep-alive", "1"],
                  "PORT")  # fmt: skip
    procs.append(server)
    pool = EnvPool.remote(server.url, "textcraft", num_tasks=10)
    ids = pool.create(4)
    pool.reset(ids, TASKS)
    for k in (1, 2):
        time.sleep(1.5)
        batch = pool.step(ids, ["look"] * 4)
        assert batch.errors == [None] * 4, batch.errors
        assert batch.observations == [f"{t}:{k}:look" for t in TASKS]


def _expected(actions: list[str], steps: int) -> list[list[str]]:
    """Each step's observations of BabyAI tasks ``TASKS`` played here, in process."""
    local = EnvPool("babyai")
    ids = local.create(len(TASKS))
    local.reset(ids, TASKS)
    return [local.step(ids, actions).observations for _ in range(steps)]


@pytest.mark.parametrize("at_once", [True, False], ids=["surplus-at-once", "surplus-one-late"])
def test_a_surplus_reply_never_answers_the_next_request(babyai_url, at_once):
    port = int(babyai_url.rsplit(":", 1)[1])
    proxy = DuplicatingProxy(port, "/batch/step", at_once=at_once)
    try:
        pool = EnvPool.remote(proxy.url, "babyai")
        ids = pool.create(len(TASKS))
        pool.reset(ids, TASKS)
        actions = ["turn left"] * len(TASKS)
        want = _expected(actions, 2)
        first = pool.step(ids, actions)
        assert first.observations == want[0] and proxy.duplicated == 1
        time.sleep(0.2)  # the copy has arrived on the idle connection
        second = pool.step(ids, actions)
        if at_once:  # the surplus bytes are seen on the idle connection, which is dropped
            assert second.errors == [None] * 4, second.errors
            assert second.observations == want[1]
        else:  # the reply echoes the first request's number: refused, the step may have acted
            assert all("answers request" in e for e in second.errors), second.errors
            # the refused request still reached the server: let it finish before the reset
            assert proxy.late_request_done.wait(10)
        pool.reset(ids, TASKS)  # the desynchronised connection is gone: the next calls are right
        again = pool.step(ids, actions)
        assert again.errors == [None] * 4 and again.observations == want[0]
    finally:
        proxy.close()

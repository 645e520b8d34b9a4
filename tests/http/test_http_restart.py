"""Sessions are bound to the server that created them: after agentgym-envserver restarts on the
same address (numbering its sessions from 1 again), EnvPool.remote's old sessions are reported
lost instead of stepping the new sessions' envs; a server that hands out one id twice is not
believed either."""

from __future__ import annotations

import pytest
import requests
from httphelpers import fake_server, native_server, url_of

from agentgym.envs import EnvPool, SessionError


def test_a_restarted_servers_new_sessions_are_not_driven_by_old_ones():
    server = native_server("babyai")
    port, url = server.port, url_of(server)
    pool = EnvPool.remote(url, "babyai")
    old = pool.create(2)
    pool.reset(old, [0, 1])
    server.stop()
    server = native_server("babyai", port=port)
    try:
        health = requests.get(url + "/health", timeout=10)
        assert health.headers["x-agentgym-instance"] == health.json()["instance"]
        # another client's sessions on the new server get the remote ids the old ones had
        theirs = requests.post(url + "/batch/create", json={"n": 2}, timeout=10).json()["ids"]
        requests.post(url + "/batch/reset", json={"ids": theirs, "data_idxs": [7, 8]}, timeout=10)
        before = [requests.get(f"{url}/observation?id={i}", timeout=10).json() for i in theirs]
        batch = pool.step(old, ["turn left", "turn left"])
        assert all(e is not None and "restarted" in e for e in batch.errors), batch.errors
        after = [requests.get(f"{url}/observation?id={i}", timeout=10).json() for i in theirs]
        assert after == before, "an old session stepped a new session's env"
        with pytest.raises(SessionError, match="lost"):
            pool.reset(old, [0, 1])  # lost for good: not even a reset is sent
        assert pool.stats()["lost_sessions"] == 2
        assert [i["phase"] for i in pool.info(old)] == ["lost", "lost"]
        # the first create after the restart goes through (a fresh connection, not a dead one)
        new = pool.create(2)
        pool.reset(new, [0, 1])
        assert pool.step(new, ["turn left", "turn left"]).errors == [None, None]
        pool.close(old)
        assert requests.get(url + "/health", timeout=10).json()["sessions"] == 4
    finally:
        server.stop()


def test_an_id_handed_out_twice_loses_the_session_that_held_it(procs):
    server = fake_server("reuse_ids")  # /create answers ids 0, 1, 0, 1, ...
    procs.append(server)
    pool = EnvPool.remote(server.url, "textcraft", num_tasks=10)
    first = pool.create(2)
    pool.reset(first, [3, 4])
    [newer] = pool.create(1)  # remote id 0 again: the session that held it is lost
    pool.reset([newer], [5])
    batch = pool.step([*first, newer], ["look"] * 3)
    # the two creates of `first` run at once, so either of its sessions may hold remote id 0
    lost = [i for i in (0, 1) if batch.errors[i] is not None]
    assert len(lost) == 1 and "remote id again" in batch.errors[lost[0]], batch.errors
    kept = 1 - lost[0]
    assert batch.errors[kept] is None and batch.errors[2] is None, batch.errors
    assert [batch.observations[kept], batch.observations[2]] == [f"{3 + kept}:1:look", "5:1:look"]
    assert pool.stats()["lost_sessions"] == 1
    with pytest.raises(ConnectionError, match="handed out remote id . twice"):
        pool.create(3)  # the same id twice in one create is refused
    assert pool.stats()["lost_sessions"] == 3  # and the sessions here that held 0 and 1 are lost

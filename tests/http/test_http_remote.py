"""EnvPool.remote: sessions on agentgym-envservers behave like local ones."""

from __future__ import annotations

import numpy as np
import pytest
from httphelpers import native_server, url_of

from agentgym.envs import EnvPool


@pytest.fixture
def two_babyai_servers():
    servers = [native_server("babyai") for _ in range(2)]
    yield [url_of(s) for s in servers], servers
    for s in servers:
        s.stop()


@pytest.mark.parametrize("batch", [True, False], ids=["batch-routes", "per-session-routes"])
def test_remote_matches_local(two_babyai_servers, batch):
    urls, servers = two_babyai_servers
    remote = EnvPool.remote(urls, "babyai", batch=batch)
    local = EnvPool("babyai")
    n = 12
    rids, lids = remote.create(n), local.create(n)
    assert len(set(rids)) == n and len(remote) == n
    assert [s.sessions() for s in servers] == [n // 2, n // 2]  # spread evenly
    assert remote.num_tasks == local.num_tasks
    tasks = list(range(3, 3 + n))
    assert remote.reset(rids, tasks) == local.reset(lids, tasks)
    rng = np.random.default_rng(0)
    for _ in range(6):
        actions = [
            str(rng.choice(["turn left", "turn right", "move forward", "go to goal"]))
            for _ in range(n)
        ]
        r, l_ = remote.step(rids, actions), local.step(lids, actions)
        assert r.observations == l_.observations
        np.testing.assert_allclose(r.rewards, l_.rewards)
        assert r.dones.tolist() == l_.dones.tolist() and r.errors == l_.errors
    assert remote.observations(rids) == local.observations(lids)
    info = remote.info(rids[:1])[0]
    assert info["phase"] in ("running", "done") and info["task_id"] == 3 and info["server"] in urls
    remote.close(rids)
    assert len(remote) == 0 and [s.sessions() for s in servers] == [0, 0]


def test_remote_horizon_and_per_session_errors(babyai_url):
    pool = EnvPool.remote(babyai_url, "babyai", max_action_bytes=32)
    ids = pool.create(3)
    pool.set_horizon(2)
    pool.reset(ids[:2], [0, 1])
    b = pool.step(ids, ["turn left", "x" * 40, "turn left"])
    assert b.errors[0] is None
    assert "over the 32-byte cap" in b.errors[1]
    assert "has not been reset" in b.errors[2]
    assert not b.ok
    with pytest.raises(NotImplementedError, match="local pools only"):
        pool.sample_actions(ids[:1], seed=0)
    b = pool.step(ids[:1], ["turn left"])
    assert b.truncated.tolist() == [True]
    b = pool.step(ids[:1], ["turn left"])
    assert "truncated at the horizon cap" in b.errors[0]
    with pytest.raises(KeyError, match="999"):
        pool.step([999], ["x"])
    with pytest.raises(ValueError, match="more than once"):
        pool.step([ids[0], ids[0]], ["x", "x"])
    with pytest.raises(ValueError, match="out of range"):
        pool.reset(ids[:1], [10**9])
    assert pool.stats()["step_errors"] == 3


def test_remote_session_handle_and_async(textcraft_url):
    import asyncio

    pool = EnvPool.remote([textcraft_url], "textcraft")
    with pool.session() as s:
        obs = s.reset(0)
        assert "Goal: craft" in obs
        step_obs, reward, done, truncated = s.step("inventory")
        assert step_obs.startswith("Inventory") and not done and not truncated
    assert len(pool) == 0
    ids = pool.create(2)
    pool.reset(ids, [1, 2])
    batch = asyncio.run(pool.astep(ids, ["inventory", "inventory"]))
    assert batch.ok


def test_remote_survives_fork(babyai_url, run_forked):
    pool = EnvPool.remote(babyai_url, "babyai")
    ids = pool.create(2)
    pool.reset(ids, [0, 1])
    assert pool.step(ids, ["turn left"] * 2).ok

    def child() -> bool:  # its own runtime and connections
        child_ids = pool.create(1)
        pool.reset(child_ids, [2])
        return pool.step(child_ids, ["turn right"]).ok

    assert run_forked(child) == 0
    assert pool.step(ids, ["turn right"] * 2).ok


def test_env_idx_dialect(procs):
    from httphelpers import fake_server

    fake = fake_server("ok", "--dialect", "env_idx")
    procs.append(fake)
    pool = EnvPool.remote(fake.url, "searchqa", dialect="env_idx", num_tasks=100)
    ids = pool.create(2)
    assert pool.reset(ids, [7, 8]) == ["task 7", "task 8"]
    b = pool.step(ids, ["search a", "search b"])
    assert b.observations == ["7:1:search a", "8:1:search b"] and b.ok
    pool.close(ids)
    assert pool.stats()["close_errors"] == 0

"""The EnvPool facade: batches, bad input, async APIs, per-session handles."""

import asyncio

import numpy as np
import pytest

from agentgym.envs import EnvPool, SessionError, StepBatch, env_names


@pytest.fixture(params=["babyai", "textcraft"])
def pool(request):
    return EnvPool(request.param, threads=2)


def test_env_names():
    assert env_names() == ["babyai", "search", "textcraft", "webnav"]


def test_batched_episode(pool):
    ids = pool.create(8)
    assert len(set(ids)) == 8 and len(pool) == 8
    obs = pool.reset(ids, list(range(8)))
    assert all(isinstance(o, str) and o for o in obs)
    batch = pool.step(ids, ["nonsense action"] * 8)
    assert isinstance(batch, StepBatch) and len(batch) == 8
    assert batch.rewards.dtype == np.float32 and batch.dones.dtype == np.bool_
    assert batch.truncated.dtype == np.bool_
    assert batch.ok, batch.errors
    pool.close(ids)
    assert len(pool) == 0


def test_same_task_same_episode(pool):
    a, b = pool.create(2)
    assert pool.reset([a], [5]) == pool.reset([b], [5])
    other = EnvPool(pool.env)
    (c,) = other.create(1)
    assert other.reset([c], [5]) == pool.reset([a], [5])
    assert pool.reset([a], [5]) != pool.reset([b], [6])


def test_unknown_closed_and_duplicate_ids(pool):
    ids = pool.create(2)
    pool.reset(ids, [0, 1])
    with pytest.raises(KeyError, match="12345"):
        pool.step([12345], ["x"])
    with pytest.raises(ValueError, match="more than once"):
        pool.step([ids[0], ids[0]], ["x", "y"])
    with pytest.raises(ValueError, match="2 ids but 1 actions"):
        pool.step(ids, ["x"])
    pool.close([ids[0]])
    with pytest.raises(KeyError, match=str(ids[0])):
        pool.reset([ids[0]], [0])
    with pytest.raises(KeyError, match=str(ids[0])):
        pool.close([ids[0]])
    # The surviving session is untouched by all of the above.
    assert pool.step([ids[1]], ["x"]).ok
    flags = np.zeros(2, bool)
    assert StepBatch([], np.zeros(0), flags[:0], flags[:0], []).ok
    assert not StepBatch(["", "a"], np.zeros(2), flags, flags, ["e", None]).ok


def test_task_ids_checked(pool):
    ids = pool.create(1)
    with pytest.raises(ValueError, match="-1"):
        pool.reset(ids, [-1])
    if pool.env == "textcraft":  # wraps past the end, as AgentGym's server does
        assert pool.reset(ids, [pool.num_tasks]) == pool.reset(ids, [0])
    elif pool.env == "babyai":  # every id is a seed, as on AgentGym's server
        assert pool.reset(ids, [pool.num_tasks]) != pool.reset(ids, [0])
    else:
        with pytest.raises(ValueError, match="out of range"):
            pool.reset(ids, [pool.num_tasks])


def test_bad_actions_are_per_session(pool):
    ids = pool.create(4)
    pool.reset(ids, [0, 1, 2, 3])
    batch = pool.step(ids, ["x" * 10_000, "\ud800bad", "inventory", "\x00\x01 garbage \u2603"])
    assert "10000 bytes" in batch.errors[0]
    assert "UTF-8" in batch.errors[1]
    assert batch.errors[2] is None and batch.errors[3] is None
    with pytest.raises(TypeError, match=r"actions\[1\] must be str"):
        pool.step(ids[:2], ["ok", 3])


def test_not_reset_and_finished_sessions():
    pool = EnvPool("textcraft")
    (sid,) = pool.create(1)
    assert "not been reset" in pool.step([sid], ["inventory"]).errors[0]
    pool.reset([sid], [0])
    pool.set_horizon(2)
    assert not pool.step([sid], ["inventory"]).truncated[0]
    b = pool.step([sid], ["inventory"])
    assert b.truncated[0] and not b.dones[0]
    assert "horizon cap" in pool.step([sid], ["inventory"]).errors[0]
    assert pool.info([sid])[0]["phase"] == "truncated"
    with pytest.raises(ValueError, match=">= 1"):
        pool.set_horizon(0)
    pool.set_horizon(None)
    assert pool.horizon is None


def test_send_recv_and_astep(pool):
    ids = pool.create(3)
    pool.reset(ids, [0, 1, 2])
    pool.send(ids, ["a", "b", "c"])
    with pytest.raises(RuntimeError, match="twice"):
        pool.send(ids, ["a", "b", "c"])
    assert len(pool.recv()) == 3
    with pytest.raises(RuntimeError, match="without a pending"):
        pool.recv()

    async def main():
        obs = await pool.areset(ids, [3, 4, 5])
        batch = await pool.astep(ids, ["a", "b", "c"])
        return obs, batch

    obs, batch = asyncio.run(main())
    assert len(obs) == 3 and len(batch) == 3


def test_session_handle():
    pool = EnvPool("textcraft")
    with pool.session() as s:
        first = s.reset(3)
        assert s.observation == first
        obs, reward, done, truncated = s.step("inventory")
        assert isinstance(obs, str) and reward == 0.0 and not done and not truncated
        sid = s.id
    assert sid not in pool.ids()
    s2 = pool.session()
    with pytest.raises(SessionError, match="not been reset"):
        s2.step("inventory")


def test_unknown_env_and_option():
    with pytest.raises(ValueError, match="known envs"):
        EnvPool("nope")
    with pytest.raises(ValueError, match="not_an_option"):
        EnvPool("babyai", not_an_option=1)


def test_missing_recipe_dir_names_the_path(tmp_path):
    missing = tmp_path / "no-such-dir"
    with pytest.raises(ValueError, match="no-such-dir"):
        EnvPool("textcraft", recipes_dir=str(missing))


def test_sample_task_ids_seeded():
    a = EnvPool("babyai", seed=3).sample_task_ids(5)
    assert a == EnvPool("babyai", seed=3).sample_task_ids(5)
    assert a != EnvPool("babyai", seed=4).sample_task_ids(5)


def test_sample_actions_draws_from_each_menu():
    pool = EnvPool("babyai", threads=2)
    ids = pool.create(40)
    fresh = pool.sample_actions(ids[:2], seed=0)
    assert fresh == [None, None]  # not reset yet: no menu
    pool.reset(ids, list(range(40)))
    menus = pool.available_actions(ids)
    draws = pool.sample_actions(ids, seed=0)
    assert all(a in menu for a, menu in zip(draws, menus, strict=True))
    assert draws == pool.sample_actions(ids, seed=0)  # a pure function of (seed, id, menu)
    others = [pool.sample_actions(ids, seed=s) for s in range(1, 6)]
    assert any(o != draws for o in others)
    batch = pool.step(ids, draws)
    assert batch.ok, batch.errors
    with pytest.raises(KeyError, match="999999"):
        pool.sample_actions([999999], seed=0)


def test_sample_actions_without_menus():
    pool = EnvPool("textcraft")
    ids = pool.create(2)
    pool.reset(ids, [0, 1])
    assert pool.available_actions(ids) == [None, None]
    assert pool.sample_actions(ids, seed=0) == [None, None]


def play(pool, ids, rounds, seed):
    """Steps random valid actions, resetting finished episodes; True if no step failed."""
    ok = True
    for r in range(rounds):
        batch = pool.step(ids, pool.sample_actions(ids, seed=seed + r))
        ok = ok and batch.ok
        finished = [i for i, d, t in zip(ids, batch.dones, batch.truncated, strict=True) if d or t]
        if finished:
            pool.reset(finished, [i % 40 for i in finished])
    return ok


def test_local_pool_with_helper_threads_survives_fork(run_forked):
    # The helper threads do not exist in a forked child: its batches run on the calling thread.
    pool = EnvPool("babyai", threads=2)
    ids = pool.create(64)
    pool.reset(ids, list(range(64)))
    assert play(pool, ids, 40, seed=0)  # enough batches for the tuner to have tried split ones
    assert run_forked(lambda: play(pool, ids, 40, seed=1)) == 0
    assert play(pool, ids, 5, seed=2)

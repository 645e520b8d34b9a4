"""Coalescing sessions: concurrent one-at-a-time calls go out as batched pool calls, give the
same episodes as direct calls, and keep their errors to themselves."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentgym.envs import (
    AsyncCoalescer,
    ClosedSessionError,
    EnvPool,
    SessionError,
    ThreadCoalescer,
)

ACTIONS = ["turn left", "move forward", "turn right", "move forward", "toggle"]


@pytest.fixture(scope="module")
def pool() -> EnvPool:
    return EnvPool("babyai", threads=1)


def direct_episode(pool: EnvPool, task_id: int, steps: int) -> list[tuple]:
    """What a plain EnvSession sees on ``task_id`` with the fixed action cycle."""
    with pool.session() as s:
        out: list[tuple] = [s.reset(task_id)]
        for k in range(steps):
            out.append(s.step(ACTIONS[k % len(ACTIONS)]))
            if out[-1][2] or out[-1][3]:
                break
    return out


def test_async_sessions_batch_and_match_direct_calls(pool):
    coalescer = AsyncCoalescer(pool, window_s=0.05)

    async def episode(task_id: int) -> list[tuple]:
        async with coalescer.session() as s:
            out: list[tuple] = [await s.reset(task_id)]
            for k in range(12):
                out.append(await s.step(ACTIONS[k % len(ACTIONS)]))
                if out[-1][2] or out[-1][3]:
                    break
        return out

    async def main():
        return await asyncio.gather(*(episode(t) for t in range(48)))

    results = asyncio.run(main())
    assert results == [direct_episode(pool, t, 12) for t in range(48)]
    stats = coalescer.stats()
    assert stats.mean_batch > 40  # nearly every call of a turn in one batch
    assert stats.sessions_opened == stats.sessions_closed == 48
    assert coalescer.open_sessions == 0
    coalescer.shutdown()


def test_thread_sessions_batch_and_match_direct_calls(pool):
    coalescer = ThreadCoalescer(pool, window_s=0.05)
    results: dict[int, list[tuple]] = {}

    def episode(task_id: int) -> None:
        with coalescer.session() as s:
            out: list[tuple] = [s.reset(task_id)]
            for k in range(12):
                out.append(s.step(ACTIONS[k % len(ACTIONS)]))
                if out[-1][2] or out[-1][3]:
                    break
        results[task_id] = out

    threads = [threading.Thread(target=episode, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[t] for t in range(16)] == [direct_episode(pool, t, 12) for t in range(16)]
    assert coalescer.stats().mean_batch > 4
    assert coalescer.stats().largest_batch <= 16


def test_multi_session_calls_stand_in_for_the_pool(pool):
    coalescer = AsyncCoalescer(pool)

    async def main():
        ids = coalescer.create(3)
        first = await coalescer.areset(ids, [0, 1, 2])
        batch = await coalescer.astep(ids, ["turn left"] * 3)
        coalescer.close(ids)
        return first, batch

    first, batch = asyncio.run(main())
    assert first == pool.reset(ids := pool.create(3), [0, 1, 2])
    direct = pool.step(ids, ["turn left"] * 3)
    assert batch.observations == direct.observations and batch.ok
    assert batch.rewards.dtype == direct.rewards.dtype
    with pytest.raises(ValueError, match="2 sessions but 1"):
        asyncio.run(coalescer.astep([1, 2], ["x"]))


def test_errors_stay_with_their_call(pool):
    """In one batch: a step before reset, a step after the episode ended, an unknown task id
    and a closed session each fail alone; the other calls go through."""
    coalescer = AsyncCoalescer(pool, window_s=0.05)

    async def main():
        fresh, finished, good, bad_task, closed = (coalescer.session() for _ in range(5))
        await asyncio.gather(finished.reset(3), good.reset(4), closed.reset(5))
        finished_steps = 0
        while True:  # run `finished` to the end of its episode
            _, _, done, truncated = await finished.step("turn left")
            finished_steps += 1
            if done or truncated:
                break
        closed.close()
        return await asyncio.gather(
            fresh.step("turn left"),
            finished.step("turn left"),
            good.step("turn left"),
            bad_task.reset(-1),
            closed.step("turn left"),
            return_exceptions=True,
        )

    before, after_done, ok, bad_task, closed = asyncio.run(main())
    assert isinstance(before, SessionError) and "reset" in str(before)
    assert isinstance(after_done, SessionError) and "done" in str(after_done)
    assert isinstance(ok, tuple) and isinstance(ok[0], str) and ok[0]
    assert isinstance(bad_task, ValueError) and "out of range" in str(bad_task)
    assert isinstance(closed, ClosedSessionError)


def test_a_refused_batch_is_retried_call_by_call(pool):
    """The pool refuses a whole batch naming a closed id; the coalescer runs each call alone
    so that only that call fails (a refused pool call changes nothing)."""
    coalescer = ThreadCoalescer(pool)
    ids = pool.create(2)
    pool.reset(ids, [0, 1])
    pool.close(ids[1:])
    from agentgym.envs.coalesce import _Call, run_calls

    calls = [_Call("step", [ids[0]], ["turn left"]), _Call("step", [ids[1]], ["turn left"])]
    run_calls(coalescer.pool, calls)
    assert calls[0].error is None and calls[0].outcome.ok
    assert isinstance(calls[1].error, KeyError)
    twice = [_Call("step", [ids[0]], ["turn left"]), _Call("step", [ids[0]], ["turn right"])]
    run_calls(coalescer.pool, twice)
    assert twice[0].error is None
    assert isinstance(twice[1].error, ValueError) and "twice" in str(twice[1].error)
    pool.close(ids[:1])


def test_one_call_at_a_time_per_session(pool):
    coalescer = AsyncCoalescer(pool, window_s=0.05)

    async def main():
        s = coalescer.session()
        await s.reset(0)
        first = asyncio.ensure_future(s.step("turn left"))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="in flight"):
            await s.step("turn right")
        await first
        s.close()
        s.close()  # idempotent
        with pytest.raises(ClosedSessionError):
            await s.reset(0)

    asyncio.run(main())


def test_closing_mid_episode_is_counted_and_frees_the_session(pool):
    coalescer = ThreadCoalescer(pool)
    before = len(pool)
    a, b = coalescer.session(), coalescer.session()
    a.reset(0)
    b.reset(1)
    while True:
        _, _, done, truncated = b.step("turn left")
        if done or truncated:
            break
    a.close()
    b.close()
    stats = coalescer.stats()
    assert (stats.sessions_closed, stats.closed_mid_episode) == (2, 1)
    assert len(pool) == before


def test_a_cancelled_caller_leaves_the_batch_intact(pool):
    """A client that goes away mid-call (its coroutine cancelled) does not disturb the others,
    and its session can still be closed."""
    coalescer = AsyncCoalescer(pool, window_s=0.05)

    async def main():
        sessions = [coalescer.session() for _ in range(4)]
        await asyncio.gather(*(s.reset(i) for i, s in enumerate(sessions)))
        tasks = [asyncio.ensure_future(s.step("turn left")) for s in sessions]
        await asyncio.sleep(0)
        tasks[0].cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        for s in sessions:
            s.close()
        return done

    done = asyncio.run(main())
    assert isinstance(done[0], asyncio.CancelledError)
    assert all(isinstance(d, tuple) for d in done[1:])
    assert coalescer.stats().closed_mid_episode == 4


def test_a_lone_caller_waits_only_once():
    """After its first call a lone caller's batches go at once (the previous batch held one
    call), however long the window."""
    pool = EnvPool("babyai", threads=1)
    threads = ThreadCoalescer(pool, window_s=0.5)
    s = threads.session()
    s.reset(0)  # the first call waits out the window: nothing is known yet
    start = time.perf_counter()
    for _ in range(20):
        s.step("turn left")
    assert time.perf_counter() - start < 0.4

    coroutines = AsyncCoalescer(pool, window_s=0.5)

    async def lone() -> float:
        s = coroutines.session()
        await s.reset(0)
        start = time.perf_counter()
        for _ in range(20):
            await s.step("turn left")
        return time.perf_counter() - start

    assert asyncio.run(lone()) < 0.4
    coroutines.shutdown()


def test_a_sync_call_on_an_event_loop_does_not_wait():
    pool = EnvPool("babyai", threads=1)
    coalescer = ThreadCoalescer(pool, window_s=5.0)

    async def main():
        s = coalescer.session()
        start = time.perf_counter()
        s.reset(0)  # called on the loop's thread: no waiting for company
        return time.perf_counter() - start

    assert asyncio.run(main()) < 1.0


def test_one_loop_per_async_coalescer(pool):
    coalescer = AsyncCoalescer(pool)

    async def use():
        s = coalescer.session()
        try:
            await s.reset(0)
        finally:
            s.close()

    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(use())
        with pytest.raises(RuntimeError, match="one event loop"):
            asyncio.run(use())
    finally:
        first.close()
    asyncio.run(use())  # the first loop is gone: the coalescer serves the new one
    coalescer.shutdown()


def test_pool_shortcuts():
    pool = EnvPool("babyai", threads=1)

    async def main():
        s = pool.async_session()
        obs = await s.reset(0)
        s.close()
        return obs

    assert asyncio.run(main()) == direct_episode(pool, 0, 0)[0]
    s = pool.threadsafe_session()
    assert s.reset(0) == direct_episode(pool, 0, 0)[0]
    s.close()
    assert len(pool) == 0


def test_arguments_are_checked(pool):
    with pytest.raises(ValueError, match="window_s"):
        ThreadCoalescer(pool, window_s=-1)
    with pytest.raises(ValueError, match="max_batch"):
        AsyncCoalescer(pool, max_batch=0)

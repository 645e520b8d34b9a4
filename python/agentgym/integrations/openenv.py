"""agentgym's native envs as OpenEnv environments (``pip install 'agentgym-rs[openenv]'``).

:func:`environment_class` gives an ``openenv.core.env_server.Environment`` subclass for one
native env, every instance a session of one shared pool; :func:`create_server_app` serves it
with OpenEnv's own ``create_app`` (``/ws`` for per-episode sessions, ``/reset``, ``/step``,
``/schema``, the Task API under ``/{env}/...``), plus ``GET /agentgym/stats``. ``agentgym
openenv-serve --env babyai`` runs that app. Concurrent WebSocket sessions' reset/step calls are
gathered into batched pool calls (``agentgym.envs.coalesce.AsyncCoalescer`` on the server's
event loop).

What maps to what:

- an action is :class:`AgentGymAction`: ``action`` (the env's own action text, ``"turn
  left"``) or ``reply`` (a model's reply, read by agentgym's rules for the env: the
  ``Action:`` line, search's tags, webnav's ``` block; a reply without a usable action gets
  the corrective observation, reward 0, and the env is not called);
- an observation is :class:`AgentGymObservation`: ``text``, ``reward`` (this step's), ``done``
  (the episode is over: ended in the env or truncated), ``truncated`` (out of turns: the
  ``max_turns`` cap or the env's own limit), ``success`` (by the env family's rule), ``task_id``;
- ``reset(task_id=...)`` plays that agentgym task; ``reset(split=, index=)`` plays the
  index-th task of agentgym's ``train`` (``tasks.train``) or ``test`` (``tasks.eval``) split,
  the Task API's splits; ``reset(seed=s)`` plays train task ``s % n``; a bare ``reset()`` a
  random train task.

Bad input: an unknown env or split, an out-of-range task or index, an unknown reset argument
are ValueErrors; a step before reset or after the episode ended, or on a closed session, fails
that call alone (OpenEnv answers the client with an error frame). A client that disconnects
mid-episode has its session closed by OpenEnv; agentgym frees the env and counts it
(``closed_mid_episode`` in ``/agentgym/stats``).
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any, ClassVar

from agentgym.config import TasksConfig
from agentgym.envs import (
    AsyncCoalescer,
    AsyncEnvSession,
    EnvPool,
    ThreadCoalescer,
    ThreadSafeEnvSession,
)
from agentgym.envs.coalesce import DEFAULT_WINDOW_S
from agentgym.integrations.common import (
    SPLITS,
    Episode,
    open_pool,
    parse_reply_action,
    require,
    split_ids,
)

require("openenv.core.env_server")

from openenv.core.env_server import (  # noqa: E402
    Action,
    Environment,
    Observation,
    State,
    create_app,
)
from pydantic import Field  # noqa: E402

PREVIEW_TASKS = 10_000
"""``list_tasks`` lists at most this many tasks of a split (``num_tasks`` counts them all)."""


class AgentGymAction(Action):
    """One turn: the env's own ``action`` text, or a model ``reply`` to read it from."""

    action: str | None = Field(default=None, description="the env action, e.g. 'turn left'")
    reply: str | None = Field(
        default=None,
        description="a model reply, read by agentgym's rules for the env (the 'Action:' line)",
    )


class AgentGymObservation(Observation):
    """What the env says after a reset or a step (``reward`` is this step's)."""

    text: str = Field(default="", description="the observation as the env writes it")
    truncated: bool = Field(default=False, description="the episode ran out of turns")
    success: bool = Field(default=False, description="the episode ended with its goal reached")
    task_id: int | None = Field(default=None, description="the agentgym task being played")
    invalid_reply: bool = Field(
        default=False, description="the reply held no usable action (the env was not called)"
    )


class AgentGymState(State):
    """The episode's tally (``step_count`` counts replies, invalid ones included)."""

    env: str = ""
    task_id: int | None = None
    episode_reward: float = 0.0
    done: bool = False
    truncated: bool = False
    success: bool = False


class _Hub:
    """The pool an environment class's instances share, with its coalescers and task splits."""

    def __init__(
        self, pool: EnvPool, tasks: TasksConfig, window_s: float, seed: int, coalesce: bool
    ):
        self.pool = pool
        self.coalesce = coalesce
        self.tasks = tasks
        self.window_s = window_s
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self._by_loop: dict[asyncio.AbstractEventLoop, AsyncCoalescer] = {}
        self.threads = ThreadCoalescer(pool, window_s=window_s)

    def coalescer(self) -> AsyncCoalescer:
        """The coalescer of the running event loop (made on first use)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            found = self._by_loop.get(loop)
            if found is None:
                for old in [k for k in self._by_loop if k.is_closed()]:
                    self._by_loop.pop(old).shutdown()
                found = self._by_loop[loop] = AsyncCoalescer(self.pool, window_s=self.window_s)
            return found

    def stats(self) -> dict[str, Any]:
        """Sessions and batching over every coalescer of the hub."""
        with self._lock:
            parts = [c.stats() for c in [self.threads, *self._by_loop.values()]]
        calls, batches = sum(s.calls for s in parts), sum(s.batches for s in parts)
        return {
            "pool_sessions": len(self.pool),
            "sessions_opened": sum(s.sessions_opened for s in parts),
            "sessions_closed": sum(s.sessions_closed for s in parts),
            "closed_mid_episode": sum(s.closed_mid_episode for s in parts),
            "calls": calls,
            "batches": batches,
            "mean_batch": calls / batches if batches else 0.0,
        }


class AgentGymEnvironment(Environment):
    """An OpenEnv environment over one session of a shared agentgym pool (see the module
    docstring); :func:`environment_class` makes the subclass for an env."""

    SUPPORTS_CONCURRENT_SESSIONS: ClassVar[bool] = True
    env_name: ClassVar[str] = ""
    hub: ClassVar[_Hub]

    def __init__(self) -> None:
        # Cheap: OpenEnv builds throwaway instances for task listings and HTTP calls. The pool
        # session is opened by the first reset.
        super().__init__()
        self._session: Any = None
        self._episode = Episode(self.env_name)
        self._episode_id: str | None = None

    # --- episodes ------------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> AgentGymObservation:
        """Starts an episode (which task: see the module docstring)."""
        task_id = self._choose_task(seed, **kwargs)
        session = self._open("threads")
        text = session.reset(task_id)
        return self._started(task_id, episode_id, text)

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> AgentGymObservation:
        """:meth:`reset`, batched with the other sessions' calls on this event loop."""
        task_id = self._choose_task(seed, **kwargs)
        session = self._open("async")
        text = await session.reset(task_id)
        return self._started(task_id, episode_id, text)

    def step(
        self, action: AgentGymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentGymObservation:
        """Applies one action (or reads it from a reply) and says what happened."""
        env_action, invalid = self._before_step(action)
        if env_action is None:
            return invalid
        return self._stepped(*self._session.step(env_action))

    async def step_async(
        self, action: AgentGymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentGymObservation:
        """:meth:`step`, batched with the other sessions' calls on this event loop."""
        env_action, invalid = self._before_step(action)
        if env_action is None:
            return invalid
        return self._stepped(*(await self._session.step(env_action)))

    @property
    def state(self) -> AgentGymState:
        e = self._episode
        return AgentGymState(
            episode_id=self._episode_id,
            step_count=e.turns,
            env=self.env_name,
            task_id=e.task_id,
            episode_reward=e.reward,
            done=e.done,
            truncated=e.truncated,
            success=e.success,
        )

    def close(self) -> None:
        """Frees the pool session (a running episode is counted as closed mid-episode)."""
        if self._session is not None:
            self._session.close()
            self._session = None

    # --- the Task API --------------------------------------------------------------------

    def list_splits(self) -> list[str]:
        """agentgym's splits: ``train`` (``tasks.train``) and ``test`` (``tasks.eval``)."""
        return list(SPLITS)

    def num_tasks(self, split: str) -> int:
        return len(split_ids(self.hub.tasks, split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        ids = split_ids(self.hub.tasks, split)
        if not 0 <= index < len(ids):
            raise IndexError(f"index {index} is out of range for split {split!r} ({len(ids)})")
        return self._task(split, index, ids[index])

    def get_task_range(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        ids = split_ids(self.hub.tasks, split)
        first, last, _ = slice(start, stop).indices(len(ids))
        return [self._task(split, i, ids[i]) for i in range(first, last)]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """The split's tasks (the first ``PREVIEW_TASKS`` of a larger one)."""
        return self.get_task_range(split, 0, PREVIEW_TASKS)

    def _task(self, split: str, index: int, task_id: int) -> dict[str, Any]:
        return {"id": f"{self.env_name}/{task_id}", "index": index, "split": split,
                "env": self.env_name, "task_id": task_id}  # fmt: skip

    # --- helpers -------------------------------------------------------------------------

    def _choose_task(
        self,
        seed: int | None,
        task_id: int | None = None,
        split: str | None = None,
        index: int | None = None,
        **unknown: Any,
    ) -> int:
        if unknown:
            raise ValueError(
                f"unknown reset argument {sorted(unknown)[0]!r}; reset takes seed, episode_id, "
                "task_id, split, index"
            )
        if task_id is not None:
            if int(task_id) < 0:
                raise ValueError(f"task_id must be >= 0, got {task_id}")
            return int(task_id)
        ids = split_ids(self.hub.tasks, split or "train")
        if index is not None:
            if not 0 <= int(index) < len(ids):
                raise ValueError(
                    f"index {index} is out of range for split {split or 'train'!r} "
                    f"({len(ids)} tasks)"
                )
            return ids[int(index)]
        if seed is not None:
            return ids[int(seed) % len(ids)]
        return ids[self.hub.rng.randrange(len(ids))]

    def _open(self, kind: str) -> Any:
        """This instance's pool session of ``kind`` (async or thread-safe), opened once."""
        if not self.hub.coalesce:
            if self._session is None:
                self._session = self.hub.pool.session()
            return self._session
        wanted = AsyncEnvSession if kind == "async" else ThreadSafeEnvSession
        if self._session is not None and not isinstance(self._session, wanted):
            self.close()  # used from the other side: start over there
        if self._session is None:
            coalescer = self.hub.coalescer() if kind == "async" else self.hub.threads
            self._session = coalescer.session()
        return self._session

    def _started(self, task_id: int, episode_id: str | None, text: str) -> AgentGymObservation:
        self._episode.start(task_id)
        self._episode_id = episode_id
        return AgentGymObservation(text=text, reward=0.0, done=False, task_id=task_id)

    def _before_step(self, action: AgentGymAction) -> tuple[str | None, AgentGymObservation]:
        """The env action to send, or None and the observation of an invalid reply."""
        if isinstance(action, dict):  # a direct caller passing the wire form
            action = AgentGymAction(**action)
        if (action.action is None) == (action.reply is None):
            # Checked here, not by a pydantic validator: OpenEnv cannot send a validator's
            # error back over the WebSocket and drops the session instead.
            raise ValueError("give exactly one of 'action' and 'reply'")
        if self._session is None or self._episode.task_id is None:
            raise RuntimeError("step before reset: reset the environment first")
        if self._episode.over:
            raise RuntimeError("the episode is over; reset to start another")
        self._episode.turns += 1
        if action.action is not None:
            return action.action, AgentGymObservation()
        env_action, correction = parse_reply_action(action.reply or "", self.env_name)
        if env_action is not None:
            return env_action, AgentGymObservation()
        self._episode.invalid_replies += 1
        invalid = AgentGymObservation(
            text=correction or "", reward=0.0, done=False, task_id=self._episode.task_id,
            invalid_reply=True,
        )  # fmt: skip
        return None, invalid

    def _stepped(
        self, text: str, reward: float, done: bool, truncated: bool
    ) -> AgentGymObservation:
        e = self._episode
        e.record(reward, done, truncated)
        return AgentGymObservation(
            text=text, reward=reward, done=e.over, truncated=e.truncated, success=e.success,
            task_id=e.task_id, metadata={"episode_reward": e.reward},
        )  # fmt: skip


def environment_class(
    env: str,
    *,
    tasks: TasksConfig | None = None,
    max_turns: int | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    seed: int = 0,
    coalesce: bool = True,
    **pool_options: Any,
) -> type[AgentGymEnvironment]:
    """An :class:`AgentGymEnvironment` subclass for ``env`` whose instances share one pool.

    Args:
        env: a native env name (``agentgym.envs.env_names()``); another is a ValueError.
        tasks: agentgym's train/test splits (default: ``TasksConfig()``'s).
        max_turns: the pool's horizon cap (episodes that take that many steps end truncated).
        window_s: how long a call waits for other sessions' calls (the coalescer's window).
        seed: seeds the draw of a bare ``reset()``'s task.
        coalesce: gather the sessions' calls into batched pool calls (async methods on the
            server's loop); False: one pool call per session call, on the per-session threads
            OpenEnv runs a sync environment on (``bench/bench_openenv.py`` compares them).
        **pool_options: env options (``EnvPool``'s), e.g. ``qa=`` and ``index=`` for search.
    """
    pool = open_pool(env, **pool_options)
    if max_turns is not None:
        pool.set_horizon(max_turns)
    hub = _Hub(pool, tasks or TasksConfig(), window_s, seed, coalesce)
    name = "".join(part.capitalize() for part in env.split("_")) + "Environment"
    body: dict[str, Any] = {"env_name": env, "hub": hub}
    if not coalesce:  # OpenEnv then runs the sync methods on its per-session threads
        body |= {"reset_async": Environment.reset_async, "step_async": Environment.step_async}
    return type(name, (AgentGymEnvironment,), body)


def create_server_app(
    env: str,
    *,
    max_sessions: int = 1024,
    **options: Any,
):
    """OpenEnv's FastAPI app for ``env`` (``create_app`` with :func:`environment_class`'s
    class; ``options`` go to it), at most ``max_sessions`` WebSocket sessions at once, plus
    ``GET /agentgym/stats``."""
    cls = environment_class(env, **options)
    app = create_app(
        cls,
        AgentGymAction,
        AgentGymObservation,
        env_name=env,
        max_concurrent_envs=max_sessions,
        state_cls=AgentGymState,
    )

    @app.get("/agentgym/stats", tags=["agentgym"])
    def agentgym_stats() -> dict[str, Any]:
        """Pool sessions, sessions opened/closed (mid-episode ones counted) and batching."""
        return {"env": env, **cls.hub.stats()}

    app.state.agentgym_environment = cls
    return app

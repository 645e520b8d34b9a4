"""agentgym's envs as SkyRL-Gym text envs (``pip install 'agentgym-rs[skyrl]'``).

``register()`` (in the training entrypoint, before the trainer starts: SkyRL makes envs by id in
each generator process) registers ``agentgym-<env>`` for every native env that needs no data
options (babyai, textcraft, webnav; ``register(["search"], qa=..., index=...)`` for search).
A dataset row picks one with ``env_class`` and names its task with ``task_id`` (top level or
in ``extra_info``; ``agentgym export-tasks --for skyrl`` writes such rows). All envs of one id
in a process share one pool.

What maps to what: ``init(prompt)`` resets the session to the row's task and returns the
prompt with agentgym's instruction as system message (unless the prompt has its own) and the
first observation as a user message (the exporter's placeholder message is dropped);
``step(reply)`` reads the action from the model's reply by agentgym's rules (the "Action:"
line; search's tags; webnav's ``` block), steps the env, and returns ``observations`` (the next
observation as a user message; none when done), ``reward`` (this step's), ``done`` (the episode
ended, was truncated by the env or the pool's cap, or used SkyRL's ``max_turns``) and
``metadata`` with ``success``, ``truncated`` (SkyRL's output has no such field),
``episode_reward``, ``task_id`` and ``invalid_reply`` (no usable action: the corrective
observation comes back, reward 0, the env is not called). ``postprocessed_action`` stays None
(token-in/token-out is kept). ``get_metrics()`` gives success, truncated, episode reward, turns
and invalid replies per episode.

SkyRL calls ``init``/``step``/``close`` from a pool of threads (``max_env_workers``, 32). With
``coalesce=True`` those calls go out as batched pool calls (``ThreadCoalescer``); the default
does so for remote pools (``urls=``), where a batch saves a request per session, and calls the
local pool once per session call otherwise, which is faster for an in-process pool
(``bench/bench_coalesce.py``).

Bad input: an unknown env is a ValueError at ``register``; a row without a task id, a step
before ``init`` or after the episode ended are errors of that env alone; ``close()`` frees the
session (an unfinished episode is counted: ``stats(env)``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from agentgym.envs import EnvPool, ThreadCoalescer, env_names
from agentgym.envs.coalesce import DEFAULT_WINDOW_S, CoalescerStats
from agentgym.integrations.common import (
    Episode,
    instruction,
    open_pool,
    parse_reply_action,
    require,
)
from agentgym.integrations.tasks import placeholder_prompt, skyrl_env_class

require("skyrl_gym")

import skyrl_gym  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

NEEDS_OPTIONS = {"search"}
"""Native envs that cannot open without data options (registered only when named)."""
DEFAULT_MAX_TURNS = 20


class _Hub:
    """One id's pool (opened by the first env made) and, when coalescing, its coalescer."""

    def __init__(self, env: str, coalesce: bool | None, window_s: float, options: dict):
        self.env = env
        self.options = options
        self.coalesce = bool(options.get("urls")) if coalesce is None else coalesce
        self.window_s = window_s
        self._lock = threading.Lock()
        self.pool: EnvPool | None = None
        self.coalescer: ThreadCoalescer | None = None
        self.direct = CoalescerStats()

    def session(self) -> Any:
        with self._lock:
            if self.pool is None:
                self.pool = open_pool(self.env, **self.options)
                if self.coalesce:
                    self.coalescer = ThreadCoalescer(self.pool, window_s=self.window_s)
            if self.coalescer is not None:
                return self.coalescer.session()
            self.direct.sessions_opened += 1
            return self.pool.session()

    def closed(self, mid_episode: bool) -> None:
        """Counts a closed direct session (a coalescer counts its own)."""
        with self._lock:
            self.direct.sessions_closed += 1
            self.direct.closed_mid_episode += int(mid_episode)

    def stats(self) -> CoalescerStats:
        return self.coalescer.stats() if self.coalescer is not None else self.direct


class AgentGymTextEnv(BaseTextEnv):
    """A SkyRL ``BaseTextEnv`` over one session of an agentgym pool (module docstring);
    :func:`env_class` makes the subclass for an env."""

    env_name: ClassVar[str] = ""
    hub: ClassVar[_Hub]

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        self.task_id = task_id_of(extras)
        self.max_turns = int(extras.get("max_turns") or DEFAULT_MAX_TURNS)
        self.episode = Episode(self.env_name)
        self._session: Any = None

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Resets the session to the row's task; returns the episode's opening messages."""
        if self._session is None:
            self._session = self.hub.session()
        observation = self._session.reset(self.task_id)
        self.episode.start(self.task_id)
        self.turns = 0
        return opening(self.env_name, prompt, self.task_id, observation), {"task_id": self.task_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model reply: read its action, step the env, say what happened."""
        if self._session is None or self.episode.task_id is None:
            raise RuntimeError("step before init: SkyRL calls init(prompt) first")
        if self.episode.over:
            raise RuntimeError("the episode is over; this env does not step again")
        self.turns += 1
        self.episode.turns += 1
        env_action, correction = parse_reply_action(action, self.env_name)
        if env_action is None:
            self.episode.invalid_replies += 1
            text, reward = correction or "", 0.0
        else:
            text, reward, done, truncated = self._session.step(env_action)
            self.episode.record(reward, done, truncated)
        if not self.episode.over and self.turns >= self.max_turns:
            self._end_at_max_turns()
        done = self.episode.over
        metadata = {**self.episode.metrics(), "invalid_reply": env_action is None}
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": text}],
            reward=reward,
            done=done,
            metadata=metadata,
            postprocessed_action=None,
        )

    def _end_at_max_turns(self) -> None:
        """SkyRL's ``max_turns`` ends the episode: truncated, not a success."""
        self.episode.done = self.episode.truncated = True
        if hasattr(self._session, "end_episode"):
            self._session.end_episode()

    def get_metrics(self) -> dict[str, Any]:
        e = self.episode
        return {"success": float(e.success), "truncated": float(e.truncated),
                "episode_reward": e.reward, "turns": e.turns,
                "invalid_replies": e.invalid_replies}  # fmt: skip

    def close(self) -> None:
        """Frees the session (idempotent)."""
        if self._session is None:
            return
        session, self._session = self._session, None
        if not hasattr(session, "in_episode"):  # a direct session: counted here
            self.hub.closed(mid_episode=not self.episode.over)
        session.close()


def task_id_of(extras: dict[str, Any]) -> int:
    """The row's task id: ``task_id`` at the top level or in ``extra_info``."""
    for where in (extras, extras.get("extra_info") or {}):
        if where.get("task_id") is not None:
            return int(where["task_id"])
    raise ValueError(
        "the dataset row names no agentgym task: give it a task_id column (or extra_info.task_id);"
        " agentgym export-tasks --for skyrl writes such rows"
    )


def opening(env: str, prompt: Sequence[dict[str, str]], task_id: int, observation: str) -> list:
    """The row's prompt without the exporter's placeholder, with agentgym's instruction as
    the system message unless it has one, then the first observation."""
    placeholder = placeholder_prompt(env, task_id)[0]["content"]
    messages = [dict(m) for m in prompt if m.get("content") != placeholder]
    if not any(m.get("role") == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": instruction(env)})
    return [*messages, {"role": "user", "content": observation}]


_CLASSES: dict[str, type[AgentGymTextEnv]] = {}


def env_class(
    env: str,
    *,
    coalesce: bool | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    **pool_options: Any,
) -> type[AgentGymTextEnv]:
    """The :class:`AgentGymTextEnv` subclass for ``env`` (its pool opens with the first env
    made; ``pool_options`` are ``EnvPool``'s, or ``urls=`` for servers)."""
    if not pool_options.get("urls") and env not in env_names():
        raise ValueError(f"unknown env {env!r}; agentgym's native envs: {', '.join(env_names())}")
    hub = _Hub(env, coalesce, window_s, pool_options)
    name = "".join(p.capitalize() for p in env.split("_")) + "TextEnv"
    cls = type(name, (AgentGymTextEnv,), {"env_name": env, "hub": hub})
    _CLASSES[env] = cls
    return cls


def register(envs: Sequence[str] | None = None, **options: Any) -> list[str]:
    """Registers ``agentgym-<env>`` with SkyRL-Gym for each of ``envs`` (default: every native
    env that needs no data options); returns the ids. ``options`` go to :func:`env_class`.
    Registering an id again replaces it (a new pool on the next env made)."""
    names = list(envs) if envs is not None else [e for e in env_names() if e not in NEEDS_OPTIONS]
    ids = []
    for env in names:
        cls = env_class(env, **options)
        env_id = skyrl_env_class(env)
        if env_id in skyrl_gym.registry:
            skyrl_gym.envs.registration.deregister(env_id)
        skyrl_gym.register(id=env_id, entry_point=cls)
        ids.append(env_id)
    return ids


def stats(env: str) -> CoalescerStats:
    """Sessions opened and closed (closed mid-episode counted), and batching, of ``env``'s
    registered class."""
    return _CLASSES[env].hub.stats()

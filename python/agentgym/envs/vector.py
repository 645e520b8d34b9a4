"""A gymnasium ``VectorEnv`` over an :class:`~agentgym.envs.EnvPool`.

Observations and actions are text. Autoreset is gymnasium's next-step mode (declared in
``metadata["autoreset_mode"]``): after a sub-env ends, the next ``step`` ignores its action,
resets it to a new task and returns the first observation with reward 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from agentgym.envs.pool import EnvPool, SessionError

_MAX_TEXT = 1 << 20


def _text_space() -> gym.spaces.Text:
    # Any character is allowed; gymnasium's default charset is alphanumerics only.
    charset = frozenset(chr(c) for c in range(32, 127)) | {"\n", "\t"}
    return gym.spaces.Text(max_length=_MAX_TEXT, charset=charset)


class TextVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` sessions of one env in a pool, as a gymnasium vector env.

    Args:
        env: native env name, or an existing :class:`EnvPool` to draw sessions from.
        num_envs: number of sub-envs.
        task_ids: tasks to cycle through on (auto)reset; default: drawn from the pool's
            seeded generator over all tasks.
        **pool_options: passed to :class:`EnvPool` when ``env`` is a name.

    ``infos`` carries ``task_id`` per sub-env and, where a session reported one, ``error``.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        env: str | EnvPool,
        num_envs: int,
        *,
        task_ids: Sequence[int] | None = None,
        **pool_options: Any,
    ):
        self.pool = env if isinstance(env, EnvPool) else EnvPool(env, **pool_options)
        self.num_envs = num_envs
        self.single_observation_space = _text_space()
        self.single_action_space = _text_space()
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._ids = self.pool.create(num_envs)
        self._task_cycle = list(task_ids) if task_ids is not None else None
        self._next_task = 0
        self._tasks = [-1] * num_envs
        self._needs_reset = np.zeros(num_envs, dtype=bool)

    def _draw_tasks(self, n: int) -> list[int]:
        if self._task_cycle is None:
            return self.pool.sample_task_ids(n)
        out = []
        for _ in range(n):
            out.append(self._task_cycle[self._next_task % len(self._task_cycle)])
            self._next_task += 1
        return out

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Resets every sub-env; ``options={"task_ids": [...]}`` picks the tasks."""
        if seed is not None:
            self.pool._rng = np.random.default_rng(seed)
            self._next_task = 0
        tasks = (options or {}).get("task_ids") or self._draw_tasks(self.num_envs)
        if len(tasks) != self.num_envs:
            raise ValueError(f"options['task_ids'] has {len(tasks)} ids for {self.num_envs} envs")
        observations = self.pool.reset(self._ids, tasks)
        self._tasks = list(tasks)
        self._needs_reset[:] = False
        return tuple(observations), {"task_id": np.array(self._tasks)}

    def step(self, actions: Sequence[str]) -> tuple[Any, ...]:
        """One step of every sub-env; sub-envs that ended last step are reset instead."""
        if len(actions) != self.num_envs:
            raise ValueError(f"got {len(actions)} actions for {self.num_envs} envs")
        observations = [""] * self.num_envs
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        errors: list[str | None] = [None] * self.num_envs
        stepping = [i for i in range(self.num_envs) if not self._needs_reset[i]]
        resetting = [i for i in range(self.num_envs) if self._needs_reset[i]]
        if stepping:
            batch = self.pool.step([self._ids[i] for i in stepping], [actions[i] for i in stepping])
            for j, i in enumerate(stepping):
                observations[i] = batch.observations[j]
                rewards[i] = batch.rewards[j]
                terminated[i] = batch.dones[j]
                # A session that could not step (e.g. its env failed) is ended and reset next.
                truncated[i] = batch.truncated[j] or batch.errors[j] is not None
                errors[i] = batch.errors[j]
        if resetting:
            self._reset_some(resetting, observations, errors)
        self._needs_reset = terminated | truncated
        infos: dict[str, Any] = {"task_id": np.array(self._tasks)}
        if any(e is not None for e in errors):
            infos["error"] = np.array(errors, dtype=object)
        return tuple(observations), rewards, terminated, truncated, infos

    def _reset_some(
        self, idx: list[int], observations: list[str], errors: list[str | None]
    ) -> None:
        tasks = self._draw_tasks(len(idx))
        try:
            first = self.pool.reset([self._ids[i] for i in idx], tasks)
        except SessionError as e:
            first = [o or "" for o in e.observations]
            for j, msg in e.errors.items():
                errors[idx[j]] = msg
        for j, i in enumerate(idx):
            observations[i] = first[j]
            self._tasks[i] = tasks[j]

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close(self._ids)

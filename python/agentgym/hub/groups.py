"""The group a run's task counts in (BabyAI's level, TextCraft's goal depth, webnav's site and
kind), as ``agentgym eval`` groups its rows, for the hub's trajectory list.

Where the group follows from the task id (BabyAI) it is computed. Where the env family reads it
from the episode (``EnvFamily.group_needs_info``), one session of the run's own native env,
with the run's env options, is reset on the task to read its ``info()``, once per task: a reset
costs microseconds to a millisecond. Envs that are not native (served elsewhere) or that cannot
start here (a search env whose index is not on this machine) get no group.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


class TaskGroups:
    """The groups of one run's tasks, from its resolved config (``config.yaml``)."""

    def __init__(self, config: Mapping[str, Any]):
        self.options = env_options(config)
        """The native env options of each env the run trains on."""
        self._pools: dict[str, Any] = {}
        self._cache: dict[tuple[str, int], str | None] = {}
        self._lock = threading.Lock()

    def group(self, env: Any, task_id: Any) -> str | None:
        """The eval row of ``task_id`` of ``env``, or None where it cannot be known here."""
        from agentgym.envs.families import FAMILIES

        entry = FAMILIES.get(str(env).lower()) if env is not None else None
        if entry is None or not isinstance(task_id, int) or isinstance(task_id, bool):
            return None
        if entry.eval_group is None or not entry.group_needs_info:
            return entry.id_group(task_id)
        with self._lock:
            key = (str(env), task_id)
            if key not in self._cache:
                self._cache[key] = self._from_info(entry, str(env), task_id)
            return self._cache[key]

    def _from_info(self, entry: Any, env: str, task_id: int) -> str | None:
        pool = self._pool(env)
        if pool is None or task_id < 0:
            return None
        (sid,) = pool.create(1)
        try:
            pool.reset([sid], [task_id])
            return entry.group(env, task_id, pool.info([sid])[0])
        except (ValueError, KeyError, TypeError):
            return None
        finally:
            pool.close([sid])

    def _pool(self, env: str) -> Any:
        if env not in self._pools:
            self._pools[env] = None
            if env in self.options:
                from agentgym.envs import EnvPool

                try:
                    self._pools[env] = EnvPool(env, threads=1, **self.options[env])
                except (ValueError, TypeError, OSError):
                    pass  # options for another machine (a search index not here): no groups
        return self._pools[env]


def env_options(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Env name -> native pool options, for every native env of a run config (``env``, or
    each entry of ``envs``); envs on servers are left out."""
    from agentgym.envs import env_names

    entries = config.get("envs") or [{"env": config.get("env") or {"name": "babyai"}}]
    out = {}
    for entry in entries if isinstance(entries, list) else []:
        env = entry.get("env") if isinstance(entry, dict) else None
        if not isinstance(env, dict):
            continue  # a damaged config (the hub shows why): no groups for it
        name, options = env.get("name"), env.get("options") or {}
        native = isinstance(name, str) and name in env_names()
        if native and not env.get("remote") and not env.get("serve") and isinstance(options, dict):
            out[name] = dict(options)
    return out

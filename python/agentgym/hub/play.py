"""Playing an env by hand from the hub: one ``EnvPool`` per env, a few sessions at a time.

The human types or clicks actions; each goes through the env family's sanitiser (what the actor
sends after parsing a reply) and then to the env, so a human episode is played under the rules
a model's is. This is the human baseline the hub offers next to the runs.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

MAX_SESSIONS = 32
"""Sessions kept open; starting one more closes the one used least recently."""
MAX_ACTION_CHARS = 1000


class PlayError(ValueError):
    """A play request that cannot be carried out (400, with the message)."""


@dataclass
class _Session:
    env: str
    pool_id: int
    task_id: int
    first_observation: str = ""
    steps: int = 0
    reward: float = 0.0
    done: bool = False
    truncated: bool = False

    @property
    def ended(self) -> bool:
        return self.done or self.truncated


class Play:
    """Hand-played sessions of the native envs, keyed by the hub's own session numbers."""

    def __init__(self, seed: int = 0, env_options: dict[str, dict[str, str]] | None = None):
        self.seed = seed
        self.env_options = env_options or {}
        """Options per env for its ``EnvPool`` (the search env's ``index`` and ``qa``)."""
        self._pools: dict[str, Any] = {}
        self._sessions: OrderedDict[int, _Session] = OrderedDict()
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def envs(self) -> list[dict[str, Any]]:
        """The native envs with their number of tasks; an env that needs options to start (the
        search env needs an index and a QA set) is listed with why it cannot be played."""
        from agentgym.envs import env_names

        out = []
        with self._lock:
            for name in env_names():
                try:
                    out.append({"name": name, "num_tasks": self._pool(name).num_tasks})
                except (ValueError, TypeError, OSError, ImportError) as e:
                    hint = f" (start the hub with --env-option {name}:KEY=VALUE)"
                    out.append({"name": name, "num_tasks": None, "unavailable": f"{e}{hint}"})
        return out

    def start(self, env: Any, task_id: Any) -> dict[str, Any]:
        """A new session of ``env`` on ``task_id``: its number and first observation."""
        from agentgym.envs import env_names

        if env not in env_names():
            raise PlayError(f"unknown env {env!r}; choose one of {', '.join(env_names())}")
        if not isinstance(task_id, int) or isinstance(task_id, bool) or task_id < 0:
            raise PlayError(f"task_id must be an integer >= 0, got {task_id!r}")
        with self._lock:
            try:
                pool = self._pool(env)
            except (ValueError, TypeError, OSError, ImportError) as e:
                raise PlayError(f"{env} cannot be played here: {e}") from None
            if task_id >= pool.num_tasks:
                raise PlayError(f"task_id must be below {pool.num_tasks} for {env}")
            while len(self._sessions) >= MAX_SESSIONS:
                _, old = self._sessions.popitem(last=False)
                self._pools[old.env].close([old.pool_id])
            [pool_id] = pool.create(1)
            [observation] = pool.reset([pool_id], [task_id])
            number = next(self._numbers)
            self._sessions[number] = _Session(env, pool_id, task_id, observation)
            return {"session": number, **self._view(number, observation)}

    def step(self, number: Any, action: Any) -> dict[str, Any]:
        """One action in session ``number``: the env's answer and where the episode stands."""
        from agentgym.agent.parsing import sanitize_action

        if not isinstance(action, str) or not action.strip():
            raise PlayError("action must be a non-empty string")
        if len(action) > MAX_ACTION_CHARS:
            raise PlayError(f"action longer than {MAX_ACTION_CHARS} characters")
        with self._lock:
            session = self._session(number)
            if session.ended:
                raise PlayError("this episode has ended; start a new one")
            sent = sanitize_action(action, session.env)
            if not sent:
                raise PlayError(f"{action!r} holds no action {session.env} can read")
            batch = self._pools[session.env].step([session.pool_id], [sent])
            if batch.errors[0] is not None:
                raise PlayError(batch.errors[0])
            session.steps += 1
            session.reward += float(batch.rewards[0])
            session.done, session.truncated = bool(batch.dones[0]), bool(batch.truncated[0])
            view = self._view(number, batch.observations[0])
            view.update(sent=sent, reward=float(batch.rewards[0]), done=session.done)
            view["truncated"] = session.truncated
            return view

    def _view(self, number: int, observation: str) -> dict[str, Any]:
        from agentgym.envs.families import family

        session = self._sessions[number]
        self._sessions.move_to_end(number)
        pool = self._pools[session.env]
        [info] = pool.info([session.pool_id])
        [actions] = pool.available_actions([session.pool_id])
        pic = picture(session.env, session.first_observation, info)
        info.pop("grid", None)  # drawn as the picture
        outcome = family(session.env).outcome(session.reward, session.done, session.truncated)
        return {"env": session.env, "task_id": session.task_id, "observation": observation,
                "actions": actions or [], "info": info, "steps": session.steps,
                "total_reward": session.reward, "ended": session.ended,
                "success": session.ended and outcome.success,
                "picture": pic}  # fmt: skip

    def _session(self, number: Any) -> _Session:
        session = self._sessions.get(number) if isinstance(number, int) else None
        if session is None:
            raise PlayError(f"no play session {number!r} (sessions expire after {MAX_SESSIONS})")
        return session

    def _pool(self, env: str) -> Any:
        if env not in self._pools:
            from agentgym.envs import EnvPool

            options = self.env_options.get(env, {})
            self._pools[env] = EnvPool(env, seed=self.seed, threads=1, **options)
        return self._pools[env]


def picture(env: str, first_observation: str, info: dict[str, Any]) -> dict[str, Any] | None:
    """What the page draws beside the text, where the env has something to draw: BabyAI's grid
    with the agent, TextCraft's goal as a tree of the listed crafting commands with the
    inventory's counts."""
    if env == "babyai" and isinstance(info.get("grid"), list):
        return {"kind": "babyai-grid", "rows": info["grid"], "agent": info.get("agent_pos"),
                "dir": info.get("agent_dir"), "carrying": info.get("carrying")}  # fmt: skip
    if env != "textcraft":
        return None
    from agentgym.envs.planners import parse_textcraft

    try:
        recipes, goal = parse_textcraft(first_observation)
    except ValueError:
        return None
    have = {}
    for entry in info.get("inventory") or []:
        if isinstance(entry, dict):
            have[str(entry.get("item", ""))] = entry.get("count")
        elif isinstance(entry, list | tuple) and len(entry) == 2:
            have[str(entry[0])] = entry[1]
    return {"kind": "textcraft-tree", "tree": _tree(goal, recipes, have, set())}


def _tree(item: str, recipes: list, have: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    """``item`` with the listed commands that craft it and, under each, its ingredients."""
    makes = [r for r in recipes if _same_item(r.item, item)] if item not in seen else []
    return {
        "item": item,
        "have": have.get(item, have.get(_singular(item), 0)),
        "recipes": [
            {
                "count": r.count,
                "ingredients": [
                    {"need": n, **_tree(name, recipes, have, seen | {item})}
                    for n, name in r.ingredients
                ],
            }  # fmt: skip
            for r in makes
        ],
    }


def _singular(name: str) -> str:
    return name[:-1] if name.endswith("s") else name


def _same_item(a: str, b: str) -> bool:
    return a == b or _singular(a) == _singular(b)

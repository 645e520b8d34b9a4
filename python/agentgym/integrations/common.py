"""What the stack modules share: the missing-extra message, opening a pool, reading a reply and
an episode's end by the env family's rules, and the task splits."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agentgym.config import TaskRange, TasksConfig
from agentgym.envs import EnvPool, env_names
from agentgym.envs.families import family

EXTRAS = {
    "openenv": "openenv",
    "skyrl_gym": "skyrl",
    "trl": "trl",
    "verl": "verl",
}
"""The module each extra provides -> the extra's name in ``agentgym-rs[...]``."""


def require(module: str) -> ModuleType:
    """``module`` imported, or an ImportError naming the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        extra = EXTRAS.get(top, top)
        raise ImportError(
            f"{module} is not installed; pip install 'agentgym-rs[{extra}]' "
            f"(docs/integrations/{extra}.md)"
        ) from e


def open_pool(env: str, urls: str | list[str] | None = None, **options: Any) -> EnvPool:
    """A native pool of ``env``, or with ``urls`` one over AgentGym-compatible servers
    (``EnvPool.remote``); an unknown native name is a ValueError listing the known ones."""
    if urls:
        return EnvPool.remote(urls, env, **options)
    if env not in env_names():
        raise ValueError(f"unknown env {env!r}; agentgym's native envs: {', '.join(env_names())}")
    return EnvPool(env, **options)


SPLITS = ("train", "test")
"""agentgym's two splits: ``tasks.train`` and ``tasks.eval`` (the held-out tasks)."""


def split_ranges(tasks: TasksConfig | None = None) -> dict[str, TaskRange]:
    """``{"train": tasks.train, "test": tasks.eval}`` (agentgym's defaults when None)."""
    tasks = tasks or TasksConfig()
    return {"train": tasks.train, "test": tasks.eval}


def split_ids(tasks: TasksConfig | None, split: str) -> tuple[int, ...]:
    """The task ids of ``split``; an unknown split is a ValueError naming the two."""
    ranges = split_ranges(tasks)
    if split not in ranges:
        raise ValueError(f"unknown split {split!r}; agentgym's splits: {', '.join(SPLITS)}")
    return ranges[split].ids()


@dataclass
class Episode:
    """The running tally of one episode, read by the family's rules at its end."""

    env: str
    task_id: int | None = None
    reward: float = 0.0
    turns: int = 0
    """Replies taken (including those without a usable action)."""
    invalid_replies: int = 0
    done: bool = False
    truncated: bool = False
    success: bool = False

    def start(self, task_id: int) -> None:
        self.task_id, self.reward, self.turns, self.invalid_replies = task_id, 0.0, 0, 0
        self.done = self.truncated = self.success = False

    def record(self, reward: float, done: bool, truncated: bool) -> None:
        """Adds one env step; at the end of the episode reads success and truncation."""
        self.reward += reward
        if done or truncated:
            outcome = family(self.env).outcome(self.reward, done, truncated)
            self.done, self.success, self.truncated = True, outcome.success, outcome.truncated

    @property
    def over(self) -> bool:
        return self.done

    def metrics(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "episode_reward": self.reward,
            "success": self.success,
            "truncated": self.truncated,
            "turns": self.turns,
            "invalid_replies": self.invalid_replies,
        }


def parse_reply_action(reply: str, env: str) -> tuple[str | None, str | None]:
    """The action in a model's ``reply`` by agentgym's rules for ``env`` (the "Action:" line;
    search's tags, webnav's ``` block), or ``(None, corrective observation)``."""
    from agentgym.agent.parsing import parse_action

    parsed = parse_action(reply, env)
    return parsed.action, parsed.error


def instruction(env: str) -> str:
    """The system message agentgym opens ``env``'s episodes with."""
    return family(env).instruction

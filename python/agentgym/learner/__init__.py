"""The learner: advantages and losses (pure tensor functions), the update loop, checkpoints.

Needs torch (the ``train`` extra). ``Learner`` is the entry point; ``LearnerConfig`` its schema.
The names below are imported on first use, so reading the config schema
(``agentgym.learner.config``, which ``agentgym.config`` does for every command) does not
import torch: ``agentgym --help``, ``hub`` and the env-only commands start without it.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "AdvantageConfig": "config",
    "EnvTraining": "config",
    "LearnerConfig": "config",
    "LossConfig": "config",
    "OptimConfig": "config",
    "GroupBuffer": "batch",
    "TrainBatch": "batch",
    "collate": "batch",
    "Learner": "learner",
    "ValueHead": "forward",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agentgym.learner' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentgym.learner.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

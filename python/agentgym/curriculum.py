"""Level curriculum: which of an env's levels its training groups draw from, widened by success.

An env's ``tasks.curriculum`` lists stages of BabyAI levels (``task_id % 40``). Training starts on
the first stage's levels; once the mean success of the last ``window`` training episodes of the
open stage's own levels (those it added) reaches ``promote_at``, the next stage's levels are
added, and the count starts over. Episodes of earlier stages' levels never count for a later
stage: in an asynchronous run they keep arriving after it opened (sampled before, or drawn
among all open levels), and would open the next stage on levels already mastered, before one
episode of the new level was seen. A level is drawn only once its stage is open, so every
episode a stage counts was sampled after it opened.

The learner owns one ``Curriculum`` per env that has one, feeds it each update's episodes,
sends the open stage to the actors (``Control.env_stages``), logs ``curriculum_stage/<env>``
per step, and saves its state in checkpoints. The actors draw task ids only from the open
levels (``open_task_ids``).

Across envs, ``env_mix`` (``EnvMix``) moves a multi-env run's env weights by each env's recent
success in the same way: the learner computes them, sends them (``Control.env_weights``) and
logs ``env_weight/<env>``; actors draw the next group's env with them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentgym.configtools import check
from agentgym.envs.families import TASK_FILTERS

LEVELS = TASK_FILTERS["levels"]
"""The task filter a curriculum stages (BabyAI's levels: ``task_id % 40``)."""


@dataclass(frozen=True)
class CurriculumConfig:
    """Stages of BabyAI levels opened one after another as success rises."""

    stages: tuple[tuple[int, ...], ...] = ()
    """Levels each stage adds (``[[0, 1], [2], [3, 4]]``); training starts on the first."""
    promote_at: float = 0.8
    """Mean success over the last ``window`` episodes that opens the next stage."""
    window: int = 32
    """Training episodes of the open stage's own levels the success is averaged over (counted
    from its opening)."""

    def __post_init__(self) -> None:
        levels = [lvl for stage in self.stages for lvl in stage]
        check(
            self,
            ("stages", len(self.stages) >= 2 and all(self.stages),
             "must list at least two non-empty stages"),
            ("stages", all(0 <= lvl < LEVELS.modulus for lvl in levels),
             f"must hold {LEVELS.what} in [0, {LEVELS.modulus})"),
            ("stages", len(set(levels)) == len(levels), "lists a level twice"),
            ("promote_at", 0 < self.promote_at <= 1, "must be in (0, 1]"),
            ("window", self.window >= 1, "must be >= 1"),
        )  # fmt: skip

    def open_levels(self, stage: int) -> frozenset[int]:
        """The levels of stages ``0..stage``."""
        return frozenset(lvl for s in self.stages[: stage + 1] for lvl in s)


def open_task_ids(task_ids: Sequence[int], config: CurriculumConfig, stage: int) -> list[int]:
    """The ids of ``task_ids`` whose level is open at ``stage``."""
    levels = config.open_levels(stage)
    return [t for t in task_ids if t % LEVELS.modulus in levels]


class Curriculum:
    """The open stage of one env, moved by its training episodes' success."""

    def __init__(self, config: CurriculumConfig):
        self.config = config
        self.stage = 0
        self._recent: deque[bool] = deque(maxlen=config.window)

    def observe(self, episodes: Iterable[tuple[int, bool]]) -> bool:
        """Account for one update's ``(task_id, success)`` episodes of this env (those of the
        open stage's own levels count); True when a stage opened."""
        own = self.config.stages[self.stage]
        self._recent.extend(bool(s) for t, s in episodes if t % LEVELS.modulus in own)
        last = len(self.config.stages) - 1
        full = len(self._recent) == self.config.window
        if self.stage < last and full and self.success >= self.config.promote_at:
            self.stage += 1
            self._recent.clear()
            return True
        return False

    @property
    def success(self) -> float:
        """Mean success of the open stage's episodes counted since it opened (0 before any)."""
        return sum(self._recent) / len(self._recent) if self._recent else 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "recent": list(self._recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage = int(state["stage"])
        self._recent = deque((bool(x) for x in state["recent"]), maxlen=self.config.window)


@dataclass(frozen=True)
class EnvMixConfig:
    """How the env weights of a multi-env run move during training."""

    mode: Literal["fixed", "by_failure"] = "fixed"
    """fixed: each env's configured weight throughout. by_failure: weight x (1 - the env's
    recent training success), at least ``floor`` x weight, so the envs the policy has not
    mastered get more of the groups."""
    window: int = 64
    """Training episodes per env the success is averaged over."""
    floor: float = 0.1
    """Smallest share of its configured weight an env keeps (a mastered env is still seen)."""

    def __post_init__(self) -> None:
        check(
            self,
            ("window", self.window >= 1, "must be >= 1"),
            ("floor", 0 < self.floor <= 1, "must be in (0, 1]"),
        )


class EnvMix:
    """The current weight of each env (``EnvMixConfig``), from its episodes' success."""

    def __init__(self, config: EnvMixConfig, weights: dict[str, float]):
        self.config = config
        self.base = dict(weights)
        self._recent = {env: deque(maxlen=config.window) for env in weights}

    def observe(self, episodes: Iterable[tuple[str, bool]]) -> None:
        """Account for one update's (env, success) pairs."""
        for env, success in episodes:
            if env in self._recent:
                self._recent[env].append(bool(success))

    def weights(self) -> dict[str, float]:
        """Each env's weight now (the configured ones in ``fixed`` mode)."""
        if self.config.mode == "fixed":
            return dict(self.base)
        out = {}
        for env, w in self.base.items():
            recent = self._recent[env]
            success = sum(recent) / len(recent) if recent else 0.0
            out[env] = w * max(self.config.floor, 1.0 - success)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {env: list(r) for env, r in self._recent.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for env, recent in state.items():
            if env in self._recent:
                self._recent[env].extend(bool(x) for x in recent)

"""Horizon control: how many turns an episode may take, as training goes on.

The learner owns one ``HorizonController``. After every update it calls ``observe`` with the
statistics of the batch it trained on; the controller answers whether the cap changed, and the
learner broadcasts ``cap`` to the actors (episodes take the cap in force when they start).

Schedules (``HorizonConfig.schedule``):

- ``fixed``: ``cap`` forever (None: uncapped).
- ``stepwise`` (ScalingInter-RL): ``rounds[k]`` during updates ``k*every .. (k+1)*every - 1``,
  the last round afterwards.
- ``linear``: ``min(start + delta * (steps // every), max_cap)``.
- ``adaptive``: starts at ``start``. Statistics are taken only over episodes that ran under the
  current cap. Once ``window`` updates have been seen at the current cap:

  * raise by ``delta`` (up to ``max_cap``) when the mean share of episodes cut off by the cap
    (not by a full context or the env's own limit) is at least ``raise_truncation`` and
    success is still rising: the mean success of the second half of the window exceeds that
    of the first half by more than ``min_success_gain``. Many episodes run out of turns while
    the policy keeps improving, so the cap is what holds it back.
  * the cap counts as mastered once the window's mean success reaches ``mastery_success``.
  * lower by ``delta`` when the window's mean success has fallen more than ``collapse_drop``
    below the success measured just before the last raise; never below the highest mastered
    cap, nor below ``start``.

  Any change clears the window, so every decision looks only at episodes run under one cap.

Stepwise and linear caps are pure functions of the number of updates done, which is saved in
checkpoints; resuming at a stage boundary therefore gives exactly the caps of an uninterrupted
run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from agentgym.configtools import check, none_or

SCHEDULES = ("fixed", "stepwise", "linear", "adaptive")


@dataclass(frozen=True)
class HorizonConfig:
    """Schema of the horizon schedule (``configs/horizon/*.yaml`` override it)."""

    schedule: Literal["fixed", "stepwise", "linear", "adaptive"] = "fixed"
    """Which schedule to run (see the module docstring)."""
    cap: int | None = None
    """fixed: the cap (None: uncapped)."""
    rounds: tuple[int, ...] = ()
    """stepwise: the cap of each stage, in order."""
    every: int = 100
    """stepwise, linear: learner updates per stage."""
    start: int = 5
    """linear, adaptive: the first cap."""
    delta: int = 1
    """linear, adaptive: how much the cap moves at a time."""
    max_cap: int = 30
    """linear, adaptive: the cap never exceeds this."""
    window: int = 10
    """adaptive: updates of statistics behind each decision."""
    raise_truncation: float = 0.3
    """adaptive: mean share of episodes truncated at the cap needed to raise it."""
    min_success_gain: float = 0.0
    """adaptive: success must rise by more than this within the window to raise the cap."""
    mastery_success: float = 0.8
    """adaptive: mean success at which a cap counts as mastered (a floor for lowering)."""
    collapse_drop: float | None = 0.2
    """adaptive: lower the cap when success falls this far below its level before the last
    raise (None: never lower)."""
    strict: bool = False
    """For schedule ablations: every update trains only episodes of the cap its schedule gives
    it. Actors start a group with the cap of the update it is expected to be trained at (the
    learner sends the caps of the next ``max_staleness`` updates), and the learner drops a
    group of another cap (``dropped_cap_mismatch``; the actor may start another). Off: a
    group takes the cap in force when it starts, so near a stage boundary an update can train
    the previous stage's cap (``horizon_cap_data/<cap>`` in the metrics says which).
    fixed, stepwise and linear only."""

    def __post_init__(self) -> None:
        growing = self.schedule in ("linear", "adaptive")
        check(
            self,
            ("strict", not self.strict or self.schedule != "adaptive",
             "needs a schedule known in advance (fixed, stepwise, linear), not adaptive"),
            ("rounds", self.schedule != "stepwise" or bool(self.rounds),
             "must be a non-empty list of caps for the stepwise schedule"),
            ("rounds", all(r >= 1 for r in self.rounds), "caps must be >= 1"),
            ("cap", none_or(self.cap, lambda v: v >= 1), "must be >= 1 (or null: no cap)"),
            ("every", self.every >= 1, "must be >= 1"),
            ("delta", self.delta >= 1, "must be >= 1"),
            ("window", self.window >= 2, "must be >= 2"),
            ("start", not growing or 1 <= self.start <= self.max_cap,
             f"must be in [1, max_cap={self.max_cap}] for the {self.schedule} schedule"),
        )  # fmt: skip


@dataclass(frozen=True)
class HorizonStats:
    """What one update's batch says about the cap in force."""

    episodes: int
    """Episodes that ran under the current cap."""
    truncated: int
    """Of those, how many were cut off by the cap (not by a full context or the env's own
    limit, which a higher cap would not lift)."""
    successes: int
    """Of those, how many succeeded."""

    @classmethod
    def from_episodes(
        cls, episodes: Iterable[tuple[int | None, bool, bool]], cap: int | None
    ) -> HorizonStats:
        """Count ``(horizon_cap, truncated at the cap, success)`` triples whose cap equals
        ``cap``."""
        n = t = s = 0
        for ep_cap, truncated, success in episodes:
            if ep_cap == cap:
                n, t, s = n + 1, t + bool(truncated), s + bool(success)
        return cls(n, t, s)


class HorizonController:
    """The cap in force, driven by the schedule in ``HorizonConfig``."""

    def __init__(self, config: HorizonConfig):
        self.config = config
        self.steps = 0
        self.mastered = 0
        self._window: list[tuple[float, float]] = []
        self._success_before_raise: float | None = None
        self._cap = self._scheduled_cap(0) if config.schedule != "adaptive" else config.start

    @property
    def cap(self) -> int | None:
        """The cap for episodes that start now (None: uncapped)."""
        return self._cap

    def upcoming(self, n: int) -> tuple[int | None, ...]:
        """The caps of the next ``n`` updates (of versions steps + 1 .. steps + n), as the
        schedule gives them; an adaptive cap is assumed to hold."""
        if self.config.schedule == "adaptive":
            return (self._cap,) * n
        return tuple(self._scheduled_cap(self.steps + k) for k in range(1, n + 1))

    def observe(self, stats: HorizonStats) -> bool:
        """Account for one finished update; True when the cap changed."""
        self.steps += 1
        old = self._cap
        if self.config.schedule == "adaptive":
            self._adapt(stats)
        else:
            self._cap = self._scheduled_cap(self.steps)
        return self._cap != old

    def _scheduled_cap(self, steps: int) -> int | None:
        c = self.config
        if c.schedule == "fixed":
            return c.cap
        stage = steps // c.every
        if c.schedule == "stepwise":
            return c.rounds[min(stage, len(c.rounds) - 1)]
        return min(c.start + c.delta * stage, c.max_cap)

    def _adapt(self, stats: HorizonStats) -> None:
        c = self.config
        if stats.episodes == 0:  # nothing new ran under the cap (or, in a multi-env run, in
            return  # this env): decide again once something has
        n = stats.episodes
        self._window.append((stats.truncated / n, stats.successes / n))
        if len(self._window) < c.window:
            return
        trunc = _mean(w[0] for w in self._window)
        success = _mean(w[1] for w in self._window)
        half = len(self._window) // 2
        gain = _mean(w[1] for w in self._window[half:]) - _mean(w[1] for w in self._window[:half])
        if success >= c.mastery_success:
            self.mastered = max(self.mastered, self._cap)
        if trunc >= c.raise_truncation and gain > c.min_success_gain and self._cap < c.max_cap:
            self._success_before_raise = success
            self._move(min(self._cap + c.delta, c.max_cap))
        elif self._collapsed(success):
            self._success_before_raise = None  # one step back per raise, not a slide to start
            self._move(max(self._cap - c.delta, self.mastered, c.start))
        else:
            self._window.pop(0)  # slide: decide again after the next update

    def _collapsed(self, success: float) -> bool:
        drop = self.config.collapse_drop
        before = self._success_before_raise
        return drop is not None and before is not None and success < before - drop

    def _move(self, cap: int) -> None:
        if cap != self._cap:
            self._cap = cap
            self._window.clear()
        else:
            self._window.pop(0)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this controller is (JSON-friendly)."""
        return {
            "schedule": self.config.schedule,
            "steps": self.steps,
            "cap": self._cap,
            "mastered": self.mastered,
            "window": [list(w) for w in self._window],
            "success_before_raise": self._success_before_raise,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``; the schedule kind must match the config."""
        if state["schedule"] != self.config.schedule:
            raise ValueError(
                f"checkpoint has a {state['schedule']!r} horizon, config says "
                f"{self.config.schedule!r}"
            )
        self.steps = int(state["steps"])
        self.mastered = int(state["mastered"])
        self._window = [(float(a), float(b)) for a, b in state["window"]]
        self._success_before_raise = state["success_before_raise"]
        if self.config.schedule == "adaptive":
            self._cap = state["cap"]
        else:  # recomputed, so a changed schedule in the config takes effect from here on
            self._cap = self._scheduled_cap(self.steps)


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0

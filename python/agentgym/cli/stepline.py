"""The line ``agentgym train`` prints per learner step, from that step's ``metrics.jsonl`` record.

Every figure on the line is what the step measured; what it did not measure is shown as ``-``
rather than carried over from an earlier step: a BabyAI level (or an env of a multi-env run)
with no episode in the step's groups, throughput before a second step gives it an interval.

- ``success``: the step's episodes, then per env and per task group (``level_3``) where a run
  has several;
- ``invalid``: the share of the step's replies without a usable action (what moves first when
  a policy learns AgentGym's reply format);
- ``signal``: the share of the step's groups whose episodes' rewards differ; a group of equal
  rewards gives the group-relative estimators (GRPO, Dr. GRPO, RLOO) nothing to learn, and a
  step without any (and without a KL or entropy term) skips its optimizer step, so the weights
  stay where they were (``skipped_flat_steps``; ``SignalWatch`` warns when steps go by like
  that);
- ``staleness``: the mean lag of the step's trajectories (versions behind the learner);
- ``skipped-steps``: once an optimizer step was skipped for a gradient that was not finite,
  how many were (not shown before);
- ``samples/s``, ``tokens/s``: trajectories the learner received and tokens it trained on per
  second of wall time since the previous step.
"""

from __future__ import annotations

from typing import Any

GROUP_RELATIVE = frozenset({"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"})
"""Estimators whose advantage is zero in a group of equal rewards."""

LEGEND = (
    "per step: success, invalid (replies without a usable action) and signal (share of groups "
    "whose rewards differ) are that step's episodes, '-' where it had none of a level or env; "
    "samples/s and tokens/s are measured since the previous step"
)


class StepLine:
    """Formats one line per record, remembering only what a line needs from the step before
    (its time and counts, for rates; the names of the levels and envs seen so far)."""

    def __init__(self, total: int | None):
        self.total = total
        self.groups: list[str] = []  # success/... keys seen so far, first-seen order
        self._previous: dict[str, Any] | None = None

    def format(self, record: dict[str, Any], tail: str = "") -> str:
        """The line of ``record`` (``tail``: what the launcher adds, e.g. errors and time)."""
        self._note_groups(record)
        parts = [
            f"step {record.get('step', 0)}/{self.total if self.total is not None else '?'}",
            f"reward {_num(record.get('reward/all'))}",
            f"success {self._successes(record)}",
            f"invalid {_num(record.get('invalid/all'))}",
            f"signal {_num(record.get('signal/all'), '.2f')}",
            f"cap {_caps(record)}",
            f"staleness {_staleness(record)}",
            f"stale-dropped {record.get('dropped_stale_total', 0)}",
            *_skipped(record),
            *self._rates(record),
        ]
        self._previous = record
        return "  ".join([*parts, tail] if tail else parts)

    def _note_groups(self, record: dict[str, Any]) -> None:
        for key in record:
            if key.startswith("success/") and key != "success/all" and key not in self.groups:
                self.groups.append(key)

    def _successes(self, record: dict[str, Any]) -> str:
        """``0.50``, then ``(babyai 0.62, textcraft -)`` or ``(level_0 0.62, level_1 -)`` where
        the run has several envs or groups."""
        overall = _num(record.get("success/all"))
        envs = [k for k in self.groups if k.count("/") == 1]
        levels = [k for k in self.groups if k.count("/") == 2]
        shown = [k for k in envs if len(envs) > 1] + [k for k in levels if len(levels) > 1]
        if not shown:
            return overall
        names = [k.split("/", 1)[1] if len(envs) > 1 else k.rsplit("/", 1)[1] for k in shown]
        inner = ", ".join(f"{n} {_num(record.get(k))}" for n, k in zip(names, shown, strict=True))
        return f"{overall} ({inner})"

    def _rates(self, record: dict[str, Any]) -> list[str]:
        before = self._previous
        try:
            seconds = record["time"] - before["time"]  # type: ignore[index]
            samples = record["received_total"] - before["received_total"]  # type: ignore[index]
        except (KeyError, TypeError):
            return ["samples/s -", "tokens/s -"]
        if seconds <= 0:
            return ["samples/s -", "tokens/s -"]
        tokens = record.get("tokens")
        return [
            f"samples/s {samples / seconds:.1f}",
            f"tokens/s {tokens / seconds:.0f}" if tokens is not None else "tokens/s -",
        ]


class SignalWatch:
    """Counts the steps in a row whose groups all had equal rewards (``signal/all`` 0) and
    returns a warning at the third such step and every tenth after it (group-relative
    estimators only: for the others equal rewards still carry a signal)."""

    FIRST, EVERY = 3, 10

    def __init__(self, estimator: str):
        self.active = estimator in GROUP_RELATIVE
        self.streak: list[dict[str, Any]] = []
        self.silent_steps = 0

    def observe(self, record: dict[str, Any]) -> str | None:
        """The warning this step calls for, or None."""
        if not self.active or "signal/all" not in record:
            return None
        if record["signal/all"] > 0:
            self.streak = []
            return None
        self.streak.append(record)
        self.silent_steps += 1
        n = len(self.streak)
        if n < self.FIRST or (n - self.FIRST) % self.EVERY:
            return None
        first, last = self.streak[0].get("step", "?"), record.get("step", "?")
        return (
            f"agentgym train: warning: steps {first}-{last} had no group whose episodes' "
            f"rewards differ (every group all failed, or all succeeded alike; grad_norm "
            f"{_num(record.get('grad_norm'), '.3g')}): GRPO-style advantages are zero, so "
            "these steps trained on no policy gradient. Look at success and invalid: a policy "
            "that never succeeds needs easier tasks, more episodes per group "
            "(actor.group_size), a higher sampling temperature or SFT first; one that always "
            "succeeds, harder tasks."
        )


def _num(value: Any, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _skipped(m: dict[str, Any]) -> list[str]:
    """``["skipped-steps N"]`` once the run skipped an optimizer step (else nothing)."""
    n = m.get("skipped_steps_total", 0)
    return [f"skipped-steps {n}"] if n else []


def _caps(m: dict[str, Any]) -> str:
    """The cap in force, or each env's (``babyai 8, textcraft 6``)."""
    caps = {k.split("/", 1)[1]: v for k, v in m.items() if k.startswith("horizon_cap/")}
    if not caps:
        return str(m.get("horizon_cap", "-"))
    return ", ".join(f"{env} {cap}" for env, cap in sorted(caps.items()))


def _staleness(m: dict[str, Any]) -> str:
    """The mean lag of the step's trajectories (``staleness/<lag>`` counts)."""
    lags = {int(k.split("/")[1]): v for k, v in m.items() if k.startswith("staleness/")}
    if not lags:
        return "-"
    return f"{sum(k * v for k, v in lags.items()) / sum(lags.values()):.2f}"

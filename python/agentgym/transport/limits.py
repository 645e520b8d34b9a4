"""What the learner accepts from actors: bounds on every field of a trajectory batch and a hello.

``wire`` checks that a message is well formed (types, array sizes against the header); this
module checks that its values are ones an actor can produce and the learner can train on:
finite rewards and log-probs, token ids inside the model's vocabulary, a prompt no longer than
the episode, turn counts that match the turn versions, group sizes no larger than the run's,
bounded names and lengths. A batch with one bad trajectory is refused whole (a group is
trained whole or not at all), and the reason names the trajectory and the field.

The same bounds give the largest legal message (``TrajectoryLimits.message_bytes``) and
frame (``frame_bytes``), which cap what the learner's socket takes before anything is
decoded, and ``raise_open_file_limit`` gives the learner all the descriptors it may have.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.transport.wire import Trajectory

MAX_ID = (1 << 63) - 1
"""Episode, group and task ids must fit a signed 64-bit integer (torch's long)."""
MAX_ABS_REWARD = 1e6
"""Rewards beyond this (in absolute value) are refused: squared in advantage estimators, they
would overflow float32."""
MAX_NAME_CHARS = 64
"""Longest env name and timing name."""
MAX_TIMINGS = 16
"""Most timing entries per trajectory."""
MAX_ACTOR_NAME_CHARS = 256
HEADER_BYTES_PER_TRAJECTORY = 4096
"""Room for one trajectory's scalars in a message header (ids, names, 16 timings), with
margin: a real one takes a few hundred bytes."""


@dataclass(frozen=True)
class TrajectoryLimits:
    """Bounds a trajectory batch must meet (the defaults bound sizes for any run; the learner
    tightens them from its config with ``agentgym.cli.common.trajectory_limits``)."""

    max_group_size: int = 4096
    """Largest ``group_size`` (a run's is ``actor.group_size``)."""
    max_tokens: int = 1 << 20
    """Most tokens in one trajectory."""
    max_turns: int = 1 << 16
    """Most policy turns in one trajectory (``num_turns``)."""
    max_batch: int = 4096
    """Most trajectories in one message."""
    vocab_size: int | None = None
    """Token ids must be below this (the model's embedding rows); None: not checked."""
    envs: frozenset[str] | None = None
    """The env names the run trains on; None: any name."""

    def frame_bytes(self) -> int:
        """The largest frame of a legal trajectory message: its header, or its token ids
        (``max_batch`` trajectories of ``max_tokens`` int32 tokens, the largest array)."""
        return max(self.max_batch * self.max_tokens * 4, self._header_bytes())

    def message_bytes(self) -> int:
        """The largest legal trajectory message, all its frames together: ``max_batch``
        trajectories of ``max_tokens`` tokens (token id and log-prob 4 bytes each, loss mask
        1) and as many turns (a turn samples a token; its version 4 bytes, its finish reason
        1), with their header."""
        turns = min(self.max_turns, self.max_tokens)
        return self.max_batch * (self.max_tokens * 9 + turns * 5) + self._header_bytes()

    def _header_bytes(self) -> int:
        return self.max_batch * HEADER_BYTES_PER_TRAJECTORY + 4096

    def problem(self, batch: Sequence[Trajectory]) -> str | None:
        """Why ``batch`` is refused, or None when every trajectory in it is within bounds."""
        if len(batch) > self.max_batch:
            return f"{len(batch)} trajectories in one message (at most {self.max_batch})"
        for i, t in enumerate(batch):
            why = self._scalar_problem(t) or self._array_problem(t)
            if why is not None:
                return f"trajectory {i} (episode {t.episode_id}): {why}"
        return None

    def _scalar_problem(self, t: Trajectory) -> str | None:
        for name in ("episode_id", "group_id", "task_id"):
            value = getattr(t, name)
            if not 0 <= value <= MAX_ID:
                return f"{name} {value} is outside [0, 2**63)"
        if not 1 <= t.group_size <= self.max_group_size:
            return f"group_size {t.group_size} is outside [1, {self.max_group_size}]"
        if not _is_name(t.env) or (self.envs is not None and t.env not in self.envs):
            return f"env {t.env[:80]!r} is not one of this run's envs"
        if t.horizon_cap is not None and not 1 <= t.horizon_cap <= MAX_ID:
            return f"horizon_cap {t.horizon_cap} is not >= 1"
        if not (math.isfinite(t.reward) and abs(t.reward) <= MAX_ABS_REWARD):
            return f"reward {t.reward} is not a finite number within +-{MAX_ABS_REWARD:g}"
        if not 0 <= t.prompt_len <= len(t.tokens):
            return f"prompt_len {t.prompt_len} is outside [0, {len(t.tokens)} tokens]"
        if t.num_turns != len(t.turn_versions) or t.num_turns > self.max_turns:
            return (
                f"num_turns {t.num_turns} does not match its {len(t.turn_versions)} turn "
                f"versions (at most {self.max_turns})"
            )
        if not 0 <= t.invalid_replies <= t.num_turns:
            return f"invalid_replies {t.invalid_replies} is outside [0, num_turns]"
        return _timings_problem(t.timings)

    def _array_problem(self, t: Trajectory) -> str | None:
        if len(t.tokens) > self.max_tokens:
            return f"{len(t.tokens)} tokens (at most {self.max_tokens})"
        if len(t.tokens) == 0:
            return "no tokens"
        low, high = int(t.tokens.min()), int(t.tokens.max())
        if low < 0 or (self.vocab_size is not None and high >= self.vocab_size):
            return f"token ids span [{low}, {high}], outside the vocabulary [0, {self.vocab_size})"
        if not np.isfinite(t.logprobs).all():
            return "a log-prob is not finite"
        if int(t.loss_mask.max()) > 1:
            return "loss_mask holds values other than 0 and 1"
        if int(t.turn_versions.min()) < 0:
            return "a turn version is negative"
        return None


def _timings_problem(timings) -> str | None:
    if len(timings) > MAX_TIMINGS:
        return f"{len(timings)} timings (at most {MAX_TIMINGS})"
    for name, seconds in timings.items():
        if not _is_name(name) or not math.isfinite(seconds):
            return f"timing {name[:80]!r}: {seconds}"
    return None


def _is_name(text: str) -> bool:
    return 0 < len(text) <= MAX_NAME_CHARS and text.isprintable()


def actor_name_problem(name: str) -> str | None:
    """Why an actor name (from a hello or a batch) is refused, or None."""
    if not 0 < len(name) <= MAX_ACTOR_NAME_CHARS or not name.isprintable():
        return f"actor name must be 1-{MAX_ACTOR_NAME_CHARS} printable characters"
    return None


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (a learner serving TCP
    holds a descriptor per connection; many systems start processes at 1024 with a far higher
    hard limit); returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):  # a hard limit over the kernel's nr_open
        return soft
    return wanted

"""From trajectories to training batches: group assembly, the staleness filter, padding.

``GroupBuffer`` collects trajectories until their group is complete, drops what is too stale
(counting it), and hands out whole groups. ``collate`` pads a list of trajectories into a
``TrainBatch`` of tensors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from agentgym.transport.wire import Trajectory, id_origin, id_position


@dataclass(frozen=True)
class TrainBatch:
    """Right-padded tensors for B sequences of up to T tokens (see ``collate``)."""

    tokens: Tensor
    """long[B, T] token ids, padded with the pad id."""
    attention_mask: Tensor
    """long[B, T]: 1 on real tokens."""
    loss_mask: Tensor
    """float[B, T]: 1 on generated tokens."""
    behav_logp: Tensor
    """float[B, T]: the behaviour policy's log-probs (0 off the loss mask)."""
    rewards: Tensor
    """float[B] outcome rewards."""
    group_index: Tensor
    """long[B]: dense group number 0..G-1, in order of first appearance."""
    min_versions: Tensor
    """long[B]: oldest policy version in each trajectory."""

    @property
    def size(self) -> int:
        """Number of sequences B."""
        return self.tokens.shape[0]

    def select(self, index: Tensor) -> TrainBatch:
        """The sequences at ``index``, trimmed to their longest real length."""
        length = int(self.attention_mask[index].sum(-1).max()) if len(index) else 0
        return TrainBatch(
            *(t[index][:, :length] for t in self._per_token()),
            rewards=self.rewards[index],
            group_index=self.group_index[index],
            min_versions=self.min_versions[index],
        )

    def _per_token(self) -> tuple[Tensor, ...]:
        return self.tokens, self.attention_mask, self.loss_mask, self.behav_logp

    def to(self, device: str | torch.device) -> TrainBatch:
        """The batch on ``device``."""
        return TrainBatch(*(t.to(device) for t in self.__dict__.values()))


def collate(trajectories: Sequence[Trajectory], pad_token_id: int = 0) -> TrainBatch:
    """Pad ``trajectories`` on the right into a ``TrainBatch``."""
    B = len(trajectories)
    T = max((t.num_tokens for t in trajectories), default=0)
    tokens = np.full((B, T), pad_token_id, np.int64)
    attention = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.float32)
    logp = np.zeros((B, T), np.float32)
    for i, t in enumerate(trajectories):
        n = t.num_tokens
        tokens[i, :n] = t.tokens
        attention[i, :n] = 1
        mask[i, :n] = t.loss_mask
        logp[i, :n] = np.where(t.loss_mask > 0, t.logprobs, 0.0)
    groups: dict[int, int] = {}
    group_index = [groups.setdefault(t.group_id, len(groups)) for t in trajectories]
    return TrainBatch(
        tokens=torch.from_numpy(tokens),
        attention_mask=torch.from_numpy(attention),
        loss_mask=torch.from_numpy(mask),
        behav_logp=torch.from_numpy(logp),
        rewards=torch.tensor([t.reward for t in trajectories], dtype=torch.float32),
        group_index=torch.tensor(group_index, dtype=torch.long),
        min_versions=torch.tensor([t.min_version for t in trajectories], dtype=torch.long),
    )


@dataclass
class BufferStats:
    """What the buffer has done since it was created (or since ``take_step_counts``)."""

    received: int = 0
    """Trajectories added."""
    dropped_stale: int = 0
    """Trajectories dropped because their group was too stale."""
    dropped_duplicate: int = 0
    """Trajectories whose episode id was already in their group."""
    dropped_superseded: int = 0
    """Trajectories of incomplete groups whose actor was relaunched (a newer process with
    the same actor index sent trajectories): the rest of such a group never comes."""
    dropped_incomplete: int = 0
    """Trajectories of incomplete groups pushed out by newer ones past ``max_pending``."""
    staleness: Counter = field(default_factory=Counter)
    """Histogram of version lag of the trajectories handed out for training."""
    dropped_groups: Counter = field(default_factory=Counter)
    """Per actor process (index, launch): groups dropped as too stale (``Control`` tells the
    actor, which may start as many more)."""


class GroupBuffer:
    """Collects trajectories into complete groups and applies the staleness bound.

    Lag of a trajectory = learner version - oldest policy version that produced any of its
    turns. A group is the unit of the advantage baseline, so it is kept or dropped whole: if any
    member lags more than ``max_staleness`` versions, the whole group is dropped and counted.
    Incomplete groups that have become too stale are dropped too (their actor may be gone),
    and so are those of an actor process once a relaunch of it (same index, higher launch in
    the group id) delivers. Groups leave in order of completion.

    It also follows each actor index's task stream (the position in a group id): how far the
    groups received reach (where a relaunched actor goes on) and how far those trained or
    dropped reach (where the actors of a run resumed from a checkpoint go on).

    At most ``max_pending`` incomplete groups wait (agentgym's actors send a group whole, so
    normally none do); one more pushes out the group that started waiting first, so a group
    that can never complete holds no memory for long.
    """

    def __init__(self, max_staleness: int, max_pending: int = 256):
        self.max_staleness = max_staleness
        self.max_pending = max_pending
        self.stats = BufferStats()
        self._pending: dict[int, list[Trajectory]] = {}
        self._ready: list[list[Trajectory]] = []
        self._launches: dict[int, int] = {}
        self._received_streams: dict[int, int] = {}
        self._used_streams: dict[int, int] = {}
        self.changed = False
        """Set when what ``Control`` tells the actors moved (task streams, dropped groups)."""

    def task_streams(self) -> dict[int, int]:
        """Per actor index, one past the newest stream position received (or used)."""
        out = dict(self._used_streams)
        for index, position in self._received_streams.items():
            out[index] = max(out.get(index, 0), position)
        return out

    def _advance(self, streams: dict[int, int], group_id: int) -> None:
        index, position = id_origin(group_id)[0], id_position(group_id) + 1
        if position > streams.get(index, 0):
            streams[index] = position
            self.changed = True

    def add(self, trajectories: Iterable[Trajectory]) -> None:
        """Accept trajectories; complete groups move to the ready queue."""
        for t in trajectories:
            self.stats.received += 1
            self._note_launch(t.group_id)
            self._advance(self._received_streams, t.group_id)
            if t.group_id not in self._pending and len(self._pending) >= self.max_pending:
                self._drop_incomplete(next(iter(self._pending)))
            members = self._pending.setdefault(t.group_id, [])
            if any(m.episode_id == t.episode_id for m in members):
                self.stats.dropped_duplicate += 1
                continue
            members.append(t)
            if len(members) >= t.group_size:
                self._ready.append(self._pending.pop(t.group_id))

    def _drop_incomplete(self, group_id: int) -> None:
        """Drop the incomplete group ``group_id`` (its actor is told, as for a stale one)."""
        self.stats.dropped_incomplete += len(self._pending.pop(group_id))
        self.stats.dropped_groups[id_origin(group_id)] += 1
        self.changed = True

    def _note_launch(self, group_id: int) -> None:
        """Drop the incomplete groups of older processes of ``group_id``'s actor index."""
        index, launch = id_origin(group_id)
        if launch <= self._launches.get(index, 0):
            return
        self._launches[index] = launch
        for gid in list(self._pending):
            group_index, group_launch = id_origin(gid)
            if group_index == index and group_launch < launch:
                self.stats.dropped_superseded += len(self._pending.pop(gid))

    def pop_groups(self, n: int, version: int) -> list[list[Trajectory]] | None:
        """``n`` fresh complete groups for training at ``version``, or None if not enough yet.

        The first ``n`` to complete are taken, then ordered by group id (members by episode
        id): the update does not depend on the order in which they arrived, so a synchronous
        run, whose steps take the same groups whatever their timing, is reproducible."""
        self.drop_stale(version)
        if len(self._ready) < n:
            return None
        groups, self._ready = self._ready[:n], self._ready[n:]
        for g in groups:
            self.stats.staleness.update(version - t.min_version for t in g)
            self._advance(self._used_streams, g[0].group_id)
        ordered = sorted(groups, key=lambda g: g[0].group_id)
        return [sorted(g, key=lambda t: t.episode_id) for g in ordered]

    def drop_stale(self, version: int) -> int:
        """Drop ready and pending groups with a member lagging too far; returns how many."""
        before = self.stats.dropped_stale
        self._ready = [g for g in self._ready if self._fresh(g, version)]
        for gid in [gid for gid, g in self._pending.items() if not self._fresh(g, version)]:
            del self._pending[gid]
        return self.stats.dropped_stale - before

    def _fresh(self, group: list[Trajectory], version: int) -> bool:
        if all(version - t.min_version <= self.max_staleness for t in group):
            return True
        self.stats.dropped_stale += len(group)
        self.stats.dropped_groups[id_origin(group[0].group_id)] += 1
        self._advance(self._used_streams, group[0].group_id)
        self.changed = True
        return False

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the totals as of the groups used so far (trajectories
        still waiting are sent again by the actors of a resumed run) and how far each actor
        index's task stream has been used."""
        waiting = sum(len(g) for g in self._ready) + self.num_pending
        s = self.stats
        return {
            "received": s.received - waiting,
            "dropped_stale": s.dropped_stale,
            "dropped_duplicate": s.dropped_duplicate,
            "dropped_superseded": s.dropped_superseded,
            "dropped_incomplete": s.dropped_incomplete,
            "task_streams": {str(i): p for i, p in self._used_streams.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the totals and task streams of a checkpoint (``state_dict``)."""
        names = ("received", "dropped_stale", "dropped_duplicate", "dropped_superseded",
                 "dropped_incomplete")  # fmt: skip
        for name in names:
            setattr(self.stats, name, int(state.get(name, 0)))
        self._used_streams = {int(i): int(p) for i, p in state.get("task_streams", {}).items()}
        self.changed = True

    @property
    def num_ready(self) -> int:
        """Complete groups waiting."""
        return len(self._ready)

    @property
    def num_pending(self) -> int:
        """Trajectories in incomplete groups."""
        return sum(len(g) for g in self._pending.values())

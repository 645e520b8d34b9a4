"""From trajectories to training batches: group assembly, the staleness filter, padding.

``GroupBuffer`` collects trajectories until their group is complete, drops what is too stale
(counting it), and hands out whole groups. ``collate`` pads a list of trajectories into a
``TrainBatch`` of tensors.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from agentgym.transport.ids import id_origin, id_position
from agentgym.transport.wire import Trajectory


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
    dropped_cap_mismatch: int = 0
    """Trajectories of groups a strict horizon schedule refused: their cap is not the one
    the update would train (``HorizonConfig.strict``)."""
    staleness: Counter = field(default_factory=Counter)
    """Histogram of version lag of the trajectories handed out for training."""
    lost_groups: int = 0
    """Groups their actor reported lost (every episode's env failed; nothing was sent)."""
    dropped_groups: Counter = field(default_factory=Counter)
    """Per actor process (index, launch): groups dropped as too stale (``Control`` tells the
    actor, which may start as many more)."""
    profile: dict[str, Counter] = field(
        default_factory=lambda: {"trained": Counter(), "dropped": Counter()}
    )
    """Totals over the complete groups trained and those dropped (stale or cap mismatch):
    groups, episodes, successes, turns, and groups whose rewards differ (the ones with a
    learning signal), so that what the drops removed can be set beside what was kept."""

    def note(self, kind: str, group: Sequence[Trajectory]) -> None:
        """Add complete ``group`` to the ``kind`` ("trained" or "dropped") profile."""
        p = self.profile[kind]
        p["groups"] += 1
        p["episodes"] += len(group)
        p["successes"] += sum(bool(t.success) for t in group)
        p["turns"] += sum(t.num_turns for t in group)
        p["mixed"] += len({t.reward for t in group}) > 1

    def profile_metrics(self) -> dict[str, float]:
        """``group_profile/<kind>_{groups,success,turns,mixed}``: counts and run-long means
        (success and turns per episode, mixed per group) of the trained and dropped groups."""
        out: dict[str, float] = {}
        for kind, p in self.profile.items():
            out[f"group_profile/{kind}_groups"] = p["groups"]
            if p["groups"]:
                out[f"group_profile/{kind}_success"] = p["successes"] / p["episodes"]
                out[f"group_profile/{kind}_turns"] = p["turns"] / p["episodes"]
                out[f"group_profile/{kind}_mixed"] = p["mixed"] / p["groups"]
        return out


class GroupBuffer:
    """Collects trajectories into complete groups and applies the staleness bound.

    Lag of a trajectory = learner version - oldest policy version that produced any of its
    turns. A group is the unit of the advantage baseline, so it is kept or dropped whole: if any
    member lags more than ``max_staleness`` versions, the whole group is dropped and counted.
    Incomplete groups that have become too stale are dropped too (their actor may be gone),
    and so are those of an actor process once a relaunch of it (same index, higher launch in
    the group id) delivers.

    Groups leave in the order they started (``order="start"``): per actor index, by position
    in its task stream, a group only once every earlier one is trained, dropped, reported
    lost by its actor (``note_lost``) or past a relaunch of that actor; across indices by
    position. A group lasts as long as its slowest episode, so taking groups as they complete
    (``order="completion"``) trains the short ones first and leaves to go stale the groups
    with an episode run to the cap: mostly the ones with a learning signal.

    It also follows each actor index's task stream (the position in a group id): how far the
    groups received reach (where a relaunched actor goes on) and how far those trained or
    dropped reach (where the actors of a run resumed from a checkpoint go on).

    At most ``max_pending`` incomplete groups wait (agentgym's actors send a group whole, so
    normally none do); one more pushes out the group that started waiting first, so a group
    that can never complete holds no memory for long.
    """

    def __init__(self, max_staleness: int, max_pending: int = 256, order: str = "start"):
        if order not in ("start", "completion"):
            raise ValueError(f"unknown group order {order!r} (start, completion)")
        self.max_staleness = max_staleness
        self.max_pending = max_pending
        self.order = order
        self._frontier: dict[int, int] = {}  # per actor index: the oldest unsettled position
        self._settled: defaultdict[int, set[int]] = defaultdict(set)  # settled past it
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

    def _settle(self, group_id: int) -> None:
        """The group at ``group_id``'s stream position will not be trained (or just was)."""
        index, position = id_origin(group_id)[0], id_position(group_id)
        if position >= self._frontier.get(index, self._used_streams.get(index, 0)):
            self._settled[index].add(position)
        self._move_frontier(index)

    def _move_frontier(self, index: int) -> None:
        """Past the settled positions at the front of ``index``'s stream."""
        frontier = self._frontier.get(index, self._used_streams.get(index, 0))
        settled = self._settled[index]
        while frontier in settled:
            settled.discard(frontier)
            frontier += 1
        self._frontier[index] = frontier

    def note_lost(self, group_id: int) -> None:
        """Its actor says the group ``group_id`` will never arrive (every episode's env
        failed): groups started after it need not wait for it."""
        self.stats.lost_groups += 1
        self._settle(group_id)

    def _drop_incomplete(self, group_id: int) -> None:
        """Drop the incomplete group ``group_id`` (its actor is told, as for a stale one)."""
        self._settle(group_id)
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
                self._settle(gid)
        # the relaunch goes on past what was received: earlier positions that never came
        # (groups of the process that died) never will
        waiting = {id_position(g[0].group_id) for g in self._ready
                   if id_origin(g[0].group_id)[0] == index}  # fmt: skip
        frontier = self._frontier.get(index, self._used_streams.get(index, 0))
        for position in range(frontier, id_position(group_id)):
            if position not in waiting:
                self._settled[index].add(position)
        self._move_frontier(index)

    def pop_groups(self, n: int, version: int) -> list[list[Trajectory]] | None:
        """``n`` fresh complete groups for training at ``version``, or None if not enough yet.

        The first ``n`` to complete are taken, then ordered by group id (members by episode
        id): the update does not depend on the order in which they arrived, so a synchronous
        run, whose steps take the same groups whatever their timing, is reproducible."""
        self.drop_stale(version)
        eligible = self._ready if self.order == "completion" else self._in_start_order()
        if len(eligible) < n:
            return None
        groups = eligible[:n]
        taken = {id(g) for g in groups}
        self._ready = [g for g in self._ready if id(g) not in taken]
        for g in groups:
            self.stats.note("trained", g)
            self.stats.staleness.update(version - t.min_version for t in g)
            self._advance(self._used_streams, g[0].group_id)
            self._settle(g[0].group_id)
        ordered = sorted(groups, key=lambda g: g[0].group_id)
        return [sorted(g, key=lambda t: t.episode_id) for g in ordered]

    def _in_start_order(self) -> list[list[Trajectory]]:
        """The ready groups that may train now, oldest first: per actor index, those whose
        every earlier stream position is settled or ready itself."""
        by_index: defaultdict[int, dict[int, list[Trajectory]]] = defaultdict(dict)
        for g in self._ready:
            by_index[id_origin(g[0].group_id)[0]][id_position(g[0].group_id)] = g
        out = []
        for index, groups in by_index.items():
            position = self._frontier.get(index, self._used_streams.get(index, 0))
            settled, last = self._settled[index], max(groups)
            while position <= last and (position in groups or position in settled):
                if position in groups:
                    out.append(groups[position])
                position += 1
        return sorted(out, key=lambda g: (id_position(g[0].group_id), g[0].group_id))

    def blocked(self) -> dict[int, tuple[int, int]]:
        """In start order, per actor index whose ready groups wait for an earlier one: (the
        stream position waited for, how many ready groups wait behind it)."""
        if self.order != "start":
            return {}
        free = {id(g) for g in self._in_start_order()}
        out: dict[int, tuple[int, int]] = {}
        for g in self._ready:
            if id(g) not in free:
                index = id_origin(g[0].group_id)[0]
                frontier = self._frontier.get(index, self._used_streams.get(index, 0))
                out[index] = (frontier, out.get(index, (frontier, 0))[1] + 1)
        return out

    def drop_where(self, refused: Callable[[list[Trajectory]], bool], reason: str) -> int:
        """Drop the ready groups ``refused`` says no to, counted as ``dropped_<reason>`` and,
        as stale ones are, told to their actor (which may start as many more); returns how
        many groups."""
        kept, gone = [], []
        for g in self._ready:
            (gone if refused(g) else kept).append(g)
        field_name = f"dropped_{reason}"
        for g in gone:
            self.stats.note("dropped", g)
            self._settle(g[0].group_id)
            setattr(self.stats, field_name, getattr(self.stats, field_name) + len(g))
            self.stats.dropped_groups[id_origin(g[0].group_id)] += 1
            self._advance(self._used_streams, g[0].group_id)
            self.changed = True
        self._ready = kept
        return len(gone)

    def drop_stale(self, version: int) -> int:
        """Drop ready and pending groups with a member lagging too far; returns how many."""
        before = self.stats.dropped_stale
        self._ready = [g for g in self._ready if self._fresh(g, version, complete=True)]
        for gid in [gid for gid, g in self._pending.items() if not self._fresh(g, version)]:
            del self._pending[gid]
        return self.stats.dropped_stale - before

    def _fresh(self, group: list[Trajectory], version: int, complete: bool = False) -> bool:
        if all(version - t.min_version <= self.max_staleness for t in group):
            return True
        if complete:
            self.stats.note("dropped", group)
        self._settle(group[0].group_id)
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
            "dropped_cap_mismatch": s.dropped_cap_mismatch,
            "task_streams": {str(i): p for i, p in self._used_streams.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the totals and task streams of a checkpoint (``state_dict``)."""
        names = ("received", "dropped_stale", "dropped_duplicate", "dropped_superseded",
                 "dropped_incomplete", "dropped_cap_mismatch")  # fmt: skip
        for name in names:
            setattr(self.stats, name, int(state.get(name, 0)))
        self._used_streams = {int(i): int(p) for i, p in state.get("task_streams", {}).items()}
        self._frontier = dict(self._used_streams)  # every earlier position was settled
        self._settled.clear()
        self.changed = True

    @property
    def num_ready(self) -> int:
        """Complete groups waiting."""
        return len(self._ready)

    @property
    def num_pending(self) -> int:
        """Trajectories in incomplete groups."""
        return sum(len(g) for g in self._pending.values())

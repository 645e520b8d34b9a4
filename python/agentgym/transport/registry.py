"""The actors a learner has heard from: their names, launch numbers and trajectory counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class ActorRecord:
    """What the learner knows of one actor."""

    first_seen: float
    last_seen: float
    trajectories: int = 0
    messages: int = 0
    hellos: int = 0
    index: int | None = None
    launch: int | None = None


class ActorRegistry:
    """Actors seen by the learner (by the name they give in ``Hello`` and on their
    trajectory batches): trajectories per actor and when each was last heard from.

    An actor counts as connected while it was heard from within ``alive_s`` (actors say hello
    every few seconds); one that died or left drops out by itself, and training goes on with
    the others. Thread-safe: hellos arrive on the channel thread, trajectories on the caller's.

    At most ``max_actors`` names are kept: a new name takes the place of the one heard from
    least recently among those no longer connected; when every kept name is connected, the new
    one is refused (its hello is answered with a refusal, and its trajectories, accepted, are
    counted in ``unnamed``).

    Each new actor name gets a launch number for its index (0, then 1 for the next process
    with that index, ...): relaunched actors use it to keep their ids apart from their
    predecessors'. The counts are part of a checkpoint (``launches``/``restore_launches``).
    """

    def __init__(self, alive_s: float = 15.0, max_actors: int = 1024):  # 3 missed hellos
        self.alive_s = alive_s
        self.max_actors = max_actors
        self._lock = threading.Lock()
        self._actors: dict[str, ActorRecord] = {}
        self._launches: dict[int, int] = {}
        self.refused = 0
        self.unnamed = 0

    def greet(self, actor: str, index: int) -> int | None:
        """Record a hello of ``actor`` with ``index``: its launch number, or None when it is
        refused (every place is taken by a connected actor; see the class doc)."""
        with self._lock:
            now = time.time()
            rec = self._record(actor, now)
            if rec is None:
                return None
            rec.last_seen = now
            rec.hellos += 1
            return self._launch(rec, index)

    def _record(self, actor: str, now: float) -> ActorRecord | None:
        rec = self._actors.get(actor)
        if rec is not None:
            return rec
        if len(self._actors) >= self.max_actors:
            gone = [(r.last_seen, n) for n, r in self._actors.items()
                    if now - r.last_seen > self.alive_s]  # fmt: skip
            if not gone:
                return None
            del self._actors[min(gone)[1]]
        rec = self._actors[actor] = ActorRecord(now, now)
        return rec

    def launch_of(self, actor: str, index: int) -> int:
        """The launch number of ``actor`` (a new name takes the next one for ``index``);
        ``KeyError`` when a new name finds no place."""
        with self._lock:
            rec = self._record(actor, time.time())
            if rec is None:
                raise KeyError(actor)
            return self._launch(rec, index)

    def _launch(self, rec: ActorRecord, index: int) -> int:
        if rec.launch is None or rec.index != index:
            rec.index, rec.launch = index, self._launches.get(index, 0)
            self._launches[index] = rec.launch + 1
        return rec.launch

    def launches(self) -> dict[int, int]:
        """Per actor index, how many processes have said hello (what a checkpoint keeps)."""
        with self._lock:
            return dict(self._launches)

    def restore_launches(self, launches: Mapping[int, int]) -> None:
        """Continue the counts of a resumed run (names of its processes are not kept)."""
        with self._lock:
            for index, n in launches.items():
                self._launches[int(index)] = max(self._launches.get(int(index), 0), int(n))

    def seen(self, actor: str, *, trajectories: int = 0) -> None:
        """Record a batch of ``trajectories`` from ``actor``."""
        now = time.time()
        with self._lock:
            rec = self._record(actor, now)
            if rec is None:
                self.unnamed += trajectories
                return
            rec.last_seen = now
            rec.trajectories += trajectories
            rec.messages += 1

    def snapshot(self) -> dict[str, dict]:
        """Per actor: trajectories, messages, first/last seen (unix time), seconds since last
        heard from, and whether it counts as connected."""
        now = time.time()
        with self._lock:
            return {
                name: {**rec.__dict__, "idle_s": round(now - rec.last_seen, 3),
                       "connected": now - rec.last_seen <= self.alive_s}
                for name, rec in sorted(self._actors.items())
            }  # fmt: skip

    def counts(self) -> dict[str, int]:
        """Actors known and connected, and trajectories received from named actors."""
        snap = self.snapshot().values()
        return {
            "known": len(snap),
            "connected": sum(a["connected"] for a in snap),
            "trajectories": sum(a["trajectories"] for a in snap),
            "refused": self.refused,
            "unnamed_trajectories": self.unnamed,
        }

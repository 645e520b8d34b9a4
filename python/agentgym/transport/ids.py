"""Group and episode ids: ``index << 48 | launch << 32 | counter``, unique across a run's actors
and their relaunches, and the parts read back out of one."""

from __future__ import annotations

from collections.abc import Iterator

MAX_ACTORS = 1 << 15
"""Actor indices an id holds (the wire refuses a larger one)."""
MAX_LAUNCHES = 1 << 16
"""Launches per actor index an id holds; with ``MAX_ACTORS``, every id fits an int64."""


def next_ids(index: int, launch: int = 0, start: int = 0) -> Iterator[int]:
    """Ids unique across a run's actors and their relaunches: ``index << 48 | launch << 32 |
    counter``, the counter from ``start`` on (``launch``: how many processes with this index
    came before, as the learner's ``Welcome`` says). Under 2**63 for every index and launch
    the wire admits. An actor's group counter is its task stream's position
    (``id_position``), which goes on across its relaunches."""
    if not (0 <= index < MAX_ACTORS and 0 <= launch < MAX_LAUNCHES and 0 <= start < 1 << 32):
        raise ValueError(f"actor index {index} / launch {launch} / start {start} out of range")
    prefix = (index << 16 | launch) << 32
    return (prefix | i for i in range(start, 1 << 32))


def id_origin(any_id: int) -> tuple[int, int]:
    """The (actor index, launch) a group or episode id of :func:`next_ids` came from."""
    return any_id >> 48, (any_id >> 32) & 0xFFFF


def id_position(any_id: int) -> int:
    """The counter of a group or episode id of :func:`next_ids` (for a group id, the group's
    position in its actor's task stream)."""
    return any_id & 0xFFFFFFFF

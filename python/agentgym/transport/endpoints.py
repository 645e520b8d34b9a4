"""Where a learner's three sockets are (``Endpoints``) and the counters each side keeps of what
it sent, received and refused (``ChannelStats``).

The learner binds three sockets; actors connect to them and may come and go at any time:

- trajectories: learner PULL <- actor PUSH. High-water marks on both ends give back-pressure:
  a PUSH blocks (or times out) when the learner falls behind.
- control: learner PUB -> actor SUB. The learner republishes the current ``Control`` every
  ``republish_s`` seconds (default 0.1: a new actor waits that long at most for its first
  control, and a control message is a few bytes) so an actor that joins late learns the
  version and horizon cap.
- weights: learner ROUTER <-> actor DEALER. An actor asks for weights newer than the version it
  has; the learner answers with the latest snapshot, split into chunks of about
  ``chunk_bytes``, one request per chunk (the messages, the store and the fetch are
  ``agentgym.transport.weights``'s; ``learner_channels`` and ``actor_channels`` carry them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoints:
    """The three addresses of a learner, as zmq endpoint strings (tcp://, ipc:// or inproc://).

    A tcp port ``*`` (``tcp://127.0.0.1:*``) lets the learner pick a free port; the bound
    endpoints are then reported by ``LearnerChannels.endpoints``.
    """

    trajectories: str = "tcp://127.0.0.1:5601"
    """Where the learner PULLs trajectories."""
    control: str = "tcp://127.0.0.1:5602"
    """Where the learner PUBlishes control messages."""
    weights: str = "tcp://127.0.0.1:5603"
    """Where the learner's ROUTER serves weights."""

    @classmethod
    def ipc(cls, directory: str | Path) -> Endpoints:
        """Unix-socket endpoints inside ``directory`` (one machine, lowest latency)."""
        d = Path(directory)
        return cls(f"ipc://{d / 'traj'}", f"ipc://{d / 'control'}", f"ipc://{d / 'weights'}")

    @classmethod
    def inproc(cls, name: str) -> Endpoints:
        """In-process endpoints named after ``name``: a learner and actors that are threads of
        one process (``agentgym train --inline``). The messages are the ones the other
        transports carry, encoded and checked alike, passed in memory by ZeroMQ; both sides
        use this process's shared ZeroMQ context, and no other process can reach them. No
        stream is decoded in memory, so libzmq's frame cap does not apply: a message past the
        largest legal one is read, then refused as oversized (``LearnerChannels``)."""
        return cls(*(f"inproc://{name}/{part}" for part in ("traj", "control", "weights")))

    @property
    def in_process(self) -> bool:
        """Whether these are ``inproc`` endpoints (reachable from this process alone)."""
        return self.trajectories.startswith("inproc://")

    @classmethod
    def tcp(cls, host: str = "127.0.0.1", base_port: int | None = None) -> Endpoints:
        """TCP endpoints on ``host`` at ``base_port`` .. +2, or on free ports when None."""
        ports = ["*"] * 3 if base_port is None else [str(base_port + i) for i in range(3)]
        return cls(*(f"tcp://{host}:{p}" for p in ports))


@dataclass
class ChannelStats:
    """Counters a receiver keeps; ``rejected`` counts messages refused (undecodable or out of
    bounds), ``rejected_trajectories`` the trajectories they held when they decoded."""

    received: int = 0
    sent: int = 0
    rejected: int = 0
    rejected_trajectories: int = 0
    oversized: int = 0
    """Of ``rejected``: messages of more frames or bytes than the largest legal one."""
    bytes_received: int = 0
    last_error: str | None = None
    _logged_at: float = field(default=0.0, repr=False)
    _unlogged: int = field(default=0, repr=False)

    def reject(self, what: str, err: Exception | str, trajectories: int = 0) -> None:
        """Count one refused message and log it, at most one line a second (a flood of bad
        messages must not flood the log); the line says how many went unlogged."""
        self.rejected += 1
        self.rejected_trajectories += trajectories
        self.last_error = f"{what}: {err}"
        now = time.monotonic()
        if now - self._logged_at < 1.0:
            self._unlogged += 1
            return
        more = f" (and {self._unlogged} more since the last line)" if self._unlogged else ""
        self._logged_at, self._unlogged = now, 0
        log.warning("rejected %s message: %s%s", what, err, more)

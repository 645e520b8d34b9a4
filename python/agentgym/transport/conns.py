"""A cap on the TCP connections each of the learner's sockets holds.

libzmq accepts every TCP connection before its handshake and key check, and has no cap of its
own: sockets that connect and send nothing hold a descriptor each until the handshake interval
closes them, and a thousand of them exhausted a learner's descriptors under ``ulimit -n 1024``.
``ConnectionCap`` reads each socket's monitor (the descriptors libzmq accepts and closes) and,
past ``max_per_socket`` open connections on one socket, shuts down a connection that has not
even sent a ZeroMQ greeting (64 bytes; an actor sends its greeting at once, then its
handshake): the oldest such one, or the newest connection when every one has sent more.
libzmq then sees the connection end and closes it. The handshake interval is lowered to
``HANDSHAKE_S`` as well, so silent connections also go on their own.

Linux only in part: the bytes a connection received come from ``TCP_INFO``; elsewhere every
connection counts as silent and the oldest goes first.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger(__name__)

HANDSHAKE_S = 5.0
"""The learner's sockets close a connection whose ZeroMQ handshake has not finished by then
(libzmq's default: 30 s); over loopback or a LAN a handshake takes milliseconds."""
GREETING_BYTES = 64
"""A ZMTP 3 greeting: a connection that received fewer has not started to speak ZeroMQ."""
RESERVED_FDS = 256
"""Descriptors the learner keeps for its own files (checkpoints, metrics, weights)."""
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
_BYTES_RECEIVED = slice(128, 136)
"""Where ``struct tcp_info`` keeps ``tcpi_bytes_received`` (Linux >= 4.1)."""


def connection_cap(max_actors: int, open_files: int) -> int:
    """Connections per socket: room for every actor (the weights socket takes two of each:
    weights and hellos) and some, within what ``open_files`` descriptors leave for three
    sockets once ``RESERVED_FDS`` are kept."""
    return max(16, min(2 * max_actors + 64, (open_files - RESERVED_FDS) // 3))


@dataclass
class _Watched:
    """One socket's open connections: descriptor -> when it was accepted, oldest first."""

    name: str
    port: int = 0
    reader: zmq.Socket | None = None
    open: dict[int, float] = field(default_factory=dict)
    speaking: set[int] = field(default_factory=set)


class ConnectionCap:
    """Caps the TCP connections of the sockets it watches (see the module doc).

    ``watch`` is called on the thread that owns a socket, before it binds, and ``unwatch``
    there before it closes; ``handle`` and ``close`` on the one thread that serves the
    learner's background work, where the monitors are read. libzmq sends monitor events
    blocking: a monitor must stop (``unwatch``) while its reader is still open, and readers
    take every event (no high-water mark), or the context's I/O thread would stall.
    """

    def __init__(self, ctx: zmq.Context, max_per_socket: int):
        self.max_per_socket = max_per_socket
        self.shed = 0
        """Connections shut down at the cap."""
        self._ctx = ctx
        self._lock = threading.Lock()
        self._new: list[_Watched] = []
        self._watched: list[_Watched] = []
        self._logged_at = 0.0

    def watch(self, sock: zmq.Socket, name: str) -> None:
        """Monitor ``sock``'s connections from now on (call before it binds)."""
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_S * 1000))
        address = f"inproc://agentgym-connections-{id(self)}-{name}"
        # The reader is connected before the monitor starts, so that no event ever waits for
        # it; it is handed to the serving thread (the lock is the memory barrier zmq needs).
        reader = self._ctx.socket(zmq.PAIR)
        reader.setsockopt(zmq.LINGER, 0)
        reader.setsockopt(zmq.RCVHWM, 0)
        reader.connect(address)
        sock.monitor(address, _EVENTS)
        with self._lock:
            self._new.append(_Watched(name, reader=reader))

    @staticmethod
    def unwatch(sock: zmq.Socket) -> None:
        """Stop monitoring ``sock`` (call before it closes, while ``close`` has not run)."""
        try:
            sock.disable_monitor()
        except zmq.ZMQError:
            pass

    def handle(self) -> None:
        """Read every event the monitors hold and shut connections down past the cap."""
        with self._lock:
            self._watched.extend(self._new)
            self._new = []
        for w in self._watched:
            self._read_events(w)
            while len(w.open) > self.max_per_socket:
                self._shed_one(w)

    def open_connections(self) -> dict[str, int]:
        """Open connections per watched socket (as the monitors last said)."""
        return {w.name: len(w.open) for w in self._watched}

    def close(self) -> None:
        """Close the readers (after every watched socket's ``unwatch``)."""
        with self._lock:
            watched, self._watched, self._new = [*self._watched, *self._new], [], []
        for w in watched:
            if w.reader is not None:
                w.reader.close()

    def _read_events(self, w: _Watched) -> None:
        while True:
            try:
                event = parse_monitor_message(w.reader.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                w.port = w.port or _port(event["endpoint"])
                w.open.pop(fd, None)  # a number reused: the new connection goes last
                w.open[fd] = time.monotonic()
                w.speaking.discard(fd)
            else:
                w.open.pop(fd, None)
                w.speaking.discard(fd)

    def _shed_one(self, w: _Watched) -> None:
        """Shut down the oldest connection that has not sent a greeting, else the newest."""
        victim = None
        for fd in list(w.open):
            if fd in w.speaking:
                continue
            received = _bytes_received(fd, w.port)
            if received is None:  # no longer this socket's connection: its close is on its way
                w.open.pop(fd)
                return
            if received < GREETING_BYTES:
                victim = fd
                break
            w.speaking.add(fd)
        if victim is None:
            victim = next(reversed(w.open))
        w.open.pop(victim)
        w.speaking.discard(victim)
        _shutdown(victim, w.port)
        self.shed += 1
        now = time.monotonic()
        if now - self._logged_at >= 1.0:
            self._logged_at = now
            log.warning(
                "%s socket: %d connections open, the cap (%d): shut one down (%d so far)",
                w.name, len(w.open) + 1, self.max_per_socket, self.shed,
            )  # fmt: skip


def _port(endpoint: bytes) -> int:
    """The port of a ``tcp://host:port`` endpoint (0 when there is none)."""
    tail = endpoint.rsplit(b":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _ours(fd: int, port: int) -> socket.socket | None:
    """``fd`` as a socket object that does not own it, when it is a TCP connection on ``port``
    (a descriptor libzmq closed may already be another file): else None."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port:
            return sock
    except (OSError, IndexError, TypeError):
        pass
    sock.detach()
    return None


def _bytes_received(fd: int, port: int) -> int | None:
    """Bytes the connection ``fd`` has received (0 where ``TCP_INFO`` does not say); None when
    ``fd`` is no longer a connection of ``port``."""
    sock = _ours(fd, port)
    if sock is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, "TCP_INFO", 11), 256)
        return int.from_bytes(info[_BYTES_RECEIVED], "little") if len(info) >= 136 else 0
    except OSError:
        return 0
    finally:
        sock.detach()


def _shutdown(fd: int, port: int) -> None:
    """End the connection ``fd`` without closing the descriptor, which is libzmq's to close."""
    sock = _ours(fd, port)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()

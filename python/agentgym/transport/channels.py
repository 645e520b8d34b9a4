"""ZeroMQ channels between the learner and its actors.

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
  ``agentgym.transport.weights``'s; this module carries them).

Receivers never crash on bad input: a message that fails to decode, or whose values are out of
bounds (``agentgym.transport.limits``), is counted in ``stats.rejected``, logged (at most a
line a second) and dropped. Over TCP the learner admits only peers holding the run's keys
(``agentgym.transport.auth``), caps the connections of each socket
(``agentgym.transport.conns``), the size of a trajectory message and of its frames (what the
largest legal batch needs: ``TrajectoryLimits.message_bytes``) and the number of actor names
it keeps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio

from agentgym.transport.auth import TransportKeys, ZapHandler, uses_tcp
from agentgym.transport.conns import ConnectionCap, connection_cap
from agentgym.transport.limits import TrajectoryLimits, actor_name_problem, raise_open_file_limit
from agentgym.transport.weights.protocol import (
    TensorBlob,
    WeightFetch,
    WeightFetchError,
    WeightReply,
    WeightRequest,
    WeightSnapshot,
    WeightStore,
    chunk_stream,
    decode_weight_reply,
    decode_weight_request,
    encode_weight_reply,
    encode_weight_request,
)
from agentgym.transport.wire import (
    SCHEMA_VERSION,
    TRAJECTORY_FRAMES,
    Control,
    Hello,
    Trajectory,
    Welcome,
    WireError,
    decode_control,
    decode_hello,
    decode_trajectory_message,
    decode_welcome,
    encode_control,
    encode_hello,
    encode_trajectories,
    encode_welcome,
    message_kind,
)

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


# --------------------------------------------------------------------------------------------
# Learner side


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


class LearnerChannels:
    """The learner's sockets: PULL for trajectories, PUB for control, ROUTER for weights.

    Trajectories are received on the caller's thread (``recv_trajectories``). Control
    republishing and weight serving run on one background thread that owns the PUB and ROUTER
    sockets, so actors get weights even while the learner is busy with an update.
    """

    def __init__(
        self,
        endpoints: Endpoints,
        *,
        rcvhwm: int = 8,
        republish_s: float = 0.1,
        chunk_bytes: int = 64 << 20,
        context: zmq.Context | None = None,
        keys: TransportKeys | None = None,
        limits: TrajectoryLimits | None = None,
        max_message_bytes: int = 64 << 20,
        max_actors: int = 1024,
        max_connections: int | None = None,
    ):
        """``keys``: admit only peers holding them (``agentgym.transport.auth``; the sockets
        then get a context of their own, whose ZAP handler checks every connection).
        ``limits``: bounds on the trajectories accepted. ``max_message_bytes``: the largest
        trajectory message, all frames together (lowered to what ``limits`` allow); libzmq
        bounds frames, not messages, so each frame is capped too (``ZMQ_MAXMSGSIZE``: the
        largest legal frame; a larger one closes its sender's connection before it is
        buffered) and a message of more frames or bytes is refused unread. With ``rcvhwm``
        such messages queued at most, that bounds what the socket buffers. ``max_actors``:
        actor names kept. ``max_connections``: TCP connections per socket (default: room for
        ``max_actors`` within the open-file limit, which is first raised to its hard limit)."""
        self._own_ctx = keys is not None and context is None
        self._ctx = zmq.Context() if self._own_ctx else (context or zmq.Context.instance())
        self._keys = keys
        self.limits = limits or TrajectoryLimits()
        self.stats = ChannelStats()
        self.lost_groups: list[int] = []
        """Ids of groups actors reported lost since the last ``take_lost``."""
        self.weight_stats = ChannelStats()
        self.weights = WeightStore(chunk_bytes)
        self.actors = ActorRegistry(max_actors=max_actors)
        self.max_message_bytes = min(max_message_bytes, self.limits.message_bytes())
        self._cap: ConnectionCap | None = None
        if uses_tcp(endpoints.trajectories, endpoints.control, endpoints.weights):
            cap = max_connections or connection_cap(max_actors, raise_open_file_limit())
            self._cap = ConnectionCap(self._ctx, cap)
        self._zap: ZapHandler | None = None
        self._republish_s = republish_s
        self._control: Control | None = None
        self._control_dirty = False
        self._control_sent = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        ready = threading.Event()
        bound: list[str] = []
        self._thread = threading.Thread(
            target=self._serve, args=(endpoints, ready, bound), name="learner-channels", daemon=True
        )
        self._thread.start()
        ready.wait()  # the ZAP handler is up before any socket binds
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.RCVHWM, rcvhwm)
        self._pull.setsockopt(zmq.LINGER, 0)
        frame_cap = min(self.max_message_bytes, self.limits.frame_bytes())
        self._pull.setsockopt(zmq.MAXMSGSIZE, frame_cap)
        if keys is not None:
            keys.serve(self._pull)
        if self._cap is not None:
            self._cap.watch(self._pull, "trajectories")
        try:
            if len(bound) != 2:
                raise RuntimeError(f"could not bind learner sockets: {bound}")
            self._pull.bind(endpoints.trajectories)
        except (RuntimeError, zmq.ZMQError):
            self.close()
            raise
        self.endpoints = Endpoints(_last_endpoint(self._pull), bound[0], bound[1])

    @property
    def refused_connections(self) -> int:
        """Connections refused for want of the run's keys (0 without keys)."""
        return self._zap.refused if self._zap is not None else 0

    @property
    def shed_connections(self) -> int:
        """TCP connections shut down at the per-socket cap (``agentgym.transport.conns``)."""
        return self._cap.shed if self._cap is not None else 0

    # --- trajectories -----------------------------------------------------------------------

    def recv_trajectories(
        self, timeout_s: float = 0.0, max_messages: int = 1024
    ) -> list[Trajectory]:
        """All trajectories that arrive within ``timeout_s`` (waits only for the first message)."""
        out: list[Trajectory] = []
        if not self._pull.poll(int(timeout_s * 1000)):
            return out
        for _ in range(max_messages):
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            size = sum(len(f) for f in frames)
            self.stats.bytes_received += size
            if len(frames) != TRAJECTORY_FRAMES or size > self.max_message_bytes:
                self.stats.oversized += 1
                self.stats.reject("trajectories", (
                    f"{len(frames)} frames of {size:,} bytes, past the largest legal batch "
                    f"({TRAJECTORY_FRAMES} frames, {self.max_message_bytes:,} bytes)"))  # fmt: skip
                continue
            try:
                sender, batch, lost = decode_trajectory_message([f.buffer for f in frames])
            except WireError as e:
                self.stats.reject("trajectories", e)
                continue
            problem = self.limits.problem(batch)
            if problem is None and sender is not None:
                problem = actor_name_problem(sender)
            if problem is not None:
                self.stats.reject("trajectories", problem, len(batch))
                continue
            out.extend(batch)
            self.lost_groups.extend(lost)
            self.stats.received += 1
            if sender is not None:
                self.actors.seen(sender, trajectories=len(batch))
        return out

    def take_lost(self) -> list[int]:
        """The ids of groups actors reported lost since the last call (``recv_trajectories``
        collects them)."""
        lost, self.lost_groups = self.lost_groups, []
        return lost

    # --- control and weights ----------------------------------------------------------------

    def publish_control(self, control: Control, wait_s: float = 0.0) -> bool:
        """Broadcast ``control`` now and keep republishing it.

        With ``wait_s`` > 0, wait until it has been sent at least once (e.g. a final stop
        before ``close``); returns whether it was.
        """
        with self._lock:
            self._control, self._control_dirty = control, True
            self._control_sent.clear()
        return self._control_sent.wait(wait_s) if wait_s > 0 else True

    def publish_weights(self, version: int, tensors: Sequence[TensorBlob]) -> None:
        """Serve ``tensors`` as version ``version`` from now on."""
        self.weights.publish(version, tensors)

    def publish_weights_file(self, version: int, path: str) -> None:
        """Serve version ``version`` as the safetensors file at ``path`` from now on."""
        self.weights.publish_file(version, path)

    def retire_weights(self) -> None:
        """Stop serving the current weights (see ``WeightStore.retire``)."""
        self.weights.retire()

    def close(self) -> None:
        """Stop the background thread and close every socket (never hangs: linger is 0)."""
        if self._cap is not None and getattr(self, "_pull", None) is not None:
            self._cap.unwatch(self._pull)  # while its monitor's reader is open
        self._stop.set()
        self._thread.join()
        if getattr(self, "_pull", None) is not None:
            self._pull.close()
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self) -> LearnerChannels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self, endpoints: Endpoints, ready: threading.Event, bound: list[str]) -> None:
        try:
            if self._keys is not None:
                self._zap = ZapHandler(self._ctx, self._keys)
        except zmq.ZMQError as e:
            bound.append(f"ZAP handler: {e}")
            ready.set()
            return
        pub = self._ctx.socket(zmq.PUB)
        router = self._ctx.socket(zmq.ROUTER)
        for s in (pub, router):
            s.setsockopt(zmq.LINGER, 0)
            if self._keys is not None:
                self._keys.serve(s)
        if self._cap is not None:
            self._cap.watch(pub, "control")
            self._cap.watch(router, "weights")
        router.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        try:
            pub.bind(endpoints.control)
            router.setsockopt(zmq.ROUTER_MANDATORY, 0)
            router.bind(endpoints.weights)
            bound.extend([_last_endpoint(pub), _last_endpoint(router)])
        except zmq.ZMQError as e:
            bound.append(str(e))
            ready.set()
            self._close_serving(pub, router)
            return
        ready.set()
        try:
            self._serve_loop(pub, router)
        finally:
            self._close_serving(pub, router)

    def _close_serving(self, pub: zmq.Socket, router: zmq.Socket) -> None:
        if self._cap is not None:
            self._cap.unwatch(pub)
            self._cap.unwatch(router)
        pub.close()
        router.close()
        if self._zap is not None:
            self._zap.close()
        if self._cap is not None:
            self._cap.close()

    def _serve_loop(self, pub: zmq.Socket, router: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        if self._zap is not None:
            poller.register(self._zap.socket, zmq.POLLIN)
        last_pub = 0.0
        while not self._stop.is_set():
            ready = dict(poller.poll(20))
            if self._zap is not None and self._zap.socket in ready:
                self._zap.handle()
            if router in ready:
                self._answer_weights(router)
            if self._cap is not None:
                self._cap.handle()
            with self._lock:
                control, dirty, self._control_dirty = self._control, self._control_dirty, False
            now = time.monotonic()
            if control is not None and (dirty or now - last_pub >= self._republish_s):
                pub.send(encode_control(control))
                last_pub = now
                if dirty:
                    self._control_sent.set()

    def _answer_weights(self, router: zmq.Socket) -> None:
        while True:
            try:
                frames = router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            # DEALER sends [identity, b"", request]; REQ-style peers look the same
            if len(frames) != 3 or frames[1] != b"":
                self.weight_stats.reject("weights_request", WireError("bad envelope"))
                continue
            if message_kind(frames[2]) == "hello":
                self._answer_hello(router, frames[0], frames[2])
                continue
            try:
                req = decode_weight_request(frames[2])
            except WireError as e:
                self.weight_stats.reject("weights_request", e)
                continue
            self.weight_stats.received += 1
            reply = encode_weight_reply(self.weights.answer(req))
            router.send_multipart([frames[0], b"", *reply], copy=False)
            self.weight_stats.sent += 1

    def _answer_hello(self, router: zmq.Socket, identity: bytes, buf: bytes) -> None:
        try:
            hello = decode_hello(buf)
        except WireError as e:
            self.weight_stats.reject("hello", e)
            return
        if (problem := actor_name_problem(hello.actor)) is not None:
            self.weight_stats.reject("hello", problem)
            return
        if hello.schema != SCHEMA_VERSION:
            self.actors.refused += 1
            reason = (
                f"actor {hello.actor} speaks wire schema {hello.schema}, this learner "
                f"{SCHEMA_VERSION}: run the same agentgym version on both sides"
            )
            log.warning("refused %s", reason)
            welcome = Welcome(False, SCHEMA_VERSION, reason)
        elif (launch := self.actors.greet(hello.actor, hello.index)) is None:
            self.actors.refused += 1
            reason = (
                f"the learner already counts {self.actors.max_actors} connected actors "
                "(transport.max_actors)"
            )
            self.weight_stats.reject("hello", reason)
            welcome = Welcome(False, SCHEMA_VERSION, reason)
        else:
            welcome = Welcome(True, SCHEMA_VERSION, launch=launch)
        router.send_multipart([identity, b"", encode_welcome(welcome)])


MAX_REQUEST_BYTES = 64 << 10
"""Largest message the learner's weight socket accepts (weight requests and hellos are tiny)."""


def _last_endpoint(sock: zmq.Socket) -> str:
    return sock.getsockopt(zmq.LAST_ENDPOINT).decode()


# --------------------------------------------------------------------------------------------
# Actor side


def _ms_left(deadline: float) -> int:
    """Milliseconds until ``deadline`` (monotonic), for zmq's poll; at least 1."""
    return max(int((deadline - time.monotonic()) * 1000), 0) + 1


async def _async_send_by(sock, frames, deadline: float, **kw) -> bool:
    """Send ``frames`` on ``sock`` if it takes them by ``deadline``; False if not. A poll that
    reports the socket writable can be overtaken by the connection failing (a peer without
    the run's keys is dropped after its handshake), so the send itself must not block: it is
    non-blocking and retried while time is left."""
    while await sock.poll(_ms_left(deadline), zmq.POLLOUT):
        try:
            await sock.send_multipart(frames, zmq.NOBLOCK, **kw)
            return True
        except zmq.Again:
            if time.monotonic() >= deadline:
                break
    return False


def _decode_reply(frames: list[zmq.Frame], stats: ChannelStats) -> WeightReply | None:
    if len(frames) < 2 or frames[0].bytes != b"":
        stats.reject("weights", WireError("bad envelope"))
        return None
    try:
        return decode_weight_reply([f.buffer for f in frames[1:]])
    except WireError as e:
        stats.reject("weights", e)
        return None


def _configure_actor_sockets(
    ctx, endpoints: Endpoints, sndhwm: int, linger_ms: int, keys: TransportKeys | None
):
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, sndhwm)
    push.setsockopt(zmq.LINGER, linger_ms)
    # queue only on live connections: with the learner gone, sends block (and time out)
    # instead of piling up in a pipe nobody reads
    push.setsockopt(zmq.IMMEDIATE, 1)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.CONFLATE, 1)  # only the newest control matters
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    if keys is not None:
        keys.join(push)
        keys.join(sub)
    push.connect(endpoints.trajectories)
    sub.connect(endpoints.control)
    return push, sub


def _async_context(endpoints: Endpoints) -> zmq.asyncio.Context:
    """The asyncio context an actor's sockets use: for ``inproc`` endpoints, one sharing the
    process's ZeroMQ context with the learner's sockets (inproc connects only within a
    context); else asyncio's own."""
    if endpoints.in_process:
        return zmq.asyncio.Context.shadow(zmq.Context.instance().underlying)
    return zmq.asyncio.Context.instance()


def _new_dealer(ctx, endpoint: str, keys: TransportKeys | None):
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        keys.join(dealer)
    dealer.connect(endpoint)
    return dealer


class ActorChannels:
    """An actor's side of the channels for synchronous code (a script, or a test driving a
    learner): ``AsyncActorChannels`` with blocking methods. Each call runs the asyncio one to
    completion on this object's own event loop, so the two never differ in behaviour.

    ``send_trajectories`` blocks while the learner's queue is full (back-pressure) unless a
    timeout is given. ``poll_control`` returns the newest control message, if any arrived.
    ``fetch_weights`` returns a full snapshot newer than ``have_version``, or None.
    ``keys``: the run's transport keys, which a learner serving TCP asks of every peer.
    """

    def __init__(
        self,
        endpoints: Endpoints,
        *,
        sndhwm: int = 64,
        linger_ms: int = 1000,
        keys: TransportKeys | None = None,
    ):
        self._loop = asyncio.new_event_loop()
        self._channels = AsyncActorChannels(
            endpoints, sndhwm=sndhwm, linger_ms=linger_ms, keys=keys
        )
        self.stats = self._channels.stats

    def send_trajectories(
        self, trajectories: Sequence[Trajectory], timeout_s: float | None = None
    ) -> bool:
        """Send one batch; False if the learner's queue stayed full for ``timeout_s``."""
        return self._loop.run_until_complete(
            self._channels.send_trajectories(trajectories, timeout_s)
        )

    def poll_control(self, timeout_s: float = 0.0) -> Control | None:
        """The newest control message received within ``timeout_s``, or None."""
        return self._loop.run_until_complete(self._channels.poll_control(timeout_s))

    def fetch_weights(self, have_version: int, timeout_s: float = 30.0) -> WeightSnapshot | None:
        """Weights newer than ``have_version`` (all chunks), or None if there are none.

        Raises ``WeightFetchError`` when the learner does not answer within ``timeout_s``.
        """
        return self._loop.run_until_complete(self._channels.fetch_weights(have_version, timeout_s))

    def close(self) -> None:
        """Close all sockets; queued trajectories get ``linger_ms`` to leave."""
        self._channels.close()
        self._loop.close()

    def __enter__(self) -> ActorChannels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncActorChannels:
    """An actor's side of the channels (zmq.asyncio; ``ActorChannels`` is its blocking form).

    ``send_trajectories`` waits while the learner's queue is full (back-pressure) unless a
    timeout is given; ``poll_control`` returns the newest control message, if any arrived;
    ``fetch_weights`` a full snapshot newer than ``have_version`` and ``weight_chunks`` its
    chunks one at a time; ``hello`` names the actor to the learner. ``context``: default, this
    process's asyncio context (for ``inproc`` endpoints one sharing the learner's)."""

    def __init__(
        self,
        endpoints: Endpoints,
        *,
        sndhwm: int = 64,
        linger_ms: int = 1000,
        context: zmq.asyncio.Context | None = None,
        actor: str | None = None,
        index: int = 0,
        keys: TransportKeys | None = None,
    ):
        if (
            context is not None
            and endpoints.in_process
            and (context.underlying != zmq.Context.instance().underlying)
        ):
            raise ValueError(
                "inproc endpoints connect only within the learner's ZeroMQ context (this "
                "process's shared one); leave context unset"
            )
        self._ctx = context or _async_context(endpoints)
        self._endpoints = endpoints
        self._keys = keys
        self._push, self._sub = _configure_actor_sockets(
            self._ctx, endpoints, sndhwm, linger_ms, keys
        )
        self._dealer = _new_dealer(self._ctx, endpoints.weights, keys)
        self._greeter = _new_dealer(self._ctx, endpoints.weights, keys)  # hellos, apart
        self.actor = actor
        self.index = index
        self.stats = ChannelStats()

    async def send_trajectories(
        self,
        trajectories: Sequence[Trajectory],
        timeout_s: float | None = None,
        lost: Sequence[int] = (),
    ) -> bool:
        """Send one batch (and the ids of groups lost here: ``encode_trajectories``); False if
        the learner's queue stayed full for ``timeout_s``."""
        payload = encode_trajectories(trajectories, self.actor, lost)
        if timeout_s is None:
            await self._push.send_multipart(payload, copy=False)
        elif not await _async_send_by(
            self._push, payload, time.monotonic() + timeout_s, copy=False
        ):
            return False
        self.stats.sent += 1
        return True

    async def poll_control(self, timeout_s: float = 0.0) -> Control | None:
        """The newest control message received within ``timeout_s``, or None."""
        latest = None
        if not await self._sub.poll(int(timeout_s * 1000)):
            return None
        while True:
            try:
                buf = await self._sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return latest
            try:
                latest = decode_control(buf)
                self.stats.received += 1
            except WireError as e:
                self.stats.reject("control", e)

    async def fetch_weights(
        self, have_version: int, timeout_s: float = 30.0
    ) -> WeightSnapshot | None:
        """Weights newer than ``have_version`` (all chunks), or None if there are none."""
        deadline = time.monotonic() + timeout_s
        fetch = WeightFetch(have_version)
        while (req := fetch.next_request()) is not None:
            fetch.feed(await self._request(req, deadline))
        return fetch.result

    async def hello(self, timeout_s: float = 5.0) -> Welcome | None:
        """Tell the learner who this actor is; its ``Welcome`` (``accepted`` False when the
        wire schemas differ), or None when no learner answered within ``timeout_s``."""
        if self.actor is None:
            raise ValueError("an actor without a name cannot say hello")
        hello = Hello(self.actor, index=self.index)
        deadline = time.monotonic() + timeout_s
        await _async_send_by(self._greeter, [b"", encode_hello(hello)], deadline)
        while (left := deadline - time.monotonic()) > 0:
            if not await self._greeter.poll(int(left * 1000) + 1):
                break
            frames = await self._greeter.recv_multipart()
            if len(frames) == 2 and frames[0] == b"":
                try:
                    return decode_welcome(frames[1])
                except WireError as e:
                    self.stats.reject("welcome", e)
        # unanswered: a new socket, so a late welcome cannot answer the next hello
        self._greeter.close()
        self._greeter = _new_dealer(self._ctx, self._endpoints.weights, self._keys)
        return None

    def weight_chunks(
        self, have_version: int, timeout_s: float = 30.0
    ) -> AsyncIterator[WeightReply]:
        """The chunks of the newest weights after ``have_version``, one at a time (nothing
        when there are none; ``chunk_stream`` over this actor's weight socket). While the
        caller applies one chunk the next is on its way, so at most two chunks are held here.
        ``timeout_s`` bounds each request.

        Raises ``WeightFetchError`` when the learner does not answer in time or replaces the
        snapshot mid-stream (the caller starts a new stream).
        """
        return chunk_stream(self._send, self._receive, have_version, timeout_s)

    async def _request(self, req: WeightRequest, deadline: float) -> WeightReply:
        await self._send(req, deadline)
        return await self._receive(req, deadline)

    async def _send(self, req: WeightRequest, deadline: float) -> None:
        """Send ``req`` unless no connection takes it by ``deadline`` (then ``_receive``
        times out, and replaces the socket)."""
        await _async_send_by(self._dealer, [b"", encode_weight_request(req)], deadline)

    async def _receive(self, req: WeightRequest, deadline: float) -> WeightReply:
        """The reply to ``req`` (replies to older requests are skipped)."""
        while (left := deadline - time.monotonic()) > 0:
            if not await self._dealer.poll(int(left * 1000) + 1):
                break
            frames = await self._dealer.recv_multipart(copy=False)
            reply = _decode_reply(frames, self.stats)
            if reply is not None and reply.request_id == req.request_id:
                return reply
        # the learner may be gone: a new socket, so a late reply cannot pass for the next one's
        self._dealer.close()
        self._dealer = _new_dealer(self._ctx, self._endpoints.weights, self._keys)
        raise WeightFetchError(f"no weight reply from {self._endpoints.weights}")

    def close(self) -> None:
        """Close all sockets; queued trajectories get ``linger_ms`` to leave."""
        for s in (self._push, self._sub, self._dealer, self._greeter):
            s.close()

"""The learner's side of the channels (``LearnerChannels``): the three sockets it binds.

Receivers never crash on bad input: a message that fails to decode, or whose values are out of
bounds (``agentgym.transport.limits``), is counted in ``stats.rejected``, logged (at most a
line a second) and dropped. Over TCP the learner admits only peers holding the run's keys
(``agentgym.transport.auth``), caps the connections of each socket
(``agentgym.transport.conns``), the size of a trajectory message and of its frames (what the
largest legal batch needs: ``TrajectoryLimits.message_bytes``) and the number of actor names
it keeps (``agentgym.transport.registry``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import zmq
import zmq.asyncio

from agentgym.transport.auth import TransportKeys, ZapHandler, uses_tcp
from agentgym.transport.conns import ConnectionCap, connection_cap
from agentgym.transport.endpoints import ChannelStats, Endpoints
from agentgym.transport.limits import TrajectoryLimits, actor_name_problem, raise_open_file_limit
from agentgym.transport.registry import ActorRegistry
from agentgym.transport.weights.protocol import (
    TensorBlob,
    WeightStore,
    decode_weight_request,
    encode_weight_reply,
)
from agentgym.transport.wire import (
    SCHEMA_VERSION,
    TRAJECTORY_FRAMES,
    Control,
    Trajectory,
    Welcome,
    WireError,
    decode_hello,
    decode_trajectory_message,
    encode_control,
    encode_welcome,
    message_kind,
)

log = logging.getLogger(__name__)


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

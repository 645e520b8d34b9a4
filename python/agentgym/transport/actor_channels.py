"""An actor's side of the channels: ``AsyncActorChannels`` (asyncio, what an actor runs) and
``ActorChannels``, its blocking form for scripts and tests. Both connect to a learner's
``Endpoints``; a reply that fails to decode is counted in ``stats.rejected`` and dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import zmq
import zmq.asyncio

from agentgym.transport.auth import TransportKeys
from agentgym.transport.endpoints import ChannelStats, Endpoints
from agentgym.transport.weights.protocol import (
    WeightFetch,
    WeightFetchError,
    WeightReply,
    WeightRequest,
    WeightSnapshot,
    chunk_stream,
    decode_weight_reply,
    encode_weight_request,
)
from agentgym.transport.wire import (
    Control,
    Hello,
    Trajectory,
    Welcome,
    WireError,
    decode_control,
    decode_welcome,
    encode_hello,
    encode_trajectories,
)


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

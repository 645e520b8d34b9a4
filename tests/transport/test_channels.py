"""Channels over real loopback sockets: delivery, control for late joiners, weights in chunks,
rejection of garbage without crashing, actors that vanish and come back."""

import asyncio
import time

import numpy as np
import pytest
import zmq
import zmq.asyncio
from transport_helpers import assert_same, make_traj

from agentgym.transport import (
    ActorChannels,
    AsyncActorChannels,
    Control,
    Endpoints,
    LearnerChannels,
    TensorBlob,
    WeightFetchError,
)
from agentgym.transport.limits import TrajectoryLimits
from agentgym.transport.wire import TRAJECTORY_FRAMES


@pytest.fixture(params=["tcp", "ipc", "inproc"])
def endpoints(request, tmp_path):
    if request.param == "inproc":
        return Endpoints.inproc(f"test-{tmp_path.name}")
    return Endpoints.tcp() if request.param == "tcp" else Endpoints.ipc(tmp_path)


@pytest.fixture
def learner(endpoints):
    with LearnerChannels(endpoints, republish_s=0.05, chunk_bytes=100) as ch:
        yield ch


def recv_n(learner, n, timeout_s=5.0):
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend(learner.recv_trajectories(timeout_s=0.05))
    return out


def test_bound_endpoints_are_concrete(learner):
    for ep in (
        learner.endpoints.trajectories,
        learner.endpoints.control,
        learner.endpoints.weights,
    ):
        assert "*" not in ep


def test_trajectories_arrive_in_order(learner):
    sent = [make_traj(i) for i in range(6)]
    with ActorChannels(learner.endpoints) as actor:
        assert actor.send_trajectories(sent[:4])
        assert actor.send_trajectories(sent[4:])
        got = recv_n(learner, 6)
    assert len(got) == 6
    for a, b in zip(sent, got, strict=True):
        assert_same(a, b)


def test_garbage_is_counted_not_fatal(learner):
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.PUSH)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(learner.endpoints.trajectories)
    raw.send(b"not msgpack at all")
    header = b"\x82\xa1v\x07\xa4kind\xactrajectories"  # {"v": 7, "kind": ...}
    raw.send_multipart([header] + [b""] * (TRAJECTORY_FRAMES - 1))
    with ActorChannels(learner.endpoints) as actor:
        actor.send_trajectories([make_traj(1)])
        got = recv_n(learner, 1)
    # the two sockets' messages are fair-queued, not ordered: the actor's may come first
    deadline = time.monotonic() + 5
    while learner.stats.rejected < 2 and time.monotonic() < deadline:
        got.extend(learner.recv_trajectories(timeout_s=0.05))
    raw.close()
    assert len(got) == 1 and learner.stats.rejected == 2
    assert "schema version 7" in learner.stats.last_error


def test_late_joiner_gets_control(learner):
    learner.publish_control(Control(3, {"": 13}))
    time.sleep(0.1)  # published before the actor exists
    with ActorChannels(learner.endpoints) as actor:
        c = actor.poll_control(timeout_s=2.0)
        assert c == Control(3, {"": 13})
        learner.publish_control(Control(4, {"": 20}, stop=True))
        deadline = time.monotonic() + 2
        while c != Control(4, {"": 20}, stop=True) and time.monotonic() < deadline:
            c = actor.poll_control(timeout_s=0.1) or c
        assert c == Control(4, {"": 20}, stop=True)


def _blobs(version: int) -> list[TensorBlob]:
    # 3 tensors of 64 bytes with chunk_bytes=100 -> 3 chunks
    return [
        TensorBlob(f"w{i}", "float32", (16,), np.full(16, version + i, np.float32).tobytes())
        for i in range(3)
    ]


def test_weights_fetched_in_chunks_only_when_newer(learner):
    with ActorChannels(learner.endpoints) as actor:
        assert actor.fetch_weights(-1, timeout_s=2) is None  # nothing published yet
        learner.publish_weights(2, _blobs(2))
        snap = actor.fetch_weights(-1, timeout_s=2)
        assert snap is not None and snap.version == 2
        assert [t.name for t in snap.tensors] == ["w0", "w1", "w2"]
        assert np.all(snap.tensors[2].to_numpy() == 4.0)
        assert actor.fetch_weights(2, timeout_s=2) is None
        # the server thread counts a reply after sending it: the actor may see it first
        deadline = time.monotonic() + 2
        while learner.weight_stats.sent < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert learner.weight_stats.sent == 5


def test_weights_restart_when_snapshot_changes_mid_fetch(learner):
    from agentgym.transport import WeightRequest

    learner.publish_weights(1, _blobs(1))
    first = learner.weights.answer(WeightRequest(1, -1, 0))
    assert first.status == "ok" and first.num_chunks == 3
    learner.publish_weights(2, _blobs(2))
    assert learner.weights.answer(WeightRequest(2, -1, 1, version=1)).status == "restart"
    with ActorChannels(learner.endpoints) as actor:
        snap = actor.fetch_weights(-1, timeout_s=2)
    assert snap.version == 2 and np.all(snap.tensors[0].to_numpy() == 2.0)


def test_fetch_times_out_cleanly_without_learner(tmp_path):
    with ActorChannels(Endpoints.ipc(tmp_path)) as actor:
        with pytest.raises(WeightFetchError):
            actor.fetch_weights(-1, timeout_s=0.2)
        assert actor.poll_control(timeout_s=0.05) is None
        assert not actor.send_trajectories([make_traj()], timeout_s=0.05)


def test_actor_can_vanish_and_reconnect(learner):
    for i in range(3):
        actor = ActorChannels(learner.endpoints, linger_ms=500)
        actor.send_trajectories([make_traj(i)])
        actor.close()
        assert [t.episode_id for t in recv_n(learner, 1)] == [100 + i]


def test_back_pressure_blocks_sender(tmp_path):
    eps = Endpoints.ipc(tmp_path)
    with LearnerChannels(eps, rcvhwm=1) as learner:
        with ActorChannels(learner.endpoints, sndhwm=1, linger_ms=0) as actor:
            big = [make_traj(0, n=1 << 16)]
            sent = 0
            while actor.send_trajectories(big, timeout_s=0.2):
                sent += 1
                assert sent < 1000, "high-water marks should stop the sender"
            got = recv_n(learner, sent)
            assert len(got) == sent


def test_async_actor_channels(learner):
    learner.publish_control(Control(1, {"": 6}))
    learner.publish_weights(1, _blobs(1))

    async def main():
        actor = AsyncActorChannels(learner.endpoints)
        try:
            assert await actor.send_trajectories([make_traj(5)])
            control = await actor.poll_control(timeout_s=2)
            snap = await actor.fetch_weights(0, timeout_s=2)
        finally:
            actor.close()
        return control, snap

    control, snap = asyncio.run(main())
    assert control == Control(1, {"": 6})
    assert snap.version == 1 and len(snap.tensors) == 3
    assert [t.episode_id for t in recv_n(learner, 1)] == [105]


def test_a_tensor_larger_than_a_chunk_travels_in_pieces_and_is_reassembled(learner):
    """chunk_bytes=100: a 400-byte tensor goes as 4 pieces; no reply carries more than a
    chunk; the streamed tensors equal the published ones."""
    pytest.importorskip("torch")
    from agentgym.transport.weights.paths import stream_tensors

    big = np.arange(100, dtype=np.float32)
    learner.publish_weights(3, [*_blobs(3), TensorBlob("big", "float32", (4, 25), big.tobytes())])

    async def main():
        actor = AsyncActorChannels(learner.endpoints)
        try:
            replies = [r async for r in actor.weight_chunks(-1, timeout_s=2)]
            sizes = [sum(memoryview(t.data).nbytes for t in r.tensors) for r in replies]

            async def rest():
                for reply in replies[1:]:
                    yield reply

            out = {name: t async for name, t in stream_tensors(replies[0], rest())}
            none = [r async for r in actor.weight_chunks(3, timeout_s=2)]
        finally:
            actor.close()
        return sizes, out, none

    sizes, out, none = asyncio.run(main())
    assert max(sizes) <= 100 and len(sizes) == 7  # 3 small tensors + 4 pieces of "big"
    assert list(out) == ["w0", "w1", "w2", "big"]
    assert out["big"].shape == (4, 25) and out["big"].flatten().tolist() == big.tolist()
    assert none == []  # up to date: no chunks


def test_stream_stops_with_an_error_when_the_snapshot_is_replaced(learner):
    learner.publish_weights(1, _blobs(1))

    async def main():
        actor = AsyncActorChannels(learner.endpoints)
        try:
            chunks = actor.weight_chunks(-1, timeout_s=2)
            await anext(chunks)
            learner.publish_weights(2, _blobs(2))
            with pytest.raises(WeightFetchError, match="replaced by version 2"):
                async for _ in chunks:  # the chunk already asked for may still be version 1's
                    pass
        finally:
            actor.close()

    asyncio.run(main())


def test_each_new_actor_process_gets_the_next_launch_of_its_index(learner):
    """A second process with index 0 (a relaunch) gets launch 1; a hello repeated by the same
    process keeps its launch; a resumed learner continues the counts."""

    async def greet(name: str, index: int) -> int:
        actor = AsyncActorChannels(learner.endpoints, actor=name, index=index)
        try:
            welcome = await actor.hello(timeout_s=5)
            again = await actor.hello(timeout_s=5)
        finally:
            actor.close()
        assert welcome.accepted and again.launch == welcome.launch
        return welcome.launch

    assert asyncio.run(greet("h:1:0", 0)) == 0
    assert asyncio.run(greet("h:1:1", 1)) == 0
    assert asyncio.run(greet("h:2:0", 0)) == 1
    assert learner.actors.launches() == {0: 2, 1: 1}
    learner.actors.restore_launches({"1": 5})
    assert asyncio.run(greet("h:3:1", 1)) == 5
    snapshot = learner.actors.snapshot()
    assert snapshot["h:2:0"]["index"] == 0 and snapshot["h:2:0"]["launch"] == 1


def test_ids_of_a_relaunch_never_repeat_its_predecessors():
    from itertools import islice

    from agentgym.transport.ids import id_origin, next_ids

    first, second = list(islice(next_ids(3, 0), 1000)), list(islice(next_ids(3, 1), 1000))
    other = list(islice(next_ids(4, 0), 1000))
    assert not set(first) & set(second) and not set(first) & set(other)
    assert {id_origin(i) for i in second} == {(3, 1)}
    assert max(islice(next_ids(2**15 - 1, 2**16 - 1), 1)) < 2**63
    with pytest.raises(ValueError, match="out of range"):
        next_ids(2**15, 0)


def test_a_trajectory_message_is_bounded_whole_not_frame_by_frame(endpoints):
    # groups of 4 trajectories of at most 1000 tokens: a legal message is about 70 KB
    limits = TrajectoryLimits(max_group_size=4, max_batch=4, max_tokens=1000)
    with LearnerChannels(endpoints, limits=limits) as learner:
        assert learner.max_message_bytes == limits.message_bytes() < 100_000
        assert learner._pull.getsockopt(zmq.MAXMSGSIZE) == limits.frame_bytes()
        assert learner._pull.getsockopt(zmq.RCVHWM) <= 8
        ctx = zmq.Context.instance()
        raw = ctx.socket(zmq.PUSH)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(learner.endpoints.trajectories)
        frame = limits.frame_bytes()
        # a frame past the largest legal one never reaches the learner: libzmq drops its
        # sender. In process no stream is decoded, so no frame cap applies: it is read and
        # refused as oversized.
        raw.send_multipart([b"x" * (frame + 1), b"x" * (frame + 1)])
        time.sleep(0.3)
        assert learner.recv_trajectories(timeout_s=0.2) == []
        read = int(endpoints.in_process)
        assert (learner.stats.bytes_received > 0) == bool(read)
        assert learner.stats.oversized == read
        raw.close()
        # frames each within the cap, together past the largest legal message: refused unread
        raw = ctx.socket(zmq.PUSH)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(learner.endpoints.trajectories)
        raw.send_multipart([b"x" * frame] * 5)
        raw.send_multipart([b""] * 40)  # more frames than any trajectory message has
        deadline = time.monotonic() + 5
        while learner.stats.rejected < 2 + read and time.monotonic() < deadline:
            learner.recv_trajectories(timeout_s=0.05)
        assert learner.stats.oversized == 2 + read
        assert "largest legal batch" in learner.stats.last_error
        raw.close()
        with ActorChannels(learner.endpoints) as actor:  # a legal group still arrives
            actor.send_trajectories([make_traj(i, n=1000) for i in range(4)])
            assert len(recv_n(learner, 4)) == 4

"""The learner refuses forged or broken trajectory batches and hellos whole, counts them and
goes on; messages over the size cap never reach it; actor names are capped."""

import asyncio
import dataclasses
import time

import numpy as np
import pytest
from transport_helpers import make_traj

from agentgym.learner.batch import GroupBuffer
from agentgym.transport import ActorChannels, AsyncActorChannels, Endpoints, LearnerChannels
from agentgym.transport.limits import TrajectoryLimits
from agentgym.transport.wire import (
    Trajectory,
    WireError,
    decode_trajectory_batch,
    encode_trajectories,
)

LIMITS = TrajectoryLimits(
    max_group_size=8, max_tokens=4096, vocab_size=50_000, envs=frozenset({"babyai"})
)


def forged(**changes):
    """A trajectory with ``changes`` as a forger would send it (the sender's own checks
    skipped)."""
    return Trajectory._trusted({**make_traj(2).__dict__, **changes})


BAD = {
    "reward nan": forged(reward=float("nan")),
    "reward inf": forged(reward=float("inf")),
    "reward huge": forged(reward=1e300),
    "group_size 1e9": forged(group_size=10**9),
    "prompt_len 1e12 with 12 tokens": forged(prompt_len=10**12),
    "num_turns -3": forged(num_turns=-3),
    "num_turns unlike turn versions": forged(num_turns=5),
    "invalid_replies past num_turns": forged(invalid_replies=3),
    "token past the vocabulary": forged(tokens=np.full(12, 50_000, np.int32)),
    "negative token": forged(tokens=np.full(12, -1, np.int32)),
    "nan log-prob": forged(logprobs=np.full(12, np.nan, np.float32)),
    "loss mask 2": forged(loss_mask=np.full(12, 2, np.uint8)),
    "unknown env": forged(env="webnav"),
    "env with a newline": forged(env="baby\nai"),
    "nan timing": forged(timings={"generate": float("nan")}),
    "many timings": forged(timings={f"t{i}": 1.0 for i in range(100)}),
    "episode id past int64": forged(episode_id=2**64 - 1),
    "negative task id": forged(task_id=-1),
    "horizon cap 0": forged(horizon_cap=0),
    "too many tokens": forged(
        tokens=np.ones(5000, np.int32),
        logprobs=np.zeros(5000, np.float32),
        loss_mask=np.zeros(5000, np.uint8),
    ),
    "negative turn version": forged(turn_versions=np.array([-1, 0], np.int32)),
}


@pytest.mark.parametrize("name", list(BAD))
def test_each_bad_field_is_named(name):
    why = LIMITS.problem([make_traj(1), BAD[name]])
    assert why is not None and why.startswith("trajectory 1 (episode")


def test_good_trajectories_pass():
    assert LIMITS.problem([make_traj(i) for i in range(4)]) is None


def decodes(frames) -> bool:
    try:
        decode_trajectory_batch([bytes(f) for f in frames])
    except WireError:
        return False
    return True


def recv_all(learner, want, timeout_s=5.0):
    out, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline and (len(out) < want or learner.stats.rejected < len(BAD)):
        out.extend(learner.recv_trajectories(timeout_s=0.05))
    return out


def test_the_learner_refuses_forged_batches_counts_them_and_goes_on():
    with LearnerChannels(Endpoints.tcp(), limits=LIMITS) as learner:
        with ActorChannels(learner.endpoints) as actor:
            for bad in BAD.values():
                assert actor.send_trajectories([make_traj(1), bad])
            assert actor.send_trajectories([make_traj(3)])
            got = recv_all(learner, 1)
    assert [t.episode_id for t in got] == [make_traj(3).episode_id]
    assert learner.stats.rejected == len(BAD)
    # the wire decoder refuses some forgeries before any trajectory is built
    built = sum(decodes(encode_trajectories([make_traj(1), bad])) for bad in BAD.values())
    assert learner.stats.rejected_trajectories == 2 * built


def test_the_default_limits_hold_without_a_config():
    """A learner built without limits still refuses what no run can train on."""
    with LearnerChannels(Endpoints.tcp()) as learner:
        with ActorChannels(learner.endpoints) as actor:
            actor.send_trajectories([forged(reward=float("nan"))])
            actor.send_trajectories([forged(group_size=10**9)])
            actor.send_trajectories([make_traj(3)])
            deadline, got = time.monotonic() + 5, []
            while not got and time.monotonic() < deadline:
                got.extend(learner.recv_trajectories(timeout_s=0.05))
    assert len(got) == 1 and learner.stats.rejected == 2


def test_a_frame_over_the_size_cap_never_reaches_the_learner():
    big = forged(
        tokens=np.ones(600_000, np.int32),
        logprobs=np.zeros(600_000, np.float32),
        loss_mask=np.zeros(600_000, np.uint8),
    )  # a 2.4 MB token frame
    with LearnerChannels(Endpoints.tcp(), max_message_bytes=1 << 20) as learner:
        with ActorChannels(learner.endpoints, linger_ms=0) as actor:
            assert actor.send_trajectories([big], timeout_s=1)
            time.sleep(0.3)
            got = learner.recv_trajectories(timeout_s=0.3)
            assert got == [] and learner.stats.bytes_received == 0
            # the sender's connection was dropped; it reconnects and the next message arrives
            deadline = time.monotonic() + 5
            while not got and time.monotonic() < deadline:
                actor.send_trajectories([make_traj(3)], timeout_s=1)
                got = learner.recv_trajectories(timeout_s=0.3)
    assert got and got[0].episode_id == make_traj(3).episode_id


def greet(endpoints, name):
    async def go():
        a = AsyncActorChannels(endpoints, actor=name, index=0)
        try:
            return await a.hello(timeout_s=2)
        finally:
            a.close()

    return asyncio.run(go())


def test_actor_names_are_capped_and_bad_ones_refused():
    with LearnerChannels(Endpoints.tcp(), max_actors=3) as learner:
        assert all(greet(learner.endpoints, f"h:{i}:0").accepted for i in range(3))
        refused = greet(learner.endpoints, "h:3:0")
        assert not refused.accepted and "max_actors" in refused.reason
        assert learner.actors.counts()["known"] == 3
        assert greet(learner.endpoints, "forged\nname") is None  # not answered at all
        assert learner.weight_stats.rejected >= 2
        learner.actors.alive_s = 0.0  # the three go quiet: a new name takes the oldest place
        time.sleep(0.01)
        assert greet(learner.endpoints, "h:4:0").accepted
        assert sorted(learner.actors.snapshot()) == ["h:1:0", "h:2:0", "h:4:0"]


def test_pending_groups_are_bounded():
    buffer = GroupBuffer(max_staleness=4, max_pending=2)
    for group in range(3):  # three groups of 4 that each got only 1 member so far
        buffer.add([dataclasses.replace(make_traj(group), group_id=group)])
    assert buffer.num_pending == 2 and buffer.stats.dropped_incomplete == 1
    rest = [dataclasses.replace(make_traj(i), group_id=2, episode_id=i) for i in (10, 11, 12)]
    buffer.add(rest)
    assert buffer.num_ready == 1 and buffer.num_pending == 1

"""Wire format: round trips, and rejection of anything malformed or from another schema."""

import msgpack
import numpy as np
import pytest
from transport_helpers import assert_same, make_traj

from agentgym.transport import wire
from agentgym.transport.wire import Control, Trajectory, WireError


def test_trajectory_batch_round_trip():
    trajs = [make_traj(i, n=5 + i, turns=1 + i % 3) for i in range(5)]
    out = wire.decode_trajectories(wire.encode_trajectories(trajs))
    assert len(out) == 5
    for a, b in zip(trajs, out, strict=True):
        assert_same(a, b)
    assert out[3].min_version == 3 and out[3].max_version == 3
    assert out[4].min_version == 4 and out[4].max_version == 5


def test_empty_batch_and_empty_trajectory_round_trip():
    assert wire.decode_trajectories(wire.encode_trajectories([])) == []
    t = make_traj(0, n=0)
    assert_same(t, wire.decode_trajectories(wire.encode_trajectories([t]))[0])


def test_arrays_are_little_endian_raw_frames():
    header, *frames = wire.encode_trajectories([make_traj(1, n=4)])
    msg = msgpack.unpackb(header)
    assert msg["v"] == wire.SCHEMA_VERSION and msg["kind"] == "trajectories"
    assert msg["tokens"] == {"dtype": "int32", "shape": [4]}
    assert np.array_equal(np.frombuffer(frames[0], "<i4"), make_traj(1, n=4).tokens)
    assert np.array_equal(np.frombuffer(frames[1], "<f4"), make_traj(1, n=4).logprobs)


def test_trajectory_rejects_inconsistent_arrays():
    with pytest.raises(WireError, match="lengths differ"):
        Trajectory(
            **{**_fields(make_traj()), "logprobs": np.zeros(3, np.float32)},
        )
    with pytest.raises(WireError, match="dtype"):
        Trajectory(**{**_fields(make_traj()), "tokens": np.zeros(12, np.float32)})


def test_invalid_replies_travel_and_are_bounded_by_the_turns():
    t = make_traj(1)
    assert t.invalid_replies == 1
    assert wire.decode_trajectories(wire.encode_trajectories([t]))[0].invalid_replies == 1
    with pytest.raises(WireError, match="invalid_replies 3 not in"):
        Trajectory(**{**_fields(t), "invalid_replies": 3})


def test_a_trajectory_says_why_it_was_cut_off():
    """The turn cap, a full context and the env's own limit travel apart (each an episode
    cut off, ``truncated``); any other cause is refused."""
    trajs = [Trajectory(**{**_fields(make_traj(i)), "truncation": c})
             for i, c in enumerate(wire.TRUNCATIONS)]  # fmt: skip
    out = wire.decode_trajectories(wire.encode_trajectories(trajs))
    assert [t.truncation for t in out] == ["", "cap", "context", "env"]
    assert [t.truncated for t in out] == [False, True, True, True]
    with pytest.raises(WireError, match="truncation 'max_steps' is not one of"):
        Trajectory(**{**_fields(make_traj()), "truncation": "max_steps"})


def test_numpy_scalars_are_accepted_and_encodable():
    t = Trajectory(**{**_fields(make_traj()), "episode_id": np.int64(5), "reward": np.float32(1)})
    out = wire.decode_trajectories(wire.encode_trajectories([t]))[0]
    assert type(out.episode_id) is int and out.episode_id == 5 and out.reward == 1.0


def _fields(t: Trajectory) -> dict:
    return {k: getattr(t, k) for k in Trajectory.__dataclass_fields__}


def _tamper(buf: bytes, **changes) -> bytes:
    msg = msgpack.unpackb(buf)
    msg.update(changes)
    return msgpack.packb(msg)


def _tamper_frames(frames, **changes):
    return [_tamper(frames[0], **changes), *frames[1:]]


@pytest.mark.parametrize(
    "change",
    [
        {"v": wire.SCHEMA_VERSION + 1},
        {"v": None},
        {"kind": "control"},
        {"n": 3},
        {"reward": ["x"]},
        {"success": [1]},
        {"lengths": [-1]},
        {"lengths": [13]},
        {"tokens": {"dtype": "int64", "shape": [6]}},
        {"tokens": {"dtype": "int32", "shape": [11]}},
        {"turn_versions": {"dtype": "int32", "shape": [0]}},
        {"group_size": [0]},
        {"invalid_replies": [3]},  # more than the episode's 2 turns
        {"invalid_replies": [-1]},
        {"invalid_replies": [True]},
        {"truncation": ["horizon"]},
        {"truncation": [True]},
    ],
)
def test_malformed_trajectories_are_rejected(change):
    frames = _tamper_frames(wire.encode_trajectories([make_traj(0)]), **change)
    with pytest.raises(WireError):
        wire.decode_trajectories(frames)


def test_wrong_frames_are_rejected():
    frames = wire.encode_trajectories([make_traj(0)])
    with pytest.raises(WireError, match="frames"):
        wire.decode_trajectories(frames[:-1])
    with pytest.raises(WireError, match="bytes"):
        wire.decode_trajectories([frames[0], frames[1], b"\0" * 47, *frames[3:]])


GARBAGE = [b"", b"\xc1", b"garbage", msgpack.packb([1, 2]), msgpack.packb({})]


@pytest.mark.parametrize("buf", GARBAGE)
def test_garbage_is_rejected(buf):
    with pytest.raises(WireError):
        wire.decode_control(buf)
    with pytest.raises(WireError):
        wire.decode_trajectories([buf, b"", b"", b"", b""])
    with pytest.raises(WireError):
        wire.decode_trajectories([buf])


def test_unknown_version_names_both_versions():
    buf = _tamper(wire.encode_control(Control(1, {"": 2})), v=99)
    with pytest.raises(WireError, match=f"99.*{wire.SCHEMA_VERSION}"):
        wire.decode_control(buf)


def test_control_round_trip():
    streams = Control(3, {"": 5}, dropped_groups={(0, 1): 2, (4, 0): 1}, task_streams={0: 12, 4: 7})
    for c in (Control(0, {"": None}), Control(5, {"": 13}, stop=True), streams):
        assert wire.decode_control(wire.encode_control(c)) == c
    with pytest.raises(WireError):
        wire.decode_control(_tamper(wire.encode_control(Control(1, {"": 2})), stop=1))
    for bad in (
        {"dropped_groups": [[0, 1]]},
        {"dropped_groups": [[0, 1, -2]]},
        {"dropped_groups": [[wire.MAX_ACTORS, 0, 1]]},
        {"task_streams": [[0, 1 << 32]]},
        {"task_streams": [["0", 3]]},
        {"task_streams": {"0": 3}},
    ):
        with pytest.raises(WireError):
            wire.decode_control(_tamper(wire.encode_control(streams), **bad))


def test_hello_and_welcome_carry_the_actor_index_and_its_launch():
    hello = wire.decode_hello(wire.encode_hello(wire.Hello("h:1:3", index=3)))
    assert (hello.actor, hello.index) == ("h:1:3", 3)
    welcome = wire.decode_welcome(wire.encode_welcome(wire.Welcome(True, 2, launch=4)))
    assert welcome.launch == 4 and welcome.accepted
    for field, value in (("index", -1), ("index", 2**15), ("index", "0"), ("index", True)):
        with pytest.raises(WireError, match="index"):
            wire.decode_hello(_tamper(wire.encode_hello(wire.Hello("a")), **{field: value}))
    with pytest.raises(WireError, match="launch"):
        wire.decode_welcome(_tamper(wire.encode_welcome(wire.Welcome(True, 2)), launch=2**16))

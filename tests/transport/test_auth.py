"""A learner serving TCP admits only peers holding the run's keys: without them (or with another
run's) nothing gets through on any of its three sockets, and the CLI's learner always serves
TCP that way, with the keys kept in the run dir."""

import asyncio
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest
from transport_helpers import make_traj

from agentgym.cli.common import actor_keys, learner_channels, learner_endpoints
from agentgym.config import load_config
from agentgym.transport import (
    ActorChannels,
    AsyncActorChannels,
    Control,
    Endpoints,
    LearnerChannels,
    WeightFetchError,
)
from agentgym.transport.auth import (
    KEYS_FILE,
    KeysError,
    TransportKeys,
    curve_available,
    run_keys,
)

MECHANISMS = [
    pytest.param(
        "curve", marks=pytest.mark.skipif(not curve_available(), reason="libzmq without CURVE")
    ),
    "plain",
]


def received(learner, timeout_s):
    out, deadline = [], time.monotonic() + timeout_s
    while not out and time.monotonic() < deadline:
        out.extend(learner.recv_trajectories(timeout_s=0.05))
    return out


def reaches_learner(learner, keys, timeout_s=1.0) -> dict[str, bool]:
    """Which of push, control, weights and hello work for a peer with ``keys``."""
    learner.publish_control(Control(5, {"": 9}))
    with ActorChannels(learner.endpoints, keys=keys, linger_ms=0) as actor:
        pushed = actor.send_trajectories([make_traj(1)], timeout_s=timeout_s)
        got = received(learner, timeout_s) if pushed else []
        control = actor.poll_control(timeout_s=timeout_s)
        try:
            fetched = actor.fetch_weights(-1, timeout_s=timeout_s) is None
        except WeightFetchError:
            fetched = False

    async def hello():
        a = AsyncActorChannels(learner.endpoints, actor="h:1:0", keys=keys)
        try:
            return await a.hello(timeout_s=timeout_s)
        finally:
            a.close()

    return {
        "trajectories": len(got) == 1,
        "control": control == Control(5, {"": 9}),
        "weights": fetched,
        "hello": asyncio.run(hello()) is not None,
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_only_peers_with_the_run_keys_get_through(mechanism):
    keys, other = TransportKeys.generate(mechanism), TransportKeys.generate(mechanism)
    with LearnerChannels(Endpoints.tcp(), keys=keys) as learner:
        assert reaches_learner(learner, None, timeout_s=0.3) == dict.fromkeys(
            ("trajectories", "control", "weights", "hello"), False
        )
        assert not any(reaches_learner(learner, other, timeout_s=0.3).values())
        assert all(reaches_learner(learner, keys).values())
        assert learner.actors.counts()["known"] == 1
    if mechanism == "plain":  # a wrong token reaches the ZAP handler, which counts it
        assert learner.refused_connections >= 3


def test_run_keys_are_private_kept_and_reused(tmp_path):
    keys = run_keys(tmp_path)
    path = tmp_path / KEYS_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert run_keys(tmp_path) == keys  # a resumed run keeps its keys
    assert keys.mechanism == ("curve" if curve_available() else "plain")
    path.write_text("{not json")
    with pytest.raises(KeysError, match=str(path)):
        run_keys(tmp_path)


def tcp_config(tmp_path, kind="tcp"):
    return load_config(
        None,
        [f"run_dir={tmp_path}", f"transport.kind={kind}", "transport.base_port=0"],
    )


def test_the_cli_learner_serves_tcp_only_to_the_runs_actors(tmp_path):
    config = tcp_config(tmp_path)
    with learner_channels(config, vocab_size=50_000) as learner:
        assert (tmp_path / KEYS_FILE).exists()
        assert not reaches_learner(learner, None, timeout_s=0.3)["trajectories"]
        keys = actor_keys(config, learner.endpoints, None, timeout_s=1)
        assert keys == TransportKeys.load(tmp_path / KEYS_FILE)
        assert all(reaches_learner(learner, keys).values())


def test_unencrypted_tcp_still_needs_the_token(tmp_path):
    config = load_config(
        None,
        [f"run_dir={tmp_path}", "transport.kind=tcp", "transport.base_port=0",
         "transport.encrypt=false"],
    )  # fmt: skip
    with learner_channels(config) as learner:
        keys = actor_keys(config, learner.endpoints, None, timeout_s=1)
        assert keys.mechanism == "plain"
        assert not reaches_learner(learner, None, timeout_s=0.3)["trajectories"]
        assert all(reaches_learner(learner, keys).values())


def test_unix_sockets_need_no_keys(tmp_path):
    config = tcp_config(tmp_path, kind="ipc")
    with learner_channels(config) as learner:
        assert actor_keys(config, learner.endpoints, None, timeout_s=0.1) is None
        assert not (tmp_path / KEYS_FILE).exists()
        assert all(reaches_learner(learner, None).values())


def test_an_actor_without_the_keys_file_is_told_where_to_get_it(tmp_path):
    config = tcp_config(tmp_path)
    with pytest.raises(KeysError, match="--keys"):
        actor_keys(config, Endpoints.tcp("10.0.0.1", 5601), None, timeout_s=0.2)


def _socket_dir(config) -> Path:
    """The directory ``learner_endpoints`` puts the run's Unix sockets in."""
    return Path(learner_endpoints(config).trajectories.removeprefix("ipc://")).parent


def test_the_socket_directory_is_private_and_another_users_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    config = tcp_config(tmp_path / "run", kind="ipc")
    directory = _socket_dir(config)
    assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    directory.chmod(0o755)  # this user's, too open: tightened
    with learner_channels(config) as learner:
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
        assert all(reaches_learner(learner, None).values())
    shutil.rmtree(directory)
    decoy = tmp_path / "elsewhere"
    decoy.mkdir(mode=0o777)
    directory.symlink_to(decoy)  # a symlink someone planted under the directory's name
    with pytest.raises(SystemExit, match="not a directory"):
        learner_channels(config)
    assert not any(decoy.iterdir()), "nothing was bound through the symlink"
    directory.unlink()
    if os.geteuid() != 0:
        return  # only root can make a directory another user owns
    directory.mkdir(mode=0o777)
    os.chown(directory, 12345, 12345)  # made by another local user before the run started
    with pytest.raises(SystemExit, match="belongs to uid 12345"):
        learner_channels(config)
    with pytest.raises(SystemExit, match="belongs to uid 12345"):
        learner_endpoints(config)  # what an actor of the run computes, too
    assert not any(directory.iterdir())


def test_a_keys_file_others_can_read_is_tightened_and_a_planted_symlink_not_followed(tmp_path):
    keys = run_keys(tmp_path)
    path = tmp_path / KEYS_FILE
    path.chmod(0o644)
    assert run_keys(tmp_path) == keys  # a resumed run: loaded, and made private again
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    victim = tmp_path / "victim.txt"
    victim.write_text("not yours")
    (tmp_path / (KEYS_FILE + ".tmp")).symlink_to(victim)
    TransportKeys.generate("plain").save(path)
    assert victim.read_text() == "not yours"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    if os.geteuid() == 0:  # another user's readable file is refused, not changed
        copy = tmp_path / "copy.json"
        shutil.copy(path, copy)
        copy.chmod(0o644)
        os.chown(copy, 12345, 12345)
        with pytest.raises(KeysError, match="readable by others"):
            TransportKeys.load(copy)
        assert stat.S_IMODE(os.stat(copy).st_mode) == 0o644

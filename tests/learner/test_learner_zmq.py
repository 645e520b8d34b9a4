"""Learner + fake actor over real loopback ZeroMQ sockets: versions and horizon cap move."""

import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import make_groups, rescore, tiny_model  # noqa: E402

from agentgym.horizon import HorizonConfig  # noqa: E402
from agentgym.learner import Learner, LearnerConfig, OptimConfig  # noqa: E402
from agentgym.transport import ActorChannels, Endpoints, LearnerChannels  # noqa: E402
from agentgym.transport.weights.tensors import blobs_to_state_dict  # noqa: E402


def fake_actor(endpoints: Endpoints, seen: dict, stop_after_s: float = 120.0) -> None:
    """Follows control, pulls weights when they change, sends groups stamped with its version."""
    model = tiny_model(seed=3)  # starts from different weights than the learner
    version, cap, seed = -1, None, 100
    with ActorChannels(endpoints) as actor:
        deadline = time.monotonic() + stop_after_s
        while time.monotonic() < deadline:
            control = actor.poll_control(timeout_s=0.05)
            if control is not None:
                cap = control.cap_of("babyai")
                seen["caps"].append(cap)
                if control.stop:
                    seen["stopped"] = True
                    break
                if control.policy_version > version:
                    snap = actor.fetch_weights(version, timeout_s=10)
                    if snap is not None:
                        model.load_state_dict(blobs_to_state_dict(snap.tensors))
                        version = snap.version
                        seen["versions"].append(version)
                        seen["final_state"] = {k: v.clone() for k, v in model.state_dict().items()}
            if version < 0:
                continue
            seed += 1
            trajs = make_groups(model, num_groups=1, version=version, seed=seed, cap=cap)
            actor.send_trajectories(rescore(model, trajs), timeout_s=1.0)


@pytest.mark.parametrize("transport", ["ipc", pytest.param("tcp", marks=pytest.mark.slow)])
def test_learner_and_actor_over_zmq(tmp_path, transport):
    eps = Endpoints.tcp() if transport == "tcp" else Endpoints.ipc(tmp_path)
    cfg = LearnerConfig(
        optim=OptimConfig(lr=1e-3),
        groups_per_step=1,
        micro_batch_size=4,
        max_staleness=1,
        horizon=HorizonConfig(schedule="stepwise", rounds=(2, 3, 4), every=1),
        metrics_path=str(tmp_path / "metrics.jsonl"),
        train_order="completion",  # the fake actor's group ids are not stream positions
    )
    learner = Learner(tiny_model(), cfg)
    seen: dict = {"caps": [], "versions": []}
    published: dict[int, dict] = {}  # the learner's weights at each version it served
    with LearnerChannels(eps, republish_s=0.05) as channels:
        serve = channels.weights.publish

        def publish(version, blobs):
            published[version] = blobs_to_state_dict(blobs)
            return serve(version, blobs)

        channels.weights.publish = publish
        actor = threading.Thread(target=fake_actor, args=(channels.endpoints, seen))
        actor.start()
        learner.run(channels, max_steps=3)
        actor.join(timeout=60)
    assert not actor.is_alive() and seen.get("stopped")
    assert learner.version == 3
    # with max_staleness 1, update 3 (at version 2) needs a group sampled at version >= 1, so
    # the actor must have followed the learner at least once (how far depends on timing)
    assert seen["versions"][0] == 0 and seen["versions"][-1] >= 1
    assert seen["versions"] == sorted(set(seen["versions"]))
    assert seen["caps"][0] == 2 and seen["caps"][-1] == 4 and 3 in seen["caps"]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    # the actor's last fetched weights are the learner's of that version, tensor for tensor
    # (and not the actor's own initialisation)
    last = seen["versions"][-1]
    fetched = seen["final_state"]
    assert fetched.keys() == published[last].keys()
    for name, value in published[last].items():
        assert torch.equal(fetched[name], value), name
    own = tiny_model(seed=3).state_dict()["model.embed_tokens.weight"]
    assert not torch.equal(fetched["model.embed_tokens.weight"], own)

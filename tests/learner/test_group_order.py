"""Which groups an update takes (``GroupBuffer`` order): in the order they started, a run
trains on what it sampled; taking the first to complete drops the long groups as stale.

The loop below is an actor and a learner in ticks: the actor admits groups under its staleness
budget and in-flight cap (as ``agentgym.actor.actor`` does, dropped groups credited back), a
group takes 1 tick or 6 (an episode run to the cap), and the learner trains whenever the buffer
hands out a step's groups.
"""

import random
from collections import Counter

import numpy as np
import pytest

from agentgym.learner.batch import GroupBuffer
from agentgym.transport.ids import next_ids
from agentgym.transport.wire import Trajectory

SHARE, IN_FLIGHT, STALENESS = 2, 4, 2


def group(group_id: int, version: int, size: int = 2, turns: int = 1,
          success: bool = False) -> list[Trajectory]:  # fmt: skip
    return [
        Trajectory(
            episode_id=group_id * 10 + i,
            group_id=group_id,
            group_size=size,
            env="babyai",
            task_id=0,
            horizon_cap=4,
            turn_versions=np.full(turns, version, np.int32),
            tokens=np.arange(4, dtype=np.int32),
            logprobs=np.zeros(4, np.float32),
            loss_mask=np.array([0, 0, 1, 1], np.uint8),
            prompt_len=2,
            reward=float(i),
            success=success,
            truncation="",
            num_turns=turns,
        )  # fmt: skip
        for i in range(size)
    ]


def simulate(order: str, groups: int = 80, seed: int = 0, lost: frozenset = frozenset()):
    """Returns (durations of the groups started, of those trained, the buffer)."""
    rng = random.Random(seed)
    buf = GroupBuffer(STALENESS, order=order)
    ids = next_ids(0, 0)
    version, started, running, trained = 0, [], [], []
    duration = {}
    for _ in range(2000):
        for g in [g for g in running if g[1] <= 0]:  # finished this tick
            running.remove(g)
            gid, _, start_version = g
            if gid in lost:
                buf.note_lost(gid)
            else:
                buf.add(group(gid, start_version))
        while (batch := buf.pop_groups(SHARE, version)) is not None:
            trained += [duration[g[0].group_id] for g in batch]
            version += 1
        usable = len(started) - sum(buf.stats.dropped_groups.values()) - buf.stats.lost_groups
        budget = (version + STALENESS + 1) * SHARE
        while len(started) < groups and len(running) < IN_FLIGHT and usable < budget:
            gid = next(ids)
            duration[gid] = rng.choice((1, 6))
            started.append(duration[gid])
            running.append([gid, duration[gid], version])
            usable += 1
        for g in running:
            g[1] -= 1
        if len(started) == groups and not running:
            break
    return started, trained, buf


def long_share(durations: list[int]) -> float:
    return sum(d == 6 for d in durations) / len(durations)


def test_in_start_order_the_trained_groups_are_the_started_ones():
    started, trained, buf = simulate("start")
    assert buf.stats.dropped_stale == 0
    assert sorted(trained) == sorted(started[: len(trained)])
    assert len(trained) >= len(started) - SHARE  # at most one step's groups left at the end
    assert long_share(trained) == pytest.approx(long_share(started), abs=0.03)


def test_in_completion_order_the_long_groups_go_stale():
    """What the start order fixes: the first groups to complete are the short ones, so the
    long ones (an episode run to the cap: a mixed or failed group, the ones with a learning
    signal) wait, go stale and are dropped."""
    started, trained, buf = simulate("completion")
    assert buf.stats.dropped_stale > 0
    missing = Counter(started) - Counter(trained)  # dropped (and a last step's worth left)
    assert missing[6] >= 4 * missing[1]
    assert long_share(trained) < long_share(started) - 0.05


def test_a_lost_group_does_not_hold_back_the_groups_after_it():
    first = next(next_ids(0, 0))
    started, trained, buf = simulate("start", lost=frozenset({first}))
    assert buf.stats.lost_groups == 1
    assert len(trained) >= len(started) - 1 - SHARE


def test_a_relaunched_actor_goes_on_past_the_groups_its_predecessor_never_sent():
    buf = GroupBuffer(STALENESS, order="start")
    old = next_ids(0, 0)
    first, _second = next(old), next(old)  # the second never arrives: its process died
    buf.add(group(first, 0))
    relaunch = next_ids(0, 1, 2)  # the new process goes on at position 2
    buf.add(group(next(relaunch), 0))
    assert buf.pop_groups(2, version=0) is not None


def test_the_groups_dropped_are_profiled_beside_those_trained():
    """``group_profile/*``: what the drops removed next to what was trained (here the long
    groups are the dropped ones in completion order, so their turns differ)."""
    buf = GroupBuffer(STALENESS, order="completion")
    ids = next_ids(0, 0)
    short, long_ = next(ids), next(ids)
    buf.add(group(short, 0))
    buf.add(group(long_, 0, turns=6, success=True))
    assert buf.pop_groups(1, version=0) is not None  # the short group (first to complete)
    buf.drop_stale(version=STALENESS + 1)  # the long one went stale
    m = buf.stats.profile_metrics()
    assert m["group_profile/trained_groups"] == 1 and m["group_profile/dropped_groups"] == 1
    assert m["group_profile/trained_turns"] == 1 and m["group_profile/dropped_turns"] == 6
    assert m["group_profile/trained_success"] == 0 and m["group_profile/dropped_success"] == 1
    assert m["group_profile/trained_mixed"] == 1  # rewards 0 and 1


def test_groups_waiting_for_an_earlier_one_are_reported():
    buf = GroupBuffer(STALENESS, order="start")
    ids = next_ids(3, 0)
    _first, second, third = next(ids), next(ids), next(ids)
    buf.add(group(second, 0))
    buf.add(group(third, 0))
    assert buf.pop_groups(1, version=0) is None  # the first is still running
    assert buf.blocked() == {3: (0, 2)}
    assert GroupBuffer(STALENESS, order="completion").blocked() == {}


def test_the_learner_says_when_groups_wait_for_an_earlier_one(monkeypatch, caplog):
    from learner_helpers import tiny_model

    import agentgym.learner.learner as learner_module
    from agentgym.learner import Learner, LearnerConfig, OptimConfig

    learner = Learner(tiny_model(), LearnerConfig(optim=OptimConfig(lr=1e-3), max_staleness=2))
    ids = next_ids(1, 0)
    next(ids)  # position 0 still running
    learner.buffer.add(group(next(ids), 0))
    monkeypatch.setattr(learner_module, "BLOCKED_WARN_S", 0.0)
    since = learner._say_blocked(None)  # the wait starts
    assert since is not None and not caplog.records
    with caplog.at_level("WARNING"):
        learner._say_blocked(since)
    assert "1 complete group(s) of actor 1 wait for its group at stream position 0" in caplog.text
    assert learner._say_blocked(None) is not None
    learner.buffer.note_lost(next(next_ids(1, 0)))  # the earlier group is lost: none wait
    assert learner._say_blocked(since) is None

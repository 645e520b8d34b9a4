"""Trajectories for transport and learner tests."""

import numpy as np

from agentgym.transport import wire
from agentgym.transport.wire import Trajectory


def make_traj(i: int = 0, n: int = 12, turns: int = 2) -> Trajectory:
    rng = np.random.default_rng(i)
    mask = (rng.random(n) > 0.5).astype(np.uint8)
    return Trajectory(
        episode_id=100 + i,
        group_id=7,
        group_size=4,
        env="babyai",
        task_id=3 * i,
        horizon_cap=None if i % 2 else 13,
        turn_versions=np.arange(turns, dtype=np.int32) + i,
        tokens=rng.integers(0, 50_000, n, dtype=np.int32),
        logprobs=np.where(mask, -rng.random(n), 0).astype(np.float32),
        loss_mask=mask,
        prompt_len=3,
        reward=0.5 * i,
        success=bool(i % 2),
        truncation=("", "cap", "context", "env")[i % 4],
        num_turns=turns,
        timings={"generate": 1.5, "env": 0.25},
        invalid_replies=i % 2,
    )


def assert_same(a: Trajectory, b: Trajectory) -> None:
    for name in ("tokens", "logprobs", "loss_mask", "turn_versions"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    for name in wire._TRAJ_SCALARS:
        assert getattr(a, name) == getattr(b, name), name

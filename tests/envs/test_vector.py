"""The gymnasium VectorEnv adapter: next-step autoreset, text spaces, task cycling."""

import numpy as np
from gymnasium.vector import AutoresetMode

from agentgym.envs import EnvPool
from agentgym.envs.vector import TextVectorEnv


def test_metadata_declares_next_step_autoreset():
    assert TextVectorEnv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP


def test_next_step_autoreset():
    pool = EnvPool("textcraft")
    pool.set_horizon(2)
    venv = TextVectorEnv(pool, 3, task_ids=[0, 1, 2, 3, 4, 5])
    obs, info = venv.reset()
    assert len(obs) == 3 and list(info["task_id"]) == [0, 1, 2]
    venv.step(["inventory"] * 3)
    obs, rew, term, trunc, info = venv.step(["inventory"] * 3)
    assert trunc.all() and not term.any()
    # The step after the end resets (action ignored) and returns first observations.
    obs2, rew2, term2, trunc2, info2 = venv.step(["inventory"] * 3)
    assert list(info2["task_id"]) == [3, 4, 5]
    assert not trunc2.any() and not term2.any() and np.all(rew2 == 0)
    assert list(obs2) == pool.reset(pool.create(3), [3, 4, 5])
    venv.close()
    assert len(pool) == 3  # only the three sessions created above for comparison


def test_seeded_task_draws():
    a = TextVectorEnv("babyai", 4)
    b = TextVectorEnv("babyai", 4)
    assert list(a.reset(seed=7)[1]["task_id"]) == list(b.reset(seed=7)[1]["task_id"])

"""A real ScienceWorld episode through EnvPool.remote and agentgym-sciworld-server."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest
from httphelpers import Proc

from agentgym.envs import EnvPool

pytestmark = pytest.mark.slow

if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs Java, which is not installed", allow_module_level=True)
if importlib.util.find_spec("scienceworld") is None:
    pytest.skip(
        "scienceworld is not installed (pip install 'agentgym[sciworld]')", allow_module_level=True
    )


def test_sciworld_episode_end_to_end(procs):
    server = Proc(
        [
            sys.executable,
            "-m",
            "agentgym.envs.sciworld_server",
            "--port",
            "0",
            "--max-sessions",
            "1",
        ],
        "agentgym-sciworld-server:",
        timeout=300,
    )
    procs.append(server)
    pool = EnvPool.remote(server.url, "sciworld", timeout=120.0)
    assert pool.num_tasks > 1000
    ids = pool.create(1)
    with pytest.raises(ConnectionError, match="too many sessions"):
        pool.create(1)
    obs = pool.reset(ids, [0])[0]
    info = pool.info(ids)[0]
    assert info["task_name"] == "boil" and info["var_num"] == 0
    assert "boil" in info["task_description"].lower()
    assert "This room is called" in obs
    b = pool.step(ids, ["look around"])
    assert b.ok and "This room is called" in b.observations[0]
    b = pool.step(ids, ["open door to kitchen"])
    assert b.ok and not b.dones[0]
    pool.close(ids)
    assert pool.stats()["close_errors"] == 0
    again = pool.create(1)  # the JVM slot was freed
    pool.close(again)

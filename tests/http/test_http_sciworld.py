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
        "scienceworld is not installed (pip install 'agentgym-rs[sciworld]')",
        allow_module_level=True,
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


# Tasks of four types with short gold paths (variation 0): an eval of a gold-path policy must
# count each as a success, and a policy that only looks must come back truncated at the move limit.
GOLD_TASKS = ("lifespan-longest-lived", "find-living-thing", "find-plant", "chemistry-mix")


_PLANS_SCRIPT = """
import json, sys
from scienceworld import ScienceWorldEnv
from agentgym.envs.sciworld_server import EXCLUDED_TASKS
env = ScienceWorldEnv()
games = [(name, v) for key, name in env.tasks.items() if key not in EXCLUDED_TASKS
         for v in range(env.get_max_variations(name))]
out = {"games": games, "plans": {}}
for task in sys.argv[1:]:
    env.load(task, 0, "", generateGoldPath=True)
    out["plans"][task] = [env.get_task_description(), list(env.get_gold_action_sequence())]
env.close()
print(json.dumps(out))
"""


def _scienceworld_facts(tasks: tuple[str, ...] = ()) -> dict:
    """The server's (task, variation) order and the gold paths of ``tasks`` (variation 0), read
    in a child process (ScienceWorld's client leaves its JVM pipe and a temp dir to the GC)."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _PLANS_SCRIPT, *tasks], capture_output=True, text=True, check=True
    )
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    facts["games"] = [tuple(g) for g in facts["games"]]
    return facts


def _gold_plans() -> tuple[dict[str, int], dict[str, list[str]]]:
    """data_idx of each GOLD_TASKS variation 0, and its task description -> gold actions."""
    facts = _scienceworld_facts(GOLD_TASKS)
    ids = {task: facts["games"].index((task, 0)) for task in GOLD_TASKS}
    return ids, {desc: plan for desc, plan in facts["plans"].values()}


def test_gold_path_succeeds_and_move_limit_truncates(procs):
    import asyncio

    from fake_sciworld import ScriptedEngine

    from agentgym.actor.config import EpisodeRules
    from agentgym.actor.episodes import EpisodeSpec, next_ids, run_group
    from agentgym.agent.turns import ChatCodec
    from agentgym.engines.base import SamplingParams
    from agentgym.models import train_tokenizer

    ids, plans = _gold_plans()
    server = Proc(
        [sys.executable, "-m", "agentgym.envs.sciworld_server", "--port", "0"],
        "agentgym-sciworld-server:",
        timeout=300,
    )
    procs.append(server)
    pool = EnvPool.remote(server.url, "sciworld", timeout=120.0)
    corpus = [*plans, *(a for p in plans.values() for a in p), "Thought: next step."] * 3
    tokenizer = train_tokenizer(corpus, vocab_size=500)
    idle = {desc: [] for desc in plans}  # the same tasks, played by "look at agent" only
    results = {}
    for name, engine_plans in (("gold", plans), ("idle", idle)):
        engine = ScriptedEngine(tokenizer, engine_plans, idle_action="look at agent")

        async def play(task_id, engine=engine):
            spec = EpisodeSpec(
                "sciworld", task_id, task_id, 1, None, EpisodeRules(max_context_tokens=10**6)
            )
            params = SamplingParams(max_new_tokens=64)
            codec = ChatCodec(tokenizer)
            return await run_group(spec, engine, pool, codec, params, next_ids(0))

        tasks = list(ids.values()) if name == "gold" else [ids["find-plant"]]
        results[name] = [asyncio.run(play(t)) for t in tasks]
        # the first prompt of every episode tells the agent its task
        assert len(engine.first_prompts) == len(tasks)
        assert all(any(d in p for d in plans) for p in engine.first_prompts)
    gold = [(g.trajectories[0].success, g.trajectories[0].truncated) for g in results["gold"]]
    assert gold == [(True, False)] * len(GOLD_TASKS), gold
    assert [g.trajectories[0].reward for g in results["gold"]] == [100.0] * len(GOLD_TASKS)
    (idle_group,) = results["idle"]
    t = idle_group.trajectories[0]
    assert (t.success, t.truncated) == (False, True) and 0 <= t.reward < 100
    assert t.num_turns == 101  # ScienceWorld ends an episode once its moves exceed 100


def test_fresh_simulator_gives_the_same_text_for_the_same_task(procs):
    server = Proc(
        [sys.executable, "-m", "agentgym.envs.sciworld_server", "--port", "0", "--fresh-simulator"],
        "agentgym-sciworld-server:",
        timeout=300,
    )
    procs.append(server)
    # reloaded in one simulator, this task lists its objects in a varying order
    task = _scienceworld_facts()["games"].index(("boil", 1))
    pool = EnvPool.remote(server.url, "sciworld", timeout=120.0)
    ids = pool.create(1)
    texts = {pool.reset(ids, [task])[0] for _ in range(4)}
    assert len(texts) == 1

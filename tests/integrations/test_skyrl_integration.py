"""agentgym's envs as SkyRL-Gym text envs, made with ``skyrl_gym.make`` as SkyRL's generator
makes them and stepped from a 32-thread pool as it steps them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import need

skyrl_gym = need("skyrl_gym", "skyrl")

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.families import BABYAI_INSTRUCTION  # noqa: E402
from agentgym.integrations import skyrl  # noqa: E402
from agentgym.integrations.tasks import row  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered():
    ids = skyrl.register()
    assert ids == ["agentgym-babyai", "agentgym-textcraft", "agentgym-webnav"]
    return ids


def make(env: str, task_id: int, **extras):
    r = row("skyrl", env, "train", task_id, task_id)
    extras = {"extra_info": r["extra_info"], **extras}
    return skyrl_gym.make(r["env_class"], env_config={}, extras=extras), r["prompt"]


def test_an_expert_episode_succeeds_through_skyrls_api():
    """BabyAI task 12 played by replies carrying the expert's moves: the env reads each
    reply's action, and the episode ends with the goal reached."""
    env, prompt = make("babyai", 12)
    messages, info = env.init(prompt)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == BABYAI_INSTRUCTION and info == {"task_id": 12}
    shadow = EnvPool("babyai", threads=1)
    sid = shadow.create(1)
    assert shadow.reset(sid, [12])[0] == messages[1]["content"]
    for _ in range(40):
        action, thought = shadow.expert(sid).moves[0]
        out = env.step(f"Thought: {thought}\nAction: {action}")
        expected = shadow.step(sid, [action])
        if out["done"]:
            break
        assert out["observations"] == [{"role": "user", "content": expected.observations[0]}]
    assert out["done"] and out["observations"] == [] and out["reward"] > 0
    assert out["metadata"]["success"] and not out["metadata"]["truncated"]
    assert out["postprocessed_action"] is None
    metrics = env.get_metrics()
    assert metrics["success"] == 1.0 and metrics["episode_reward"] == out["reward"]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("Action: turn left")
    env.close()
    env.close()


def test_replies_without_an_action_do_not_reach_the_env():
    env, prompt = make("textcraft", 3, max_turns=2)
    env.init(prompt)
    out = env.step("I think I should look at my inventory.")
    assert out["metadata"]["invalid_reply"] and out["reward"] == 0.0 and not out["done"]
    assert "Action:" in out["observations"][0]["content"]
    out = env.step("Action: inventory")  # SkyRL's max_turns reached: done, truncated
    assert out["done"] and out["metadata"]["truncated"] and not out["metadata"]["success"]
    assert env.get_metrics()["invalid_replies"] == 1
    env.close()
    assert skyrl.stats("textcraft").closed_mid_episode == 0  # it ended at max_turns


def test_32_threads_batched_like_skyrls_env_workers():
    """64 trajectories on SkyRL's 32 env-worker threads with coalescing on: every step and
    observation equals a lone session's, the calls went out in batches, nothing leaks."""
    skyrl.register(["babyai"], coalesce=True, window_s=0.02)

    def trajectory(task_id: int) -> list[str]:
        env, prompt = make("babyai", task_id)
        messages, _ = env.init(prompt)
        seen = [messages[-1]["content"]]
        for action in ("turn left", "move forward", "turn right"):
            out = env.step(f"Action: {action}")
            seen += [m["content"] for m in out["observations"]]
        env.close()
        return seen

    with ThreadPoolExecutor(max_workers=32) as workers:
        got = list(workers.map(trajectory, range(64)))
    pool = EnvPool("babyai", threads=1)
    with pool.session() as s:
        first = [s.reset(5)] + [s.step(a)[0] for a in ("turn left", "move forward", "turn right")]
    assert got[5] == first
    stats = skyrl.stats("babyai")
    assert stats.mean_batch > 2 and stats.sessions_opened == stats.sessions_closed == 64
    assert stats.closed_mid_episode == 64
    assert len(skyrl._CLASSES["babyai"].hub.pool) == 0
    skyrl.register(["babyai"])  # back to the default for the other tests


def test_bad_input():
    with pytest.raises(ValueError, match="unknown env 'chess'"):
        skyrl.register(["chess"])
    with pytest.raises(ValueError, match="names no agentgym task"):
        skyrl_gym.make("agentgym-babyai", env_config={}, extras={})
    env, _ = make("babyai", 1)
    with pytest.raises(RuntimeError, match="step before init"):
        env.step("Action: turn left")
    env.close()

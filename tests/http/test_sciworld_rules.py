"""SciWorld as AgentGym's client reads it: the task opens the first observation, rewards are
changes of the score (an episode's rewards add up to its last score), success is completion, the
move limit is truncation. Run against the SciWorld server over scripted simulators (no Java)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fake_sciworld import DESCRIPTIONS, SOLUTIONS, ScriptedEngine, ServerThread

from agentgym.envs import EnvPool
from agentgym.envs.families import family


@pytest.fixture
def sciworld_url() -> Iterator[str]:
    server = ServerThread(max_sessions=8)
    yield server.url
    server.stop()


def test_first_observation_carries_the_task(sciworld_url):
    pool = EnvPool.remote(sciworld_url, "sciworld", num_tasks=4)
    ids = pool.create(2)
    obs = pool.reset(ids, [0, 2])  # data_idx 0: boil var 0; 2: melt var 0
    assert obs[0] == DESCRIPTIONS["boil"] + "\nThis room is called the hallway. Variation 0."
    assert obs[1].startswith(DESCRIPTIONS["melt"] + "\n")
    assert pool.observations(ids) == obs  # what the pool keeps is what AgentGym's client shows
    assert pool.info(ids)[0]["task_description"] == DESCRIPTIONS["boil"]
    pool.close(ids)


def test_rewards_are_score_changes_and_completion_is_done(sciworld_url):
    pool = EnvPool.remote(sciworld_url, "sciworld", num_tasks=4)
    ids = pool.create(1)
    pool.reset(ids, [0])
    rewards, dones = [], []
    for action in SOLUTIONS["boil"]:
        b = pool.step(ids, [action])
        rewards.append(float(b.rewards[0]))
        dones.append(bool(b.dones[0]))
        assert not b.truncated[0]
    assert rewards == [33.0, 34.0, 33.0] and sum(rewards) == 100.0  # the last score
    assert dones == [False, False, True]
    assert family("sciworld").outcome(sum(rewards), True, False).success


def test_move_limit_is_truncation_not_done(sciworld_url):
    pool = EnvPool.remote(sciworld_url, "sciworld", num_tasks=4)
    ids = pool.create(1)
    pool.reset(ids, [0])
    total, steps = 0.0, 0
    while True:
        b = pool.step(ids, ["go to kitchen" if steps == 0 else "look at sky"])
        assert b.ok
        steps += 1
        total += float(b.rewards[0])
        if b.dones[0] or b.truncated[0]:
            break
    assert b.truncated[0] and not b.dones[0]
    assert steps == 6 and total == 33.0  # the limit of 6 moves (reset's look counted) passed
    assert pool.info(ids)[0]["phase"] == "truncated"
    assert "reset" in pool.step(ids, ["look around"]).errors[0]


def test_failure_is_done_with_the_failed_score(sciworld_url):
    pool = EnvPool.remote(sciworld_url, "sciworld", num_tasks=4)
    ids = pool.create(1)
    pool.reset(ids, [0])
    r1 = float(pool.step(ids, ["go to kitchen"]).rewards[0])
    b = pool.step(ids, ["focus on wrong thing"])
    assert b.dones[0] and not b.truncated[0]
    assert r1 + float(b.rewards[0]) == -100.0
    outcome = family("sciworld").outcome(-100.0, True, False)
    assert not outcome.success and not outcome.truncated


def test_outcome_of_a_server_without_the_truncated_flag():
    # AgentGym's own server says done at the move limit; the family's rule reads the score
    rules = family("sciworld")
    assert rules.outcome(70.0, True, False) == rules.outcome(70.0, False, True)
    assert rules.outcome(70.0, True, False).truncated
    assert not rules.outcome(70.0, True, False).success
    assert rules.outcome(100.0, True, False).success
    # BabyAI and TextCraft: a reached goal
    assert family("babyai").outcome(0.94, True, False).success
    assert not family("babyai").outcome(0.0, False, True).success


def test_reset_without_the_task_field_is_a_session_error(sciworld_url):
    pool = EnvPool.remote(sciworld_url, "sciworld", num_tasks=4, task_field="no_such_field")
    ids = pool.create(1)
    from agentgym.envs import SessionError

    with pytest.raises(SessionError, match="no string `no_such_field`"):
        pool.reset(ids, [0])
    assert pool.info(ids)[0]["phase"] == "failed"


def test_fresh_simulator_replaces_the_simulator_on_reset():
    server = ServerThread(max_sessions=2, fresh=True)
    try:
        pool = EnvPool.remote(server.url, "sciworld", num_tasks=4)
        ids = pool.create(1)
        pool.reset(ids, [0])
        (first,) = server.sessions._sessions.values()
        env_before = first.env
        pool.reset(ids, [1])
        assert env_before.closed and first.env is not env_before
        assert pool.reset(ids, [1])[0].endswith("Variation 1.")
    finally:
        server.stop()


# --- the actor: an episode's first turn shows the task; success and truncation by the rules


def test_actor_episode_shows_the_task_and_reads_success_and_truncation(sciworld_url):
    pytest.importorskip("transformers")
    from agentgym.actor.config import EpisodeRules
    from agentgym.actor.episodes import EpisodeSpec, next_ids, run_group
    from agentgym.agent.turns import ChatCodec
    from agentgym.engines.base import SamplingParams
    from agentgym.models import train_tokenizer

    corpus = [*DESCRIPTIONS.values(), "Thought: next step.\nAction: go to kitchen"] * 4
    tokenizer = train_tokenizer(corpus, vocab_size=300)
    # boil opens with an empty action: an invalid reply, counted, the env not called
    plans = {
        DESCRIPTIONS["boil"]: ["", *SOLUTIONS["boil"]],
        DESCRIPTIONS["melt"]: ["go to kitchen"],
    }
    engine = ScriptedEngine(tokenizer, plans, idle_action="look at sky")
    pool = EnvPool.remote(sciworld_url, "sciworld", num_tasks=4)

    async def play(task_id, penalty=0.0, task_reward=1.0):
        rules = EpisodeRules(
            max_context_tokens=100_000, invalid_reply_penalty=penalty, task_reward=task_reward
        )
        spec = EpisodeSpec("sciworld", task_id, task_id, 2, None, rules)
        params = SamplingParams(max_new_tokens=64)
        return await run_group(spec, engine, pool, ChatCodec(tokenizer), params, next_ids(0))

    solved, timed_out = asyncio.run(play(0)), asyncio.run(play(2))
    assert all(DESCRIPTIONS["boil"] in p or DESCRIPTIONS["melt"] in p for p in engine.first_prompts)
    assert len(engine.first_prompts) == 4
    assert [(t.success, t.truncated, t.reward) for t in solved.trajectories] == [
        (True, False, 100.0)
    ] * 2
    assert solved.invalid_replies == [1, 1] and timed_out.invalid_replies == [0, 0]
    # the trajectories carry their counts to the learner (its invalid/* metrics)
    assert [t.invalid_replies for t in solved.trajectories] == [1, 1]
    assert [t.invalid_replies for t in timed_out.trajectories] == [0, 0]
    assert [t.num_turns for t in solved.trajectories] == [4, 4]
    assert [(t.success, t.truncated, t.reward) for t in timed_out.trajectories] == [
        (False, True, 50.0)
    ] * 2
    # actor.invalid_reply_penalty: the training reward loses it per invalid reply, success stays
    penalised = asyncio.run(play(0, penalty=2.5))
    assert [(t.success, t.reward) for t in penalised.trajectories] == [(True, 97.5)] * 2
    assert asyncio.run(play(2, penalty=2.5)).trajectories[0].reward == 50.0
    # actor.task_reward 0: the format term alone (R1-Zero style), success still the env's
    format_only = asyncio.run(play(0, penalty=2.5, task_reward=0.0))
    assert [(t.success, t.reward) for t in format_only.trajectories] == [(True, -2.5)] * 2
    assert asyncio.run(play(2, penalty=2.5, task_reward=0.0)).trajectories[0].reward == 0.0

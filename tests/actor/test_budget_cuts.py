"""A reply cut by the token budget before its action: counted apart from prose (wire schema 5's
``turn_finish`` and ``budget_cut_replies``), and the format penalty per reply or per episode,
with budget cuts penalised or not (``actor.invalid_reply_penalty_mode``,
``actor.penalize_budget_cuts``)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("torch")

from agentgym.actor.config import EpisodeRules  # noqa: E402
from agentgym.actor.episodes import EpisodeSpec, next_ids, run_group  # noqa: E402
from agentgym.actor.policy import sampling_params  # noqa: E402
from agentgym.agent.turns import ChatCodec  # noqa: E402
from agentgym.cli.eval import _stats  # noqa: E402
from agentgym.engines.base import Generation  # noqa: E402
from agentgym.envs import EnvPool  # noqa: E402
from agentgym.transport.wire import decode_trajectories, encode_trajectories  # noqa: E402

# per turn: the reply and how the engine ended it
SCRIPT = (
    ("Thought: the goal is far, so I think about it at some length and", "length"),
    ("I would rather describe the room.", "stop"),
    ("Thought: turn.\nAction: turn left", "stop"),
)


class ScriptedEngine:
    """Every episode gets turn t's scripted reply, ended as the script says."""

    version = 0
    streams_weights = False  # never loads weights

    def __init__(self, tokenizer):
        self.replies = [(tokenizer.encode(text, add_special_tokens=False), finish)
                        for text, finish in SCRIPT]  # fmt: skip
        self.turn = 0

    async def generate(self, prompts, params):
        await asyncio.sleep(0)
        tokens, finish = self.replies[self.turn]
        self.turn += 1
        return [Generation(list(tokens), [-0.5] * len(tokens), finish) for _ in prompts]

    async def close(self):
        pass


def play(menu_run, **penalty):
    config, _, tokenizer = menu_run
    rules = EpisodeRules("action_line", False, 2048, invalid_reply_penalty=0.1, **penalty)
    spec = EpisodeSpec("babyai", 0, 7, 2, len(SCRIPT), rules)
    result = asyncio.run(
        run_group(
            spec,
            ScriptedEngine(tokenizer),
            EnvPool("babyai"),
            ChatCodec(tokenizer),
            sampling_params(config),
            next_ids(0),
        )  # fmt: skip
    )
    assert not result.errors
    return result.trajectories


def test_a_budget_cut_is_invalid_and_counted_apart(menu_run):
    trajectories = play(menu_run)
    for t in trajectories:
        assert t.num_turns == 3 and not t.success
        assert t.invalid_replies == 2 and t.budget_cut_replies == 1
        assert t.turn_finish.tolist() == [1, 0, 0]
        assert t.reward == pytest.approx(-0.2)  # per reply, the cut penalised too
    [back] = decode_trajectories(encode_trajectories(trajectories[:1]))
    assert back.budget_cut_replies == 1 and back.turn_finish.tolist() == [1, 0, 0]


@pytest.mark.parametrize(
    "penalty, reward",
    [
        ({"penalize_budget_cuts": False}, -0.1),
        ({"invalid_reply_penalty_mode": "per_episode"}, -0.1 * 2 / 3),
        ({"invalid_reply_penalty_mode": "per_episode", "penalize_budget_cuts": False}, -0.1 / 3),
    ],
)
def test_the_penalty_per_episode_or_without_budget_cuts(menu_run, penalty, reward):
    for t in play(menu_run, **penalty):
        assert t.reward == pytest.approx(reward)
        assert t.invalid_replies == 2 and t.budget_cut_replies == 1  # counted either way


def test_eval_reports_budget_cuts_as_a_share_of_replies():
    episodes = [
        {"task_id": 0, "success": False, "turns": 3, "invalid_replies": 2,
         "budget_cut_replies": 1},
        {"task_id": 1, "success": True, "turns": 1, "invalid_replies": 0,
         "budget_cut_replies": 0},
    ]  # fmt: skip
    row = _stats(episodes, 1)
    assert row["invalid"] == pytest.approx(2 / 4) and row["invalid_budget"] == pytest.approx(1 / 4)
    assert np.isclose(row["avg@1"], 0.5)

"""A family's stop strings through one group: the engine is asked to stop there, and a reply
that runs on is cut after its first stop before the env and the trajectory see it (Search-R1's
``</search>``/``</answer>``)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from agentgym.actor.config import EpisodeRules
from agentgym.actor.episodes import EpisodeSpec, next_ids, run_group
from agentgym.agent.turns import ChatCodec
from agentgym.engines.base import Generation, SamplingParams
from agentgym.envs import EnvPool
from agentgym.envs.families import SEARCH_INVALID_REPLY, SEARCH_STOP
from agentgym.envs.search import build_index
from agentgym.models import train_tokenizer

REPLIES = [
    # Runs on past its search: the answer after it is never read nor trained on.
    "<think>find the capital</think><search>capital of France</search> so <answer>Lyon</answer>",
    # A stray `</search>` ends the reply before the answer, as in Search-R1: invalid.
    "<think>it is Paris</search></think><answer>Paris</answer>",
    "<answer>Paris</answer> because the passage says so.</search>",
]


class ScriptedEngine:
    """Replies with the next scripted text, whatever it is asked; records the params."""

    streams_weights = False  # never loads weights

    def __init__(self, tokenizer) -> None:
        self.tokens = [tokenizer.encode(r, add_special_tokens=False) for r in REPLIES]
        self.params: list[SamplingParams] = []
        self.version = 0

    async def generate(self, prompts, params):
        self.params.append(params)
        ids = self.tokens[len(self.params) - 1]
        return [Generation(list(ids), [-0.25] * len(ids), "length") for _ in prompts]


@pytest.fixture(scope="module")
def search_pool(tmp_path_factory: pytest.TempPathFactory) -> EnvPool:
    out = tmp_path_factory.mktemp("stop-world")
    docs = [("Paris", "Paris is the capital of France."), ("Lyon", "Lyon lies on the Rhone.")]
    corpus = out / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": i, "contents": f'"{t}"\n{x}'}) + "\n" for i, (t, x) in enumerate(docs)
        )
    )
    (out / "qa.jsonl").write_text(
        json.dumps({"question": "What is the capital of France?", "golden_answers": ["Paris"]})
        + "\n"
    )
    build_index(corpus, out / "index", threads=1)
    return EnvPool("search", index=out / "index", qa=out / "qa.jsonl", topk=1)


def test_replies_are_cut_after_the_first_stop(search_pool: EnvPool) -> None:
    tokenizer = train_tokenizer([*REPLIES, "Question: What is the capital of France?"] * 4, 300)
    codec = ChatCodec(tokenizer)
    engine = ScriptedEngine(tokenizer)
    spec = EpisodeSpec("search", 0, 1, 1, None, EpisodeRules(max_context_tokens=100_000))
    result = asyncio.run(
        run_group(spec, engine, search_pool, codec, SamplingParams(max_new_tokens=64), next_ids(0))
    )
    assert [p.stop for p in engine.params] == [SEARCH_STOP] * 3
    (traj,) = result.trajectories
    assert traj.success and traj.reward == 1.0 and result.invalid_replies == [1]
    generated = traj.tokens[traj.loss_mask == 1]
    texts = []
    start = 0
    for ids in engine.tokens:
        n = next(
            k
            for k in range(1, len(ids) + 1)
            if any(s in codec.decode_reply(ids[:k]) for s in SEARCH_STOP)
        )
        assert list(generated[start : start + n]) == ids[:n]
        texts.append(codec.decode_reply(ids[:n]))
        start += n
    assert start == len(generated) and np.all(traj.logprobs[traj.loss_mask == 1] == -0.25)
    # The token that completes a stop may carry a few more characters (``></``), no more.
    assert "</search>" in texts[0] and "Lyon" not in texts[0]
    assert "</search>" in texts[1] and "Paris</answer>" not in texts[1]
    assert "</answer>" in texts[2] and "because" not in texts[2]
    stream = tokenizer.decode(traj.tokens)
    assert SEARCH_INVALID_REPLY in stream and "so <answer>Lyon" not in stream
    assert "because the passage" not in stream

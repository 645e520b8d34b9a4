"""agentgym's episodes as a verl agent loop, against verl's real classes: the registry and
hydra instantiation the AgentLoopWorker uses, AgentLoopOutput and its as_dict, with a stub
server_manager in place of the LLM servers.

verl 0.9 pins transformers below agentgym's, so these run in a virtual environment of their
own: ``bash tests/run_verl.sh`` (tests/run.sh runs it as its own step)."""

from __future__ import annotations

import asyncio

import pytest

from conftest import need

need(
    "verl.experimental.agent_loop", "verl", "in its own virtual environment: bash tests/run_verl.sh"
)

import hydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.planners import plan_babyai  # noqa: E402
from agentgym.integrations import verl as agverl  # noqa: E402
from agentgym.integrations.tasks import AGENT_LOOP_YAML, export, row  # noqa: E402
from agentgym.models import TinyModelSpec, build_tiny_model, env_corpus, load_tokenizer  # noqa: E402

SPEC = TinyModelSpec(vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1)  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    corpus = env_corpus("babyai", episodes=4, max_steps=4)
    return load_tokenizer(build_tiny_model(tmp_path_factory.mktemp("verl") / "m", corpus, SPEC))


class ExpertServer:
    """A stub server manager: replies with the expert's next move for the episode's task,
    tokenized by the policy's tokenizer, with made-up log-probs; records every request."""

    def __init__(self, tokenizer, task_of_request: dict):
        self.tokenizer = tokenizer
        self.requests: list[tuple[str, int]] = []
        self.shadow = EnvPool("babyai", threads=1)
        self.sessions: dict[str, int] = {}
        self.task_of_request = task_of_request

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests.append((request_id, len(prompt_ids)))
        sid = self.sessions.get(request_id)
        text = self.tokenizer.decode(prompt_ids)
        if sid is None:
            task_id = next(t for t, marker in self.task_of_request.items() if marker in text)
            sid = self.sessions[request_id] = self.shadow.create(1)[0]
            self.shadow.reset([sid], [task_id])
        move = self.shadow.expert([sid]).moves[0]
        action, thought = move if move else ("turn left", "no move")
        self.shadow.step([sid], [action])
        ids = self.tokenizer.encode(f"Thought: {thought}\nAction: {action}<|im_end|>",
                                    add_special_tokens=False)  # fmt: skip
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def config(response_length: int = 4096):
    return OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 4096,
                                           "response_length": response_length}},
         "data": {}}
    )  # fmt: skip


def make_loop(tokenizer, server, cfg, entry=None):
    """The agent loop as verl's AgentLoopWorker makes it: the registry entry, hydra."""
    return hydra.utils.instantiate(
        config=entry or _agent_loop_registry["agentgym"],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def first_observation(task_id: int) -> str:
    pool = EnvPool("babyai", threads=1)
    return pool.reset(pool.create(1), [task_id])[0]


def test_expert_episodes_through_verls_classes(tokenizer):
    """16 episodes run concurrently, as an AgentLoopWorker runs its batch: each is one
    token stream whose env tokens are masked, the env scores it, and their env calls went
    out in batches."""
    tasks = list(range(16))
    markers = {t: first_observation(t) for t in tasks}
    assert len(set(markers.values())) == len(tasks)
    server = ExpertServer(tokenizer, markers)
    rows = [row("verl", "babyai", "train", t, t) for t in tasks]

    async def main():
        loop = make_loop(tokenizer, server, config())  # made in the worker's running loop
        outs = await asyncio.gather(*(loop.run({"temperature": 1.0}, **r) for r in rows))
        return outs, agverl.POOLS.stats()

    outs, stats = asyncio.run(main())
    for out in outs:
        assert isinstance(out, AgentLoopOutput)
        assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
        replies = [lp for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m]
        assert set(replies) == {-0.5}  # the server's log-probs, on the generated tokens only
        assert out.response_mask[-1] == 1  # ends with a reply
        assert (0 in out.response_mask) == (out.num_turns > 3)  # observations between replies
        assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask,
                                              strict=True) if not m)  # fmt: skip
    assert sum(o.num_turns > 3 for o in outs) >= 4
    solved = [o for o in outs if o.extra_fields["success"]]
    assert len(solved) >= 12 and all(o.reward_score > 0 for o in solved)
    assert {o.extra_fields["task_id"] for o in outs} == set(tasks)
    tensors = outs[0].as_dict()  # verl's own conversion to the training batch's fields
    assert tensors["rm_scores"][-1] == outs[0].reward_score
    assert len({rid for rid, _ in server.requests}) == len(tasks)  # one request id per episode
    (babyai,) = [s for env, s in stats.items() if env == "babyai"]
    assert babyai.mean_batch > 2 and babyai.sessions_opened == babyai.sessions_closed


def run_one(tokenizer, task_id: int, cfg, entry=None):
    async def main():
        server = ExpertServer(tokenizer, {task_id: first_observation(task_id)})
        loop = make_loop(tokenizer, server, cfg, entry)
        return await loop.run({}, **row("verl", "babyai", "train", task_id, task_id))

    return asyncio.run(main())


def test_turn_and_length_limits_truncate(tokenizer):
    pool = EnvPool("babyai", threads=1)
    task_id = next(t for t in range(40) if len(plan_babyai(pool, t)) > 3)
    entry = OmegaConf.create({"_target_": "agentgym.integrations.verl.AgentGymAgentLoop",
                              "max_turns": 2})  # fmt: skip
    out = run_one(tokenizer, task_id, config(), entry)
    assert out.extra_fields["truncated"] and not out.extra_fields["success"]
    assert out.num_turns == 5
    out = run_one(tokenizer, task_id, config(response_length=8))
    assert out.extra_fields["truncated"] and len(out.response_ids) == 8


def test_the_exported_yaml_registers_the_loop(tmp_path):
    """What verl's AgentLoopWorker does with rollout.agent.agent_loop_config_path."""
    written = export("verl", "babyai", tmp_path, fmt="jsonl")
    assert written["agent_loop"].read_text() == AGENT_LOOP_YAML
    (entry,) = OmegaConf.load(written["agent_loop"])
    assert entry.name == "agentgym" and hydra.utils.get_class(entry._target_) is (
        agverl.AgentGymAgentLoop
    )


def test_a_row_without_a_task_is_refused(tokenizer):
    async def main():
        loop = make_loop(tokenizer, ExpertServer(tokenizer, {}), config())
        await loop.run({}, raw_prompt=[], extra_info={})

    with pytest.raises(ValueError, match="names no agentgym task"):
        asyncio.run(main())

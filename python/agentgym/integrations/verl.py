"""agentgym's episodes as a verl agent loop (``pip install 'agentgym-rs[verl]'`` in a virtual
environment of its own: verl 0.9 pins transformers below the version agentgym's main
environment runs; ``bench/verl_env.sh`` makes one).

:class:`AgentGymAgentLoop` is registered with verl as ``agentgym`` (``@register``, on import;
in verl's worker processes through ``actor_rollout_ref.rollout.agent.agent_loop_config_path``
pointing at the ``agent_loop.yaml`` that ``agentgym export-tasks --for verl`` writes). A
dataset row picks it with ``agent_name: agentgym`` and names its task in
``extra_info.env``/``extra_info.task_id`` (the exporter's rows).

Each ``run`` plays one agentgym episode token-in/token-out: the prompt is agentgym's
instruction and the task's first observation under the tokenizer's chat template; every turn
the server manager generates from the exact token stream (``await
server_manager.generate(request_id, prompt_ids=..., sampling_params=...)``, one request id per
episode so servers can keep its prefix), the reply is read by agentgym's rules (the "Action:"
line; search's tags and stop strings; webnav's ``` block), and the observation is appended as
the chat template's delta, masked out (``response_mask`` 0, log-prob 0). The output's
``reward_score`` is the episode's env reward; ``extra_fields`` carry ``success``,
``truncated``, ``task_id`` and ``invalid_replies``. The episode ends when the env ends it, at
``max_turns`` (truncated), or when the response reaches ``rollout.response_length`` (truncated).

One pool per worker process and env, shared by every agent loop of that process; the
concurrent loops' reset/step calls go out as batched pool calls (``AsyncCoalescer``). verl's
tools are created and released around every call, so a stateful env is an agent loop, not a
tool (verl's ``BaseInteraction`` was removed in 0.8 and is not used).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from agentgym.agent.turns import ChatCodec, Conversation
from agentgym.envs import AsyncCoalescer, EnvPool
from agentgym.envs.families import family
from agentgym.integrations.common import Episode, open_pool, parse_reply_action, require
from agentgym.integrations.tasks import AGENT_LOOP_YAML, AGENT_NAME

require("verl.experimental.agent_loop")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

DEFAULT_MAX_TURNS = 20

__all__ = ["AGENT_LOOP_YAML", "POOLS", "AgentGymAgentLoop"]


class _Pools:
    """This process's pools, one per env and options, with a coalescer per event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[tuple, EnvPool] = {}
        self._coalescers: dict[tuple, AsyncCoalescer] = {}

    def coalescer(self, env: str, options: dict[str, Any]) -> AsyncCoalescer:
        key = (env, tuple(sorted((k, str(v)) for k, v in options.items())))
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = open_pool(env, **options)
            found = self._coalescers.get((key, id(loop)))
            if found is None or found._loop not in (None, loop):
                found = self._coalescers[(key, id(loop))] = AsyncCoalescer(pool)
            return found

    def stats(self) -> dict[str, Any]:
        """Per env, the counters of its coalescer on the newest event loop."""
        with self._lock:
            return {key[0][0]: c.stats() for key, c in self._coalescers.items()}


POOLS = _Pools()


@register(AGENT_NAME)
class AgentGymAgentLoop(AgentLoopBase):
    """agentgym's Thought/Action episodes as a verl agent loop (see the module docstring).

    Extra keyword arguments (the agent loop YAML's entries besides ``name``/``_target_``):
    ``max_turns`` (default 20), ``env`` (used when a row names none), ``pool_options``
    (``EnvPool``'s options, or ``urls`` for servers), ``worked_example``.
    """

    def __init__(
        self,
        *args: Any,
        max_turns: int = DEFAULT_MAX_TURNS,
        env: str | None = None,
        pool_options: dict[str, Any] | None = None,
        worked_example: bool = False,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        self.max_turns = int(max_turns)
        self.default_env = env
        self.pool_options = dict(pool_options or {})
        self.worked_example = worked_example
        self.codec = ChatCodec(self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One episode of the row's task (``extra_info.env``, ``extra_info.task_id``)."""
        env, task_id = self._task(kwargs)
        rules = family(env)
        params = {**sampling_params, "stop": list(rules.stop)} if rules.stop else sampling_params
        session = POOLS.coalescer(env, self.pool_options).session()
        episode, timing = Episode(env), {"generate_sequences": 0.0, "tool_calls": 0.0}
        try:
            start = time.perf_counter()
            observation = await session.reset(task_id)
            timing["tool_calls"] += time.perf_counter() - start
            episode.start(task_id)
            conversation = self._open(env, observation)
            request_id = uuid.uuid4().hex
            while not episode.over:
                await self._turn(conversation, episode, session, request_id, params, timing)
        finally:
            session.close()
        return self._output(conversation, episode, timing)

    def _task(self, kwargs: dict[str, Any]) -> tuple[str, int]:
        info = kwargs.get("extra_info") or {}
        env = info.get("env") or self.default_env
        task_id = info.get("task_id")
        if env is None or task_id is None:
            raise ValueError(
                "the row names no agentgym task: extra_info needs env and task_id "
                "(agentgym export-tasks --for verl writes such rows)"
            )
        return str(env), int(task_id)

    def _open(self, env: str, observation: str) -> Conversation:
        from agentgym.agent.prompts import initial_messages

        messages = initial_messages(env, observation, worked_example=self.worked_example)
        return Conversation(self.codec, messages)

    async def _turn(self, conversation, episode, session, request_id, params, timing) -> None:
        """One reply and, when it holds an action, one env step; ends the episode at a limit."""
        start = time.perf_counter()
        out = await self.server_manager.generate(
            request_id=request_id, prompt_ids=list(conversation.tokens), sampling_params=params
        )
        timing["generate_sequences"] += time.perf_counter() - start
        logprobs = out.log_probs if out.log_probs else [0.0] * len(out.token_ids)
        stop = family(episode.env).stop
        text = conversation.add_reply(list(out.token_ids), list(logprobs), 0, stop=stop)
        episode.turns += 1
        action, correction = parse_reply_action(text, episode.env)
        if action is None:
            episode.invalid_replies += 1
            observation = correction or ""
        else:
            start = time.perf_counter()
            observation, reward, done, truncated = await session.step(action)
            timing["tool_calls"] += time.perf_counter() - start
            episode.record(reward, done, truncated)
        if episode.over:
            return
        responded = len(conversation.tokens) - conversation.trace.prompt_len
        if episode.turns >= self.max_turns or responded >= self.response_length:
            episode.done = episode.truncated = True
            session.end_episode()
            return
        conversation.add_observation(observation)

    def _output(self, conversation: Conversation, episode: Episode, timing) -> AgentLoopOutput:
        trace = conversation.trace
        n, cut = trace.prompt_len, trace.prompt_len + self.response_length
        return AgentLoopOutput(
            prompt_ids=trace.tokens[:n],
            response_ids=trace.tokens[n:cut],
            response_mask=trace.loss_mask[n:cut],
            response_logprobs=trace.logprobs[n:cut],
            reward_score=episode.reward,
            num_turns=1 + 2 * episode.turns,
            metrics=AgentLoopMetrics(**timing),
            extra_fields={
                "success": episode.success,
                "truncated": episode.truncated,
                "task_id": episode.task_id,
                "invalid_replies": episode.invalid_replies,
                "turn_scores": [],
                "tool_rewards": [],
            },
        )

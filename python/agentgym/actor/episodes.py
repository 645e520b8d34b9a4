"""One GRPO group: n episodes of one task, stepped turn by turn through an engine and an EnvPool.

All episodes of a group take one engine call and one batched env step per turn; groups run as
concurrent coroutines, so the engine batches the turns of every group in flight (continuous
batching over turns). A session whose env fails drops only its own trajectory. A family with
stop strings (search) has the engine stop there and every reply cut after its first one before
the env sees it and before it enters the trajectory.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from agentgym.actor.config import EpisodeRules
from agentgym.agent.parsing import EMPTY_ACTION_MESSAGE, ParsedAction, parse_action, sanitize_action
from agentgym.agent.prompts import initial_messages
from agentgym.agent.turns import ChatCodec, Conversation
from agentgym.engines.base import Engine, SamplingParams
from agentgym.envs import EnvPool, SessionError
from agentgym.envs.families import EnvFamily, family
from agentgym.transport.ids import next_ids  # noqa: F401 - re-exported: run_group takes its ids
from agentgym.transport.wire import Trajectory


def parse_reply(reply: str, env: str, reply_format: Literal["action_line", "bare"]) -> ParsedAction:
    """The action in ``reply``: AgentGym's ``Action:`` line rules, or the bare reply text; a
    family with its own reply grammar (search's tags) always parses with it."""
    if reply_format == "action_line" or family(env).parse_reply is not None:
        return parse_action(reply, env)
    action = sanitize_action(reply, env)
    return ParsedAction(action) if action else ParsedAction(None, EMPTY_ACTION_MESSAGE)


@dataclass(frozen=True)
class EpisodeSpec:
    """What a group runs: which task, how many episodes, under which cap and episode rules."""

    env: str
    task_id: int
    group_id: int
    group_size: int
    horizon_cap: int | None
    rules: EpisodeRules = field(default_factory=EpisodeRules)
    """How its episodes are prompted, cut off and rewarded (``actor.*``: ``ActorConfig.rules``)."""
    seed: int | None = None
    """Seeds the sampling: turn t samples with ``derive_seed(seed, t)`` (its i-th live episode
    with that + i), so the same seed, weights and task give the same episodes whatever else is
    in flight; None: the engine's own stream."""


def derive_seed(*parts: int) -> int:
    """A seed below 2**62 mixed from ``parts`` (the same on every machine)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2  # leaves room for + i below 2**63


@dataclass
class Busy:
    """Wall time during which at least one call of a kind was running (overlaps counted once)."""

    seconds: float = 0.0
    _active: int = 0
    _since: float = 0.0

    def enter(self) -> None:
        if self._active == 0:
            self._since = time.perf_counter()
        self._active += 1

    def exit(self) -> None:
        self._active -= 1
        if self._active == 0:
            self.seconds += time.perf_counter() - self._since


@dataclass
class Clocks:
    """Busy time of the engine and the envs, shared by all groups of one actor."""

    generate: Busy = field(default_factory=Busy)
    env: Busy = field(default_factory=Busy)


@dataclass
class GroupResult:
    """The finished trajectories of a group and what went wrong with the others."""

    trajectories: list[Trajectory]
    errors: list[str]
    """One message per dropped episode (its env session failed)."""
    generated_tokens: int = 0
    invalid_replies: list[int] = field(default_factory=list)
    """Per trajectory: replies that held no usable action (the env was not called for them)."""
    budget_cut_replies: list[int] = field(default_factory=list)
    """Per trajectory: of those, the replies cut by the token budget."""


@dataclass
class _Episode:
    session: int
    conversation: Conversation
    reward: float = 0.0
    success: bool = False
    truncation: str = ""
    """Why it was cut off (``agentgym.transport.wire.TRUNCATIONS``; "" if it was not)."""
    done: bool = False
    error: str | None = None
    invalid_replies: int = 0
    budget_cuts: int = 0
    """Invalid replies that the token budget cut off (finish reason "length")."""
    turn_finish: list[int] = field(default_factory=list)
    """Per generated turn: 1 where the token budget ended it, else 0."""
    gen_s: float = 0.0
    env_s: float = 0.0


async def run_group(
    spec: EpisodeSpec,
    engine: Engine,
    pool: EnvPool,
    codec: ChatCodec,
    params: SamplingParams,
    episode_ids: Iterator[int],
    clocks: Clocks | None = None,
) -> GroupResult:
    """Run ``spec.group_size`` episodes of ``spec.task_id`` to the end; never raises for env
    failures (the failed episodes are listed in ``GroupResult.errors``)."""
    clocks = clocks or Clocks()
    params = replace(params, stop=family(spec.env).stop)
    sessions = pool.create(spec.group_size)
    try:
        episodes = await _start(spec, pool, codec, sessions, clocks)
        turns = 0
        generated = 0
        while live := [e for e in episodes if not (e.done or e.error)]:
            if spec.seed is not None:
                params = replace(params, seed=derive_seed(spec.seed, turns))
            generated += await _turn(spec, engine, pool, params, live, clocks)
            turns += 1
            _apply_limits(spec, live, turns)
    finally:
        pool.close(sessions)
    return _result(spec, episodes, episode_ids, generated)


async def _start(spec, pool, codec, sessions, clocks) -> list[_Episode]:
    start = time.perf_counter()
    clocks.env.enter()
    try:
        observations: list[str | None] = list(
            await pool.areset(sessions, [spec.task_id] * len(sessions))
        )
        errors: dict[int, str] = {}
    except SessionError as e:
        observations, errors = e.observations, e.errors
    finally:
        clocks.env.exit()
    elapsed = time.perf_counter() - start
    episodes = []
    for i, (sid, obs) in enumerate(zip(sessions, observations, strict=True)):
        messages = _opening(spec, obs or "")
        ep = _Episode(sid, Conversation(codec, messages), env_s=elapsed)
        if i in errors:
            ep.error = f"reset: {errors[i]}"
        episodes.append(ep)
    return episodes


def _opening(spec: EpisodeSpec, observation: str) -> list[dict[str, str]]:
    if spec.rules.system_prompt:
        return initial_messages(spec.env, observation, worked_example=spec.rules.worked_example)
    return [{"role": "user", "content": observation}]


async def _turn(spec, engine, pool, params, live: list[_Episode], clocks: Clocks) -> int:
    """One policy turn for every live episode of the group; returns tokens generated."""
    start = time.perf_counter()
    clocks.generate.enter()
    try:
        gens = await engine.generate([e.conversation.tokens for e in live], params)
    finally:
        clocks.generate.exit()
    gen_s = time.perf_counter() - start
    acting: list[tuple[_Episode, str]] = []
    for ep, gen in zip(live, gens, strict=True):
        ep.gen_s += gen_s
        text = ep.conversation.add_reply(
            gen.token_ids, gen.logprobs, gen.policy_version, stop=params.stop
        )
        parsed = parse_reply(text, spec.env, spec.rules.reply_format)
        cut = gen.finish_reason == "length"
        ep.turn_finish.append(int(cut))
        if parsed.ok:
            acting.append((ep, parsed.action))
        else:
            ep.invalid_replies += 1
            ep.budget_cuts += int(cut)
            ep.conversation.add_observation(parsed.error)
    if acting:
        await _step(pool, acting, clocks, family(spec.env))
    return sum(len(g.token_ids) for g in gens)


async def _step(
    pool: EnvPool, acting: list[tuple[_Episode, str]], clocks: Clocks, rules: EnvFamily
) -> None:
    """One batched env step; an episode that ends is judged by its family's rules."""
    start = time.perf_counter()
    clocks.env.enter()
    try:
        batch = await pool.astep([e.session for e, _ in acting], [a for _, a in acting])
    finally:
        clocks.env.exit()
    env_s = time.perf_counter() - start
    for k, (ep, _) in enumerate(acting):
        ep.env_s += env_s
        if batch.errors[k] is not None:
            ep.error = f"step: {batch.errors[k]}"
            continue
        ep.reward += float(batch.rewards[k])
        if batch.dones[k] or batch.truncated[k]:
            outcome = rules.outcome(ep.reward, bool(batch.dones[k]), bool(batch.truncated[k]))
            ep.done = True
            ep.success, ep.truncation = outcome.success, "env" if outcome.truncated else ""
        else:
            ep.conversation.add_observation(batch.observations[k])


def _apply_limits(spec: EpisodeSpec, live: list[_Episode], turns: int) -> None:
    """End the live episodes that reached a limit, noting which: a full context wins over the
    cap reached on the same turn (a higher cap would not have let the episode go on), so
    "cap" means the turn cap alone cut it off."""
    for ep in live:
        if ep.done or ep.error:
            continue
        if len(ep.conversation.tokens) >= spec.rules.max_context_tokens:
            ep.done, ep.truncation = True, "context"
        elif spec.horizon_cap is not None and turns >= spec.horizon_cap:
            ep.done, ep.truncation = True, "cap"


def _result(spec, episodes: list[_Episode], episode_ids, generated: int) -> GroupResult:
    kept = [e for e in episodes if e.error is None and e.conversation.trace.num_turns > 0]
    errors = [e.error for e in episodes if e.error is not None]
    trajectories = [
        Trajectory(
            episode_id=next(episode_ids),
            group_id=spec.group_id,
            group_size=len(kept),
            env=spec.env,
            task_id=spec.task_id,
            horizon_cap=spec.horizon_cap,
            reward=spec.rules.task_reward * e.reward - format_penalty(spec.rules, e),
            success=e.success,
            truncation=e.truncation,
            timings={"generate": e.gen_s, "env": e.env_s},
            invalid_replies=e.invalid_replies,
            budget_cut_replies=e.budget_cuts,
            turn_finish=np.asarray(e.turn_finish, np.uint8),
            **e.conversation.trace.trajectory_fields(),
        )
        for e in kept
    ]
    return GroupResult(
        trajectories, errors, generated,
        [e.invalid_replies for e in kept], [e.budget_cuts for e in kept],
    )  # fmt: skip


def format_penalty(rules: EpisodeRules, e: _Episode) -> float:
    """What an episode's invalid replies cost its reward (``EpisodeRules.invalid_reply_penalty``,
    added up by its ``invalid_reply_penalty_mode``)."""
    if rules.invalid_reply_penalty == 0:
        return 0.0
    penalised = e.invalid_replies - (0 if rules.penalize_budget_cuts else e.budget_cuts)
    if rules.invalid_reply_penalty_mode == "per_episode":
        return rules.invalid_reply_penalty * penalised / max(len(e.turn_finish), 1)
    return rules.invalid_reply_penalty * penalised

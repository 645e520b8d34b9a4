"""Policies without a model, to set beside every learning figure: what an eval set gives to a
constant reply, to the simplest scripted rule of the env's family, to copying the worked
example, and to the env's own expert (its ceiling under a turn cap).

A policy spec (``agentgym eval CONFIG --policy SPEC``):

- ``constant:ACTION``: ``ACTION`` every turn (``constant:go to red ball 1``).
- ``scripted`` or ``scripted:NAME``: a rule of the family's registry entry
  (``EnvFamily.baselines``; the first one without a name). BabyAI's ``goal-object``: act on the
  goal's first object when an action on it is listed (pick it up, open it, go to it, as the
  goal says), else turn left. TextCraft's ``first-recipe``: get each ingredient of the goal's
  first listed recipe, then craft it (it knows no tags and no nested recipes). Deep Search's
  ``one-hop``: search the entity the question names, then answer the place its passage names.
- ``copy-example``: the action of the family's worked example, every turn (what a model that
  copies the example's reply does).
- ``bot``: the env's expert, closed-loop (BabyAI's bot over the true world state; TextCraft's
  recipe planner, ``agentgym.envs.planners``), cut at the turn cap like any policy.

Each task is played once (every policy here is deterministic) under the eval's turn cap, and
scored as the actor scores an episode: the env's reward summed, success by the family's
``outcome``; the replies are always well-formed, so no format penalty applies.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.agent.parsing import parse_action
from agentgym.envs.families import family

MAX_TURNS = 256
"""Turns a policy plays at most where neither the cap nor the env ends the episode."""


@dataclass(frozen=True)
class Policy:
    """A parsed policy spec: ``kind`` (constant, scripted, copy-example, bot) and its
    argument (the constant action, the scripted rule's name; "" where there is none)."""

    kind: str
    arg: str = ""

    @property
    def label(self) -> str:
        """How results name it: the spec as given (``constant:turn left``, ``bot``)."""
        return f"{self.kind}:{self.arg}" if self.arg else self.kind

    @property
    def slug(self) -> str:
        """The label as a file-name part (``constant-turn-left``)."""
        return re.sub(r"[^a-z0-9]+", "-", self.label.lower()).strip("-")


KINDS = ("constant", "scripted", "copy-example", "bot")


def parse_policy(spec: str) -> Policy:
    """``spec`` as a :class:`Policy`; ``ValueError`` naming the forms for anything else."""
    kind, _, arg = spec.partition(":")
    kind, arg = kind.strip(), arg.strip()
    forms = "constant:ACTION, scripted, scripted:NAME, copy-example, bot"
    if kind not in KINDS:
        raise ValueError(f"unknown policy {spec!r} (one of {forms})")
    if kind == "constant" and not arg:
        raise ValueError(f"policy {spec!r}: constant needs its action (constant:ACTION)")
    if kind in ("copy-example", "bot") and arg:
        raise ValueError(f"policy {spec!r}: {kind} takes no argument")
    return Policy(kind, arg)


Chooser = Callable[[Sequence[str], Sequence[str]], "str | None"]
"""(observations so far, the first stating the goal; actions taken) -> the next action, or None
to stop (the episode then ends unsolved)."""


def chooser(policy: Policy, env: str, pool: Any, task_id: int) -> Chooser:
    """What plays ``policy`` on ``env``'s task ``task_id`` (``pool`` for the bot's scratch
    sessions); ``ValueError`` where the family has no such rule, example or expert."""
    rules = family(env)
    if policy.kind == "constant":
        return lambda observations, actions: policy.arg
    if policy.kind == "copy-example":
        if rules.example is None:
            raise ValueError(f"{env} has no worked example to copy")
        action = _example_action(env)
        return lambda observations, actions: action
    if policy.kind == "scripted":
        if not rules.baselines:
            raise ValueError(f"{env} has no scripted baseline (EnvFamily.baselines)")
        name = policy.arg or next(iter(rules.baselines))
        if name not in rules.baselines:
            raise ValueError(f"{env} has no scripted baseline {name!r} "
                             f"(it has {', '.join(rules.baselines)})")  # fmt: skip
        return rules.baselines[name]
    return _bot(env, pool, task_id)


def _example_action(env: str) -> str:
    rules = family(env)
    assert rules.example is not None
    parsed = parse_action(rules.example[1], env)
    if not parsed.ok:
        raise ValueError(f"{env}'s worked example does not parse: {parsed.error}")
    return parsed.action


def _bot(env: str, pool: Any, task_id: int) -> Chooser:
    if env == "textcraft":
        from agentgym.envs.planners import plan_textcraft

        plan = plan_textcraft(pool, task_id)  # found uncapped in a scratch session
        if plan is None:
            return lambda observations, actions: None
        moves = [s.action for s in plan]
        return lambda observations, actions: moves[len(actions)] if len(actions) < len(moves) \
            else None  # fmt: skip
    return _expert_move(pool)


class _expert_move:  # noqa: N801 - used like a function
    """The env's expert (``EnvPool.expert``) on the session being played (set by ``play``)."""

    def __init__(self, pool: Any):
        self.pool, self.session = pool, None

    def __call__(self, observations: Sequence[str], actions: Sequence[str]) -> str | None:
        expert = self.pool.expert([self.session])
        move = expert.moves[0]
        if move is None and expert.errors[0] and "no expert" in expert.errors[0]:
            raise ValueError(f"bot: {expert.errors[0]}")
        return None if move is None else move[0]


def play(
    pool: Any,
    env: str,
    policy: Policy,
    task_ids: Sequence[int],
    cap: int | None,
    levels: dict[int, str],
    on_task: Callable[[bool], None] | None = None,
) -> list[dict[str, Any]]:
    """One episode of ``policy`` per task under turn cap ``cap``, as eval episode dicts
    (``agentgym.cli.eval.summarize`` reads them): task, level, success, score, turns, and the
    actions taken."""
    rules = family(env)
    out = []
    for task_id in task_ids:
        choose = chooser(policy, env, pool, task_id)
        (sid,) = pool.create(1)
        try:
            if isinstance(choose, _expert_move):
                choose.session = sid
            observations, actions = [pool.reset([sid], [task_id])[0]], []
            reward, success, error = 0.0, False, None
            limit = MAX_TURNS if cap is None else cap
            while len(actions) < limit:
                action = choose(observations, actions)
                if action is None:
                    break
                batch = pool.step([sid], [action])
                actions.append(action)
                if batch.errors[0] is not None:
                    error = f"step: {batch.errors[0]}"
                    break
                reward += float(batch.rewards[0])
                if batch.dones[0] or batch.truncated[0]:
                    success = rules.outcome(reward, bool(batch.dones[0]),
                                            bool(batch.truncated[0])).success  # fmt: skip
                    break
                observations.append(batch.observations[0])
        finally:
            pool.close([sid])
        episode: dict[str, Any] = {"task_id": task_id, "level": levels[task_id]}
        if error is not None:
            episode["error"] = error
        else:
            episode.update(success=success, score=reward, turns=len(actions),
                           generated_tokens=0, invalid_replies=0, budget_cut_replies=0,
                           actions=actions)  # fmt: skip
        out.append(episode)
        if on_task is not None:
            on_task(success)
    return out

"""The actor's config schema (frozen dataclasses, one docstring per field).

``EpisodeRules`` holds the rules of one episode (reply format, prompt, context limit, reward
shaping); ``ActorConfig`` extends it, so the rules stay flat keys of the ``actor`` section
(``actor.max_context_tokens``) while the actor and the episode code take them whole
(``ActorConfig.rules``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from agentgym.configtools import check
from agentgym.envs.families import opens_with_example


@dataclass(frozen=True)
class EpisodeRules:
    """How an episode is prompted, cut off and rewarded (the same for every group of a run)."""

    reply_format: Literal["action_line", "bare"] = "action_line"
    """action_line: AgentGym's "Thought: ... Action: <action>" replies (parsed with its rules);
    bare: the whole reply is the action (for the menu policy's one-token replies)."""
    system_prompt: bool = True
    """Open each episode with the env's instruction as a system message (False: the first
    observation is the whole prompt, for tiny models with short contexts)."""
    max_context_tokens: int = 3968
    """An episode ends (counted as truncated) once its conversation reaches this many tokens.
    The longest prompt is then one token shorter, and it plus ``engine.max_new_tokens`` must fit
    the model's context (checked at load; the default fits the tiny model's 4,096 positions
    with 128-token replies)."""
    worked_example: bool = False
    """Open every episode with its env family's worked example (an observation of a training
    task and the reply to it in the family's format) after the instruction: the format shown
    once, for models that do not follow it from the instruction alone (SmolLM2-135M writes
    prose without it). Needs a system prompt and at least one env whose family has an example
    (BabyAI, TextCraft, Deep Search); in a multi-env run the envs of families without one
    (webnav, ScienceWorld) open without it."""
    invalid_reply_penalty: float = 0.0
    """Subtracted from an episode's training reward for each reply without a usable action (a
    format reward, as R1-style recipes use): GRPO then ranks, within a group, an episode that
    wasted turns on unparsable replies below one that reached the same end without. Success
    and eval are unchanged; 0: off."""
    invalid_reply_penalty_mode: Literal["per_reply", "per_episode"] = "per_reply"
    """How ``invalid_reply_penalty`` adds up: per_reply, the penalty for each such reply (an
    all-invalid episode loses penalty x its turns, so the reward scale grows with the horizon
    cap); per_episode, the penalty times the share of the episode's replies that were invalid
    (at most the penalty, whatever the cap)."""
    penalize_budget_cuts: bool = True
    """Whether a reply cut by ``engine.max_new_tokens`` before its action counts for the
    penalty (False: only malformed replies do, so the format penalty is not partly a length
    penalty). Such replies count as invalid either way, and apart as ``invalid_budget``."""
    task_reward: float = 1.0
    """Weight of the env's own reward in an episode's training reward. 0 trains on the format
    reward alone (R1-Zero style: only ``invalid_reply_penalty`` ranks the episodes of a group),
    to see how many steps the format takes and what task success does meanwhile; success,
    the step lines' success and eval are unchanged."""

    def __post_init__(self) -> None:
        check(self, *self._rule_checks())

    def _rule_checks(self) -> tuple[tuple[str, bool, str], ...]:
        return (
            ("max_context_tokens", self.max_context_tokens >= 1, "must be >= 1"),
            ("invalid_reply_penalty", self.invalid_reply_penalty >= 0, "must be >= 0 (0: off)"),
            ("task_reward", self.task_reward >= 0, "must be >= 0 (0: the format reward alone)"),
            ("task_reward", self.task_reward > 0 or self.invalid_reply_penalty > 0,
             "0 needs actor.invalid_reply_penalty > 0 (else every reward is 0: nothing to learn)"),
        )  # fmt: skip

    def for_env(self, env: str) -> EpisodeRules:
        """These rules for an episode of ``env``: the worked example only where its family has
        one (a multi-env run's other envs open without it)."""
        return replace(self, worked_example=opens_with_example(env, self.worked_example))

    def scored_by_env(self) -> EpisodeRules:
        """These rules with the reward shaping off (no format penalty, the env's reward at
        weight 1): how eval scores an episode."""
        return replace(self, invalid_reply_penalty=0.0, task_reward=1.0)


@dataclass(frozen=True)
class ActorConfig(EpisodeRules):
    """How an actor runs episodes and feeds the learner. The keys from ``reply_format`` to
    ``task_reward`` are the rules of every episode (``EpisodeRules``), which the actor hands
    whole to the episode code."""

    num_actors: int = 1
    """Actor processes ``agentgym train`` starts (each with its own engine and env pool)."""
    group_size: int = 8
    """Episodes per task, sent together as one GRPO group (same task, same horizon cap)."""
    groups_in_flight: int = 4
    """Groups an actor runs at once; their turns share engine batches."""
    seed: int = 0
    """Seeds task sampling, the sampling of each group (mixed with its group id) and the engine's
    own stream; actor i uses seed + i."""
    sample_every: int = 20
    """Write every n-th pushed group of actor 0 to the run's trajectory sample (0: none)."""
    torch_threads: int = 1
    """Torch threads per actor process (CPU engines)."""
    push_timeout_s: float = 2.0
    """How long one push waits on a full learner queue before re-checking for stop."""

    def __post_init__(self) -> None:
        counts = ("num_actors", "group_size", "groups_in_flight", "torch_threads")
        check(
            self,
            *self._rule_checks(),
            *((name, getattr(self, name) >= 1, "must be >= 1") for name in counts),
            ("sample_every", self.sample_every >= 0, "must be >= 0 (0: no sample)"),
            ("push_timeout_s", self.push_timeout_s > 0, "must be > 0"),
        )  # fmt: skip

    @property
    def rules(self) -> EpisodeRules:
        """The episode rules of this config, as the actor and the episode code take them."""
        return EpisodeRules(**{f.name: getattr(self, f.name) for f in fields(EpisodeRules)})

"""Per-environment instructions in the AgentGym "Thought: ... Action: ..." format (search: the
Search-R1 tags).

The instruction is the system message of every episode; the environment's first observation is the
first user message. The texts live in each env family's registry entry (``agentgym.envs.families``);
the wording is our own, the action vocabulary what each environment accepts.
"""

from __future__ import annotations

from agentgym.envs.families import (
    BABYAI_INSTRUCTION,
    GENERIC_INSTRUCTION,
    SCIWORLD_INSTRUCTION,
    SEARCH_INSTRUCTION,
    TEXTCRAFT_INSTRUCTION,
    family,
)

__all__ = [
    "BABYAI_INSTRUCTION",
    "GENERIC_INSTRUCTION",
    "SCIWORLD_INSTRUCTION",
    "SEARCH_INSTRUCTION",
    "TEXTCRAFT_INSTRUCTION",
    "initial_messages",
    "instruction_for",
]


def instruction_for(env: str) -> str:
    """The system instruction for `env` (the generic one for environments without their own)."""
    return family(env).instruction


def initial_messages(
    env: str, observation: str, *, worked_example: bool = False
) -> list[dict[str, str]]:
    """Chat messages that open an episode: the env's instruction, then its first observation;
    with ``worked_example``, the family's example exchange (an observation and the reply to it)
    between the two."""
    messages = [{"role": "system", "content": instruction_for(env)}]
    if worked_example:
        example = family(env).example
        if example is None:
            raise ValueError(f"env {env!r} has no worked example (actor.worked_example)")
        messages += [{"role": "user", "content": example[0]},
                     {"role": "assistant", "content": example[1]}]  # fmt: skip
    return [*messages, {"role": "user", "content": observation}]

"""The quickstart config shrunk to a run of seconds, for CLI tests that train for real."""

from __future__ import annotations

from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"

TINY = [
    "model.tiny.vocab_size=320",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.max_position_embeddings=1024",
    "actor.max_context_tokens=1024",
    "model.corpus_episodes=8",
    "actor.group_size=2",
    "actor.groups_in_flight=2",
    "actor.sample_every=1",
    "learner.groups_per_step=2",
    "learner.max_steps=2",
    "learner.checkpoint_every=1",
    "learner.horizon.rounds=[2, 3]",
    "learner.horizon.every=1",
]
"""Overrides of ``QUICKSTART``: a tiny model, two steps of two groups of two episodes."""


def sets(items: list[str]) -> list[str]:
    """``--set KEY=VALUE`` arguments for each override."""
    return [arg for item in items for arg in ("--set", item)]

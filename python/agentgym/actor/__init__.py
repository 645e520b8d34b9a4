"""Actors: the asynchronous episode loop that turns tasks into trajectories for the learner.

- ``agentgym.actor.actor.Actor``: many GRPO groups in flight over one engine and one env pool,
  whole groups pushed to the learner, its weights and horizon cap followed, admission stopped
  when sampling runs too far ahead;
- ``agentgym.actor.episodes.run_group``: one group, no transport (evaluation uses it too);
- ``agentgym.actor.menu``: the menu policy of the CPU quickstart;
- ``agentgym.actor.policy``: model, tokenizer and engine from a ``RunConfig``.

Only the config schema is imported here, so ``agentgym.config`` loads without torch or the
native env module.
"""

from agentgym.actor.config import ActorConfig

__all__ = ["ActorConfig"]

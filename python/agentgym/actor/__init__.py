"""Actors: the asynchronous episode loop that turns tasks into trajectories for the learner.

``Actor`` keeps many GRPO groups in flight over one engine and one env pool, pushes whole groups
to the learner, follows its weights and horizon cap, and stops admitting work when it runs too
far ahead. ``run_group`` (one group, no transport) is what evaluation uses too.
"""

from agentgym.actor.config import ActorConfig
from agentgym.actor.episodes import EpisodeSpec, GroupResult, parse_reply, run_group

__all__ = ["ActorConfig", "EpisodeSpec", "GroupResult", "parse_reply", "run_group"]

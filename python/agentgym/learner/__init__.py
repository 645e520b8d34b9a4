"""The learner: advantages and losses (pure tensor functions), the update loop, checkpoints.

Needs torch (the ``train`` extra). ``Learner`` is the entry point; ``LearnerConfig`` its schema.
"""

from agentgym.learner.batch import GroupBuffer, TrainBatch, collate
from agentgym.learner.config import AdvantageConfig, LearnerConfig, LossConfig, OptimConfig
from agentgym.learner.learner import Learner, ValueHead
from agentgym.learner.weights import blobs_to_state_dict, state_dict_to_blobs

__all__ = [
    "AdvantageConfig",
    "GroupBuffer",
    "Learner",
    "LearnerConfig",
    "LossConfig",
    "OptimConfig",
    "TrainBatch",
    "ValueHead",
    "blobs_to_state_dict",
    "collate",
    "state_dict_to_blobs",
]

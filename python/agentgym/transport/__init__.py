"""Actor <-> learner transport: typed messages (``wire``, and the weight protocol in
``weights``) over ZeroMQ sockets, by role: where they are and what they count (``endpoints``),
the learner's side (``learner_channels``), an actor's side (``actor_channels``), the actors the
learner has heard from (``registry``), and the ids of groups and episodes (``ids``)."""

from agentgym.transport.actor_channels import ActorChannels, AsyncActorChannels
from agentgym.transport.endpoints import ChannelStats, Endpoints
from agentgym.transport.learner_channels import LearnerChannels
from agentgym.transport.weights import (
    TensorBlob,
    WeightFetchError,
    WeightReply,
    WeightRequest,
    WeightSnapshot,
    WeightStore,
)
from agentgym.transport.wire import SCHEMA_VERSION, Control, Trajectory, WireError

__all__ = [
    "SCHEMA_VERSION",
    "ActorChannels",
    "AsyncActorChannels",
    "ChannelStats",
    "Control",
    "Endpoints",
    "LearnerChannels",
    "TensorBlob",
    "Trajectory",
    "WeightFetchError",
    "WeightReply",
    "WeightRequest",
    "WeightSnapshot",
    "WeightStore",
    "WireError",
]

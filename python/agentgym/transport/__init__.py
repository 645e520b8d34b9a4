"""Actor <-> learner transport: typed messages (``wire``, and the weight protocol in
``weights``) over ZeroMQ sockets (``channels``)."""

from agentgym.transport.channels import (
    ActorChannels,
    AsyncActorChannels,
    ChannelStats,
    Endpoints,
    LearnerChannels,
)
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

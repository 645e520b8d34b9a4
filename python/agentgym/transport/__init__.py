"""Actor <-> learner transport: typed messages (``wire``) over ZeroMQ sockets (``channels``)."""

from agentgym.transport.channels import (
    ActorChannels,
    AsyncActorChannels,
    ChannelStats,
    Endpoints,
    LearnerChannels,
    WeightFetchError,
    WeightSnapshot,
    WeightStore,
)
from agentgym.transport.wire import (
    SCHEMA_VERSION,
    Control,
    TensorBlob,
    Trajectory,
    WeightReply,
    WeightRequest,
    WireError,
)

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

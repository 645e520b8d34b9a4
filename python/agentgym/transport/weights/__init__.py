"""The weights of the policy on their way from the learner to the actors' engines, in one place.

- ``protocol``: the messages, what the learner serves (``WeightStore``) and how an actor
  fetches it chunk by chunk; numpy and msgpack only, no torch, no sockets.
- ``tensors``: torch tensors <-> ``TensorBlob``s, safetensors files written and read one
  tensor at a time (needs torch).
- ``paths``: the ``learner.weights_via`` paths (``stream``, ``file``), each with its learner
  end and its actor end, and ``load_newer``, how an actor's engine takes them (needs torch).

The names below are the protocol's, so importing this package does not import torch; the
channels (``agentgym.transport.learner_channels`` and ``actor_channels``) carry the protocol's
messages over ZeroMQ.
"""

from agentgym.transport.weights.protocol import (
    TensorBlob,
    WeightFetch,
    WeightFetchError,
    WeightReply,
    WeightRequest,
    WeightSnapshot,
    WeightStore,
    chunk_stream,
)

__all__ = [
    "TensorBlob",
    "WeightFetch",
    "WeightFetchError",
    "WeightReply",
    "WeightRequest",
    "WeightSnapshot",
    "WeightStore",
    "chunk_stream",
]

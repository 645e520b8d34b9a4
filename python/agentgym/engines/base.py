"""The engine contract: batched async generation with behaviour log-probs, versioned weights.

An engine turns token-id prompts into sampled continuations. For every sampled token it returns
the log-probability under the distribution it actually sampled from (logits divided by the
temperature, then top-k and top-p truncation, renormalised): the behaviour policy mu of the
learner's importance correction. Weights are replaced in place by `load_weights` (a whole state
dict) or, in an engine that ``streams_weights``, by `load_weights_stream` (tensors as they arrive),
which also set the policy version that later generations report.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch of continuations.

    Recommended for RL: ``top_k=0, top_p=1.0`` so that the behaviour distribution and the
    learner's softmax(logits / temperature) have the same support; with truncation on, the
    learner must apply the same mask (`agentgym.engines.sampling.processed_logprobs`).
    """

    max_new_tokens: int = 128
    """Upper bound on generated tokens per prompt (the stop token counts)."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding (log-probs are then 0)."""
    top_k: int = 0
    """Keep the k most likely tokens (ties at the k-th value kept); 0 disables."""
    top_p: float = 1.0
    """Keep the smallest most-likely set of tokens with mass >= top_p; 1.0 disables."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra stop tokens on top of the engine's own (EOS, <|im_end|>)."""
    stop: tuple[str, ...] = ()
    """Stop strings: a row ends with the token that completes one of them (finish 'stop');
    the generation keeps that token, text after the string in it included. The actor sets them
    from the env family (``EnvFamily.stop``) and cuts every reply after its first one itself
    (``agentgym.agent.stops``), so an engine that samples further only wastes time."""
    seed: int | None = None
    """Seed of the first prompt of a call; prompt i uses seed + i. None: the engine's own stream."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")


@dataclass
class Generation:
    """One sampled continuation."""

    token_ids: list[int]
    """Sampled tokens, exactly as sampled; ends with the stop token when finish_reason == 'stop'."""
    logprobs: list[float]
    """Behaviour log-probability of each sampled token (same length as token_ids)."""
    finish_reason: FinishReason
    """'stop' when a stop token was sampled or a stop string completed, 'length' when the token
    budget ran out (``max_new_tokens``, or the model's context for a long prompt)."""
    policy_version: int = 0
    """Version of the weights that produced every token of this generation."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Optional engine figures (e.g. batch size the request was served in)."""


@runtime_checkable
class Engine(Protocol):
    """What the actor needs from an inference backend."""

    @property
    def version(self) -> int:
        """Policy version of the weights currently loaded."""
        ...

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        """Sample one continuation per prompt; calls from many coroutines are batched together."""
        ...

    streams_weights: bool
    """Whether ``load_weights_stream`` takes the weights as they arrive. The actor streams the
    learner's chunks (or the file it names) into such an engine; into another it loads a
    whole state dict fetched first, and cannot take weights served as a file."""

    async def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Replace the weights in place (between batches) and set `version`."""
        ...

    async def load_weights_stream(
        self, tensors: AsyncIterator[tuple[str, Any]], version: int
    ) -> None:
        """Load (name, tensor) pairs as they arrive, each dropped once copied, and set
        `version` (only where ``streams_weights``). A stream that breaks off leaves version
        -1, so that the next fetch asks for every tensor."""
        ...

    async def close(self) -> None:
        """Stop background work; pending requests fail."""
        ...

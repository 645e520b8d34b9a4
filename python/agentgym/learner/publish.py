"""Weight publishing: the policy's weights at a version, gathered from every rank and served to
the actors by rank 0's channels, along the path ``learner.weights_via`` names
(``agentgym.transport.weights.paths``: what rank 0 makes of the tensors and how it is served).

Each tensor is gathered from the shards one at a time (under torchrun a collective every rank
takes part in, ``Command.WEIGHTS``) and kept on rank 0 only, so at most one whole tensor is in
flight besides what the path has made of the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch import Tensor, nn

from agentgym.learner.distributed import Command, Dist, Ranks, full_state_dict_items
from agentgym.transport.learner_channels import LearnerChannels
from agentgym.transport.weights.paths import weight_path


class Publisher:
    """Publishes ``model``'s weights along the path ``via`` names (files, if any, in
    ``directory``: ``learner.weights_dir``)."""

    def __init__(self, model: nn.Module, dist: Dist, via: str, directory: str | None):
        self.model, self.dist = model, dist
        self.path = weight_path(via, directory)

    def serve(self, channels: LearnerChannels, version: int, ranks: Ranks) -> None:
        """Rank 0: gather the weights of ``version`` on every rank and serve them from now on."""
        self.path.serve(channels.weights, version, lambda: ranks.lead(Command.WEIGHTS, version))

    def gather(self, version: int) -> Any:
        """Every rank (``Command.WEIGHTS``'s handler): the weights of ``version`` as the path
        makes them on rank 0 (blobs, a file's path); None on the other ranks, which only take
        part in the gathers."""
        items = self._state_items()
        if not self.dist.is_main:
            for _ in items:
                pass
            return None
        header = [(name, t.dtype, tuple(t.shape)) for name, t in self.model.state_dict().items()]
        return self.path.make(version, header, items)

    def _state_items(self) -> Iterator[tuple[str, Tensor]]:
        """(name, whole tensor) of the policy's state dict, one tensor at a time: under
        torchrun each is gathered from the shards (a collective) and kept on rank 0 only, so
        it is converted before the next is gathered."""
        if not self.dist.sharded:
            yield from self.model.state_dict().items()
            return
        yield from full_state_dict_items(self.model, keep=self.dist.is_main)

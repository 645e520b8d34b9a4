"""Weight publishing: the policy's weights at a version, gathered from every rank and served to
the actors by rank 0's channels, the way ``learner.weights_via`` names.

- ``stream``: the weights become wire blobs that the channels' weight socket serves in bounded
  chunks; the previous snapshot is retired first, so that two are never in memory at once.
- ``file``: rank 0 writes ``<weights_dir>/v<version>.safetensors`` tensor by tensor and the
  channels serve its path; actors read it from a filesystem they share with the learner. The
  newest two files are kept (an actor may still be reading the older one).

Either way each tensor is gathered from the shards one at a time (under torchrun a collective
every rank takes part in, ``Command.WEIGHTS``) and kept on rank 0 only, so at most one whole
tensor is in flight besides what has been converted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from torch import Tensor, nn

from agentgym.learner.distributed import Command, Dist, Ranks, full_state_dict_items
from agentgym.learner.weights import state_dict_to_blobs, write_safetensors
from agentgym.transport.channels import LearnerChannels
from agentgym.transport.wire import TensorBlob

Gathered = list[TensorBlob] | Path | None
"""What ``Publisher.gather`` gives: rank 0's blobs (stream) or file (file); None on other ranks."""


class Publisher:
    """Publishes ``model``'s weights the way ``via`` names (``"file"``; else ``"stream"``)."""

    def __init__(self, model: nn.Module, dist: Dist, via: str, directory: str | None):
        self.model, self.dist, self.via = model, dist, via
        self.directory = Path(directory or "weights")
        """Where ``file`` writes (``learner.weights_dir``)."""

    def serve(self, channels: LearnerChannels, version: int, ranks: Ranks) -> None:
        """Rank 0: gather the weights of ``version`` on every rank and serve them from now on."""
        if self.via == "file":
            channels.publish_weights_file(version, str(ranks.lead(Command.WEIGHTS, version)))
        else:
            channels.retire_weights()  # never two snapshots in memory at once
            channels.publish_weights(version, ranks.lead(Command.WEIGHTS, version))

    def gather(self, version: int) -> Gathered:
        """Every rank (``Command.WEIGHTS``'s handler): the weights of ``version``, ready to
        serve on rank 0."""
        return self._write_file(version) if self.via == "file" else self._blobs()

    def _blobs(self) -> list[TensorBlob] | None:
        items = self._state_items()
        if not self.dist.is_main:
            for _ in items:
                pass
            return None
        return state_dict_to_blobs(items)

    def _write_file(self, version: int) -> Path | None:
        """``<directory>/v<version>.safetensors`` written tensor by tensor (rank 0 writes,
        every rank gathers); older files but the previous are removed."""
        path = self.directory / f"v{version:08d}.safetensors"
        header = [(name, t.dtype, tuple(t.shape)) for name, t in self.model.state_dict().items()]
        tensors = (t for _, t in self._state_items())
        if not self.dist.is_main:
            for _ in tensors:
                pass
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        write_safetensors(path, header, tensors)
        for old in sorted(self.directory.glob("v*.safetensors"))[:-2]:
            old.unlink(missing_ok=True)
        return path

    def _state_items(self) -> Iterator[tuple[str, Tensor]]:
        """(name, whole tensor) of the policy's state dict, one tensor at a time: under
        torchrun each is gathered from the shards (a collective) and kept on rank 0 only, so
        it is converted before the next is gathered."""
        if not self.dist.sharded:
            yield from self.model.state_dict().items()
            return
        yield from full_state_dict_items(self.model, keep=self.dist.is_main)

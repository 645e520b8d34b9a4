"""The weight paths: how the policy's weights of a version travel from the learner to an actor's
engine. ``learner.weights_via`` names one of ``WEIGHT_PATHS``:

- ``stream``: the weights become wire blobs that the learner's weight socket serves in bounded
  chunks; the previous snapshot is retired first, so that two are never in memory at once.
- ``file``: rank 0 writes ``<weights_dir>/v<version>.safetensors`` tensor by tensor and the
  learner serves its path; actors read it from a filesystem they share with the learner. The
  newest two files are kept (an actor may still be reading the older one).

Each path has a learner end, what rank 0 makes of the policy's tensors as they are gathered one
at a time (``make``; ``agentgym.learner.publish`` does the gathering, a collective under
torchrun) and how the ``WeightStore`` serves it (``serve``), and an actor end: whether a reply
is of this path (``carries``) and the (name, tensor) pairs it holds (``tensors``). An actor
follows the path of the replies it gets (``stream_tensors``); ``load_newer`` is its one choice
of how its engine takes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from agentgym.transport.weights.protocol import (
    TensorBlob,
    WeightFetchError,
    WeightReply,
    WeightStore,
)
from agentgym.transport.weights.tensors import (
    TensorAssembler,
    blobs_to_state_dict,
    read_safetensors,
    state_dict_to_blobs,
    write_safetensors,
)

if TYPE_CHECKING:
    from agentgym.transport.actor_channels import AsyncActorChannels

Header = Sequence[tuple[str, torch.dtype, tuple[int, ...]]]
"""(name, dtype, shape) of every tensor of the policy, in state-dict order."""
Items = Iterator[tuple[str, torch.Tensor]]
"""(name, whole tensor) of the policy, in state-dict order, each gathered only when its turn
comes."""


class StreamWeights:
    """``stream``: wire blobs served in chunks of about ``transport.weight_chunk_bytes``."""

    name = "stream"

    def __init__(self, directory: str | None = None):
        """``directory``: unused (the blobs stay in memory)."""

    def make(self, version: int, header: Header, items: Items) -> list[TensorBlob]:
        """Rank 0: CPU copies of the tensors as blobs."""
        return state_dict_to_blobs(items)

    def serve(self, store: WeightStore, version: int, gather: Callable[[], Any]) -> None:
        """Retire the served snapshot (never two in memory at once), then serve the new one."""
        store.retire()
        store.publish(version, gather())

    @staticmethod
    def carries(reply: WeightReply) -> bool:
        """Whether ``reply`` is a chunk of blobs (it names no file)."""
        return reply.path is None

    @staticmethod
    async def tensors(
        first: WeightReply, rest: AsyncIterator[WeightReply]
    ) -> AsyncIterator[tuple[str, torch.Tensor]]:
        """Whole tensors as soon as each is complete (at most the tensors being pieced together
        are held); raises ValueError if pieces are missing at the end."""
        assembler = TensorAssembler()
        for blob in first.tensors:
            if (item := assembler.add(blob)) is not None:
                yield item
        async for reply in rest:
            for blob in reply.tensors:
                if (item := assembler.add(blob)) is not None:
                    yield item
        assembler.check_done()


class FileWeights:
    """``file``: a safetensors file per version on a filesystem the actors share."""

    name = "file"

    def __init__(self, directory: str | None = None):
        """``directory``: where the files go (``learner.weights_dir``)."""
        self.directory = Path(directory or "weights")

    def make(self, version: int, header: Header, items: Items) -> Path:
        """Rank 0: ``<directory>/v<version>.safetensors``, written tensor by tensor; older files
        but the previous are removed."""
        path = self.directory / f"v{version:08d}.safetensors"
        self.directory.mkdir(parents=True, exist_ok=True)
        write_safetensors(path, header, (t for _, t in items))
        for old in sorted(self.directory.glob("v*.safetensors"))[:-2]:
            old.unlink(missing_ok=True)
        return path

    def serve(self, store: WeightStore, version: int, gather: Callable[[], Any]) -> None:
        """Serve the path of the new file (the previous one is served while it is written)."""
        store.publish_file(version, str(gather()))

    @staticmethod
    def carries(reply: WeightReply) -> bool:
        """Whether ``reply`` names a file."""
        return reply.path is not None

    @staticmethod
    async def tensors(
        first: WeightReply, rest: AsyncIterator[WeightReply]
    ) -> AsyncIterator[tuple[str, torch.Tensor]]:
        """The file's tensors, one at a time (memory-mapped)."""
        assert first.path is not None
        for item in read_safetensors(first.path):
            yield item


WEIGHT_PATHS: dict[str, type[StreamWeights] | type[FileWeights]] = {
    p.name: p for p in (StreamWeights, FileWeights)
}
"""The weight paths by their ``learner.weights_via`` name."""


def weight_path(via: str, directory: str | None = None) -> StreamWeights | FileWeights:
    """The learner's end of the path ``via`` names (files, if any, in ``directory``)."""
    if via not in WEIGHT_PATHS:
        raise ValueError(f"unknown weight path {via!r}; known: {', '.join(WEIGHT_PATHS)}")
    return WEIGHT_PATHS[via](directory)


def stream_tensors(
    first: WeightReply, rest: AsyncIterator[WeightReply]
) -> AsyncIterator[tuple[str, torch.Tensor]]:
    """Whole (name, tensor) pairs from a fetch's replies (what an engine's
    ``load_weights_stream`` takes), the way the first reply's path carries them."""
    path = next(p for p in WEIGHT_PATHS.values() if p.carries(first))
    return path.tensors(first, rest)


class WeightTaker(Protocol):
    """What ``load_newer`` needs of an engine; ``agentgym.engines.base.Engine`` has it (named
    here so that the transport imports nothing of the engines above it)."""

    streams_weights: bool

    @property
    def version(self) -> int:
        """Policy version of the weights currently loaded."""
        ...

    async def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Replace the weights with a whole state dict."""
        ...

    async def load_weights_stream(
        self, tensors: AsyncIterator[tuple[str, Any]], version: int
    ) -> None:
        """Load (name, tensor) pairs as they arrive."""
        ...


async def load_newer(engine: WeightTaker, channels: AsyncActorChannels) -> int | None:
    """Fetch the learner's weights newer than ``engine``'s and load them: streamed as they
    arrive into an engine that ``streams_weights`` (one chunk held at a time, plus a tensor
    being pieced together), else fetched whole first (served as blobs only). The version
    loaded, or None when there was nothing newer; raises ``WeightFetchError`` when the fetch
    fails."""
    have = engine.version
    if engine.streams_weights:
        chunks = channels.weight_chunks(have)
        first = await anext(chunks, None)
        if first is None:
            return None
        await engine.load_weights_stream(stream_tensors(first, chunks), first.version)
        return first.version
    snapshot = await channels.fetch_weights(have)
    if snapshot is None or snapshot.version <= have:
        return None
    if snapshot.path is not None:
        raise WeightFetchError(
            f"the learner serves weights as files ({snapshot.path}); this engine cannot "
            "stream them in (streams_weights is false)"
        )
    await engine.load_weights(blobs_to_state_dict(snapshot.tensors), snapshot.version)
    return snapshot.version

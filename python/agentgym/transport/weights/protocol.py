"""The weight protocol, without torch and without sockets: the messages and their encoding,
what the learner serves (``WeightStore``) and how an actor asks for it chunk by chunk
(``WeightFetch``, ``chunk_stream``).

An actor asks for weights newer than the version it has (``WeightRequest``); the learner
answers with chunk 0 of its latest snapshot and how many chunks it has (``WeightReply``), and
the actor asks for each next chunk naming that snapshot's version. A snapshot the learner has
replaced meanwhile is answered with ``"restart"``. Chunks hold ``TensorBlob``s of about
``chunk_bytes``; a larger tensor travels in pieces. A version served as a file carries its path
in a single chunk without tensors. The messages speak the wire schema
(``agentgym.transport.wire.SCHEMA_VERSION``): a map with the version and a kind, tensor bytes
in frames of their own.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from agentgym.transport.wire import (
    ITEMSIZES,
    NUMPY_DTYPES,
    SCHEMA_VERSION,
    WireError,
    message_field,
    unpack_message,
)

# --------------------------------------------------------------------------------------------
# Messages


@dataclass(frozen=True)
class WeightRequest:
    """Actor -> learner: send chunk ``chunk`` of weights newer than ``have_version``.

    For ``chunk > 0``, ``version`` names the snapshot being fetched; if the learner no longer
    holds it, it answers with status ``"restart"`` and the actor starts over at chunk 0.
    """

    request_id: int
    have_version: int
    chunk: int = 0
    version: int | None = None


@dataclass(frozen=True, eq=False)
class TensorBlob:
    """One named tensor, or a piece of one, as raw little-endian bytes (``data`` may be any
    buffer).

    A tensor larger than a weight chunk travels in pieces: each names the whole tensor's
    ``shape`` and holds the bytes from ``offset`` on (whole elements); ``offset`` 0 with every
    byte is the whole tensor.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: Any
    offset: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in ITEMSIZES:
            raise WireError(f"tensor {self.name!r}: unknown dtype {self.dtype!r}")
        size = ITEMSIZES[self.dtype]
        want = size * math.prod(self.shape)
        got = memoryview(self.data).nbytes
        if self.offset == 0 and got == want:
            return
        if self.offset < 0 or self.offset % size or got % size or self.offset + got > want:
            raise WireError(
                f"tensor {self.name!r}: {got} bytes at offset {self.offset} for shape "
                f"{self.shape} {self.dtype}"
            )

    @property
    def nbytes(self) -> int:
        """Size of the whole tensor in bytes."""
        return ITEMSIZES[self.dtype] * math.prod(self.shape)

    @property
    def whole(self) -> bool:
        """Whether this blob holds the whole tensor (not a piece)."""
        return self.offset == 0 and memoryview(self.data).nbytes == self.nbytes

    def to_numpy(self) -> np.ndarray:
        """The tensor as a read-only numpy view (not for bfloat16, which numpy lacks)."""
        if self.dtype == "bfloat16":
            raise WireError(f"tensor {self.name!r}: bfloat16 has no numpy dtype; use torch")
        return np.frombuffer(self.data, dtype=NUMPY_DTYPES[self.dtype]).reshape(self.shape)


@dataclass(frozen=True, eq=False)
class WeightReply:
    """Learner -> actor: one chunk of a versioned state dict, or a status without tensors.

    status: ``"ok"`` (tensors of chunk ``chunk`` of ``num_chunks``), ``"up_to_date"`` (the actor
    already has ``version``), ``"none"`` (no weights published yet), ``"restart"`` (the snapshot
    asked for is gone; fetch chunk 0 again).

    ``path``: the learner wrote this version to a safetensors file there (a filesystem the
    actors share) instead of serving chunks; the reply then carries no tensors.
    """

    request_id: int
    status: str
    version: int
    chunk: int = 0
    num_chunks: int = 0
    tensors: tuple[TensorBlob, ...] = ()
    path: str | None = None


REPLY_STATUSES = frozenset({"ok", "up_to_date", "none", "restart"})


# --------------------------------------------------------------------------------------------
# Encoding


def encode_weight_request(req: WeightRequest) -> bytes:
    """Encode a weight request."""
    return msgpack.packb(
        {
            "v": SCHEMA_VERSION,
            "kind": "weights_request",
            "request_id": req.request_id,
            "have_version": req.have_version,
            "chunk": req.chunk,
            "version": req.version,
        },
        use_bin_type=True,
    )


def encode_weight_reply(reply: WeightReply) -> list[Any]:
    """Encode a weight reply as frames: a msgpack header, then one raw frame per tensor.

    The tensor bytes are passed through untouched (zero-copy when zmq sends with copy=False).
    """
    header = {
        "v": SCHEMA_VERSION,
        "kind": "weights",
        "request_id": reply.request_id,
        "status": reply.status,
        "version": reply.version,
        "chunk": reply.chunk,
        "num_chunks": reply.num_chunks,
        **({"path": reply.path} if reply.path is not None else {}),
        "tensors": [_blob_header(t) for t in reply.tensors],
    }
    return [msgpack.packb(header, use_bin_type=True), *(t.data for t in reply.tensors)]


def _blob_header(t: TensorBlob) -> dict[str, Any]:
    head: dict[str, Any] = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
    if not t.whole:
        head["offset"] = t.offset
    return head


# --------------------------------------------------------------------------------------------
# Decoding


def decode_weight_request(buf: Any) -> WeightRequest:
    """Decode a weight request; raises WireError if anything is off."""
    msg = unpack_message(buf, "weights_request")
    req = WeightRequest(
        request_id=message_field(msg, "request_id", int),
        have_version=message_field(msg, "have_version", int),
        chunk=message_field(msg, "chunk", int),
        version=message_field(msg, "version", (int, type(None))),
    )
    if req.chunk < 0 or (req.chunk > 0 and req.version is None):
        raise WireError("weights_request: chunk > 0 needs the snapshot version")
    return req


def decode_weight_reply(frames: Sequence[Any]) -> WeightReply:
    """Decode the frames of a weight reply; raises WireError if anything is off."""
    if not frames:
        raise WireError("weights: empty reply")
    msg = unpack_message(frames[0], "weights")
    status = message_field(msg, "status", str)
    if status not in REPLY_STATUSES:
        raise WireError(f"weights: unknown status {status!r}")
    metas = message_field(msg, "tensors", list)
    if len(metas) != len(frames) - 1:
        raise WireError(f"weights: header names {len(metas)} tensors, got {len(frames) - 1} frames")
    tensors = []
    for meta, data in zip(metas, frames[1:], strict=True):
        if not isinstance(meta, dict):
            raise WireError("weights: tensor header is not a map")
        shape = message_field(meta, "shape", list)
        if not all(isinstance(s, int) and s >= 0 for s in shape):
            raise WireError(f"weights: bad shape {shape!r}")
        offset = meta.get("offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise WireError(f"weights: bad offset {offset!r}")
        name, dtype = message_field(meta, "name", str), message_field(meta, "dtype", str)
        tensors.append(TensorBlob(name, dtype, tuple(shape), data, offset))
    return WeightReply(
        request_id=message_field(msg, "request_id", int),
        status=status,
        version=message_field(msg, "version", int),
        chunk=message_field(msg, "chunk", int),
        num_chunks=message_field(msg, "num_chunks", int),
        path=message_field(msg, "path", (str, type(None))) if "path" in msg else None,
        tensors=tuple(tensors),
    )


# --------------------------------------------------------------------------------------------
# The learner's side: the snapshot it serves


class WeightStore:
    """The latest published weights, split into chunks; thread-safe.

    Tensors are held as raw bytes (``TensorBlob``); the learner converts its state dict with
    ``agentgym.transport.weights.tensors.state_dict_to_blobs``.
    """

    def __init__(self, chunk_bytes: int = 64 << 20):
        self._chunk_bytes = chunk_bytes
        self._lock = threading.Lock()
        self._version: int | None = None
        self._chunks: list[tuple[TensorBlob, ...]] = []
        self._path: str | None = None

    def publish(self, version: int, tensors: Sequence[TensorBlob]) -> None:
        """Replace the served snapshot with ``tensors`` at ``version``."""
        chunks = _split_chunks(tensors, self._chunk_bytes)
        with self._lock:
            self._version, self._chunks, self._path = version, chunks, None

    def publish_file(self, version: int, path: str) -> None:
        """Serve ``version`` as a reference to the safetensors file at ``path``."""
        with self._lock:
            self._version, self._chunks, self._path = version, [()], path

    def retire(self) -> None:
        """Stop serving the current snapshot (its memory is freed once no reply holds it):
        the learner calls this before building the next one, so it never holds two. Actors
        asking meanwhile hear "none" (or "restart" mid-fetch) and ask again later."""
        with self._lock:
            self._version, self._chunks, self._path = None, [], None

    @property
    def version(self) -> int | None:
        """Version of the served snapshot, None before the first publish."""
        with self._lock:
            return self._version

    def answer(self, req: WeightRequest) -> WeightReply:
        """The reply to one request (see ``WeightReply`` for the statuses)."""
        with self._lock:
            version, chunks, path = self._version, self._chunks, self._path
        rid = req.request_id
        if version is None:
            return WeightReply(rid, "none", -1)
        if req.chunk == 0 and req.have_version >= version:
            return WeightReply(rid, "up_to_date", version)
        if req.chunk > 0 and req.version != version or req.chunk >= len(chunks):
            return WeightReply(rid, "restart", version)
        return WeightReply(rid, "ok", version, req.chunk, len(chunks), chunks[req.chunk], path)


def _split_chunks(tensors: Sequence[TensorBlob], chunk_bytes: int) -> list[tuple[TensorBlob, ...]]:
    """Consecutive tensors in chunks of at most ``chunk_bytes`` bytes; a tensor larger than
    that is cut into pieces of whole elements (views of its bytes, no copies)."""
    chunks: list[tuple[TensorBlob, ...]] = []
    current: list[TensorBlob] = []
    size = 0
    for t in tensors:
        for piece in _pieces(t, chunk_bytes):
            nbytes = memoryview(piece.data).nbytes
            if current and size + nbytes > chunk_bytes:
                chunks.append(tuple(current))
                current, size = [], 0
            current.append(piece)
            size += nbytes
    chunks.append(tuple(current))
    return chunks


def _pieces(t: TensorBlob, chunk_bytes: int) -> list[TensorBlob]:
    raw = memoryview(t.data).cast("B")
    if raw.nbytes <= chunk_bytes:
        return [t]
    itemsize = t.nbytes // max(math.prod(t.shape), 1)
    step = max(chunk_bytes // itemsize, 1) * itemsize
    return [
        TensorBlob(t.name, t.dtype, t.shape, raw[start : start + step], start)
        for start in range(0, raw.nbytes, step)
    ]


# --------------------------------------------------------------------------------------------
# The actor's side: one fetch


@dataclass
class WeightSnapshot:
    """A complete state dict fetched from the learner, as raw tensors."""

    version: int
    tensors: list[TensorBlob] = field(default_factory=list)
    path: str | None = None
    """Set when the learner serves this version as a safetensors file (no tensors then)."""


class WeightFetchError(RuntimeError):
    """The learner did not answer a weight request in time, or answered nonsense."""


_request_ids = itertools.count(1)


class WeightFetch:
    """The chunk-by-chunk protocol of one weight fetch, without any I/O."""

    def __init__(self, have_version: int):
        self.have_version = have_version
        self.result: WeightSnapshot | None = None
        self._partial = WeightSnapshot(version=-1)
        self._chunk, self._num_chunks, self._done = 0, 1, False

    def next_request(self) -> WeightRequest | None:
        """The next request to send, or None when the fetch is over."""
        if self._done:
            return None
        version = self._partial.version if self._chunk else None
        return WeightRequest(next(_request_ids), self.have_version, self._chunk, version)

    def feed(self, reply: WeightReply) -> None:
        """Advance with the learner's reply to the last request."""
        if reply.status in ("none", "up_to_date"):
            self._done = True
        elif reply.status == "restart":
            self._partial, self._chunk, self._num_chunks = WeightSnapshot(version=-1), 0, 1
        else:
            self._partial.version, self._num_chunks = reply.version, reply.num_chunks
            self._partial.path = reply.path
            self._partial.tensors.extend(reply.tensors)
            self._chunk += 1
            if self._chunk >= self._num_chunks:
                self.result, self._done = self._partial, True


async def chunk_stream(
    send: Callable[[WeightRequest, float], Awaitable[None]],
    receive: Callable[[WeightRequest, float], Awaitable[WeightReply]],
    have_version: int,
    timeout_s: float,
) -> AsyncIterator[WeightReply]:
    """The chunks of the newest weights after ``have_version``, one at a time (nothing when
    there are none), over a link that ``send``s a request and ``receive``s its reply by a
    deadline (monotonic). While the caller applies one chunk the next is on its way, so at most
    two chunks are held here. ``timeout_s`` bounds each request.

    Raises ``WeightFetchError`` when the learner does not answer in time (``receive`` raises
    it) or replaces the snapshot mid-stream (the caller starts a new stream).
    """
    first = WeightRequest(next(_request_ids), have_version)
    deadline = time.monotonic() + timeout_s
    await send(first, deadline)
    reply = await receive(first, deadline)
    if reply.status in ("none", "up_to_date"):
        return
    version, count = reply.version, reply.num_chunks
    while True:
        following = None
        if reply.chunk + 1 < count:  # ask for the next chunk before handing this one out
            following = WeightRequest(next(_request_ids), have_version, reply.chunk + 1, version)
            await send(following, time.monotonic() + timeout_s)
        yield reply
        if following is None:
            return
        reply = await receive(following, time.monotonic() + timeout_s)
        if reply.status != "ok" or reply.chunk != following.chunk:
            raise WeightFetchError(f"weights replaced by version {reply.version} mid-fetch")

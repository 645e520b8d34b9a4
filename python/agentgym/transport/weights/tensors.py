"""torch tensors <-> ``TensorBlob``s (the form the weight socket serves), and safetensors files
written and read one tensor at a time.

Tensors travel as raw little-endian bytes with their dtype name and shape; bfloat16 is kept
as is (torch reinterprets the bytes), so actors load exactly the learner's values.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from agentgym.transport.weights.protocol import TensorBlob

_TORCH_TO_WIRE = {
    torch.bool: "bool",
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}
_WIRE_TO_TORCH = {v: k for k, v in _TORCH_TO_WIRE.items()}

if sys.byteorder != "little":  # raw bytes on the wire are little-endian by contract
    raise ImportError("agentgym.transport.weights.tensors assumes a little-endian host")


def state_dict_to_blobs(
    state_dict: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
) -> list[TensorBlob]:
    """CPU copies of every tensor as ``TensorBlob`` (names in the state dict's order); takes a
    state dict or its (name, tensor) items, consumed one at a time."""
    items = state_dict.items() if isinstance(state_dict, Mapping) else state_dict
    blobs = []
    for name, tensor in items:
        t = tensor.detach().to("cpu", copy=True).contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""
        blobs.append(TensorBlob(name, _TORCH_TO_WIRE[t.dtype], tuple(t.shape), raw))
    return blobs


def blobs_to_state_dict(blobs: Iterable[TensorBlob]) -> dict[str, torch.Tensor]:
    """Tensors rebuilt from blobs, pieces joined (copies, so they outlive the received
    frames); raises ValueError if a tensor's pieces do not add up."""
    assembler = TensorAssembler()
    out = dict(item for b in blobs if (item := assembler.add(b)) is not None)
    assembler.check_done()
    return out


def read_safetensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) from a safetensors file, one tensor at a time (memory-mapped)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            yield name, f.get_tensor(name)


def write_safetensors(
    path: str | Path,
    header: Sequence[tuple[str, torch.dtype, tuple[int, ...]]],
    tensors: Iterable[torch.Tensor],
) -> None:
    """Write a safetensors file one tensor at a time: ``header`` lists (name, dtype, shape)
    of every tensor in order, ``tensors`` yields them in that order (each may be produced, by
    a gather say, only when its turn comes). Written to a temporary name and renamed, so a
    reader never sees half a file."""
    import json
    import os

    meta, offset = {}, 0
    for name, dtype, shape in header:
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        meta[name] = {"dtype": _SAFETENSORS_DTYPES[dtype], "shape": list(shape),
                      "data_offsets": [offset, offset + size]}  # fmt: skip
        offset += size
    head = json.dumps(meta, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format aligns the data to 8 bytes
    tmp = Path(f"{path}.tmp")
    with open(tmp, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for (name, dtype, shape), t in zip(header, tensors, strict=True):
            if t.dtype != dtype or tuple(t.shape) != tuple(shape):
                raise ValueError(f"{name}: {t.dtype} {tuple(t.shape)}, header says {dtype} {shape}")
            data = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            f.write(data.numpy().data if data.numel() else b"")  # no copy of the bytes
    os.replace(tmp, path)


_SAFETENSORS_DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
    torch.int32: "I32", torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float32: "F32", torch.float64: "F64",
}  # fmt: skip


class TensorAssembler:
    """Whole tensors from a stream of blobs, some of which may be pieces of one tensor.

    A whole blob becomes a tensor at once; pieces are copied into a buffer of the tensor's
    size until every byte has arrived. At most the tensors being pieced together are held.
    """

    def __init__(self) -> None:
        self._partial: dict[str, tuple[TensorBlob, bytearray, int]] = {}

    def add(self, blob: TensorBlob) -> tuple[str, torch.Tensor] | None:
        """(name, tensor) once ``blob`` completes a tensor, else None."""
        if blob.whole:
            return blob.name, _tensor(bytearray(blob.data), blob)
        first, buf, filled = self._partial.get(blob.name) or (blob, bytearray(blob.nbytes), 0)
        if (first.dtype, first.shape) != (blob.dtype, blob.shape):
            raise ValueError(f"pieces of {blob.name!r} disagree on dtype or shape")
        piece = memoryview(blob.data).cast("B")
        buf[blob.offset : blob.offset + piece.nbytes] = piece
        filled += piece.nbytes
        if filled < len(buf):
            self._partial[blob.name] = (first, buf, filled)
            return None
        self._partial.pop(blob.name, None)
        return blob.name, _tensor(buf, blob)

    def check_done(self) -> None:
        """Raise ValueError if some tensor still misses pieces."""
        if self._partial:
            raise ValueError(f"incomplete tensors: {sorted(self._partial)[:5]}")


def _tensor(buf: bytearray, blob: TensorBlob) -> torch.Tensor:
    raw = (
        torch.frombuffer(buf, dtype=torch.uint8) if len(buf) else torch.empty(0, dtype=torch.uint8)
    )
    return raw.view(_WIRE_TO_TORCH[blob.dtype]).reshape(blob.shape)

"""Model weights <-> ``TensorBlob`` lists, the form the weight channel serves.

Tensors travel as raw little-endian bytes with their dtype name and shape; bfloat16 is kept
as is (torch reinterprets the bytes), so actors load exactly the learner's values.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

import torch

from agentgym.transport.wire import TensorBlob

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
    raise ImportError("agentgym.learner.weights assumes a little-endian host")


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
    """Tensors rebuilt from blobs (copies, so they outlive the received frames)."""
    out = {}
    for b in blobs:
        raw = torch.frombuffer(bytearray(b.data), dtype=torch.uint8)
        out[b.name] = raw.view(_WIRE_TO_TORCH[b.dtype]).reshape(b.shape)
    return out

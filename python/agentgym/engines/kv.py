"""The decode loop's KV cache and weights for the transformers engine.

With transformers' defaults a decode step of SmolLM2-135M at batch 16 took 0.21 s per token at
context 100 and 1.2 s at 1,800 on the 2-core box. Three things cut that (the third is
``agentgym.attention``'s one-token kernel):

- a slab cache (``slab_from_layers``, ``slab_from_rows``): every layer's keys and values in
  one preallocated buffer per batch, sized to the prompt plus the reply budget, in one dtype,
  written in place. transformers'
  ``DynamicCache`` concatenates the whole cache again at every token step, and under bf16
  autocast it holds the keys in float32 (RoPE's cos/sin are float32) and the values in bf16.
- ``cast_linear_weights``: the linear layers' weights held in bf16. Under autocast every
  linear layer casts its float32 weight to bf16 again at every forward call (the lm head
  alone is 28M values for SmolLM2); holding them cast gives bit-identical outputs (autocast
  rounds the same way) at 0.6x the time of a short-context step.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor


class SlabError(RuntimeError):
    """A write past a slab's capacity (the caller sized it too small)."""


class _SlabLayer:
    """One decoder layer's keys and values: [rows, kv_heads, capacity, head_dim] buffers of one
    dtype; the first ``length`` slots are filled. ``update`` writes new slots in place and
    returns views of the filled ones, which is all attention reads."""

    def __init__(self, keys: Tensor, values: Tensor, length: int):
        self._k, self._v, self.length = keys, values, length
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs):
        end = self.length + key_states.shape[2]
        if end > self._k.shape[2]:
            raise SlabError(f"KV slab full: {end} slots needed, {self._k.shape[2]} allocated")
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return -1

    def batch_select_indices(self, indices: Tensor) -> None:
        """Keep only the rows ``indices``, compacted in place into the first rows (only the
        filled slots move)."""
        n = len(indices)
        self._k[:n, :, : self.length] = self._k[indices, :, : self.length]
        self._v[:n, :, : self.length] = self._v[indices, :, : self.length]
        self._k, self._v = self._k[:n], self._v[:n]
        self._views()


@functools.cache
def _slab_layer_class() -> type:
    """``_SlabLayer`` as a transformers cache layer (imported on first use)."""
    from transformers.cache_utils import DynamicLayer

    return type("SlabLayer", (_SlabLayer, DynamicLayer), {})


def _cache(layers: list[_SlabLayer]):
    from transformers.cache_utils import Cache

    return Cache(layers=layers)


def slab_from_layers(layers: Sequence[tuple[Tensor, Tensor]], room: int, dtype: torch.dtype):
    """A transformers ``Cache`` holding ``layers`` ((keys, values) per decoder layer, each
    [rows, kv_heads, length, head_dim], any dtype) in slabs of ``dtype``, with ``room`` free
    slots after them for the tokens still to come."""
    layer = _slab_layer_class()
    out = []
    for k, v in layers:
        rows, heads, length, dim = k.shape
        keys = k.new_empty((rows, heads, length + room, dim), dtype=dtype)
        values = v.new_empty((rows, heads, length + room, v.shape[-1]), dtype=dtype)
        keys[:, :, :length] = k
        values[:, :, :length] = v
        out.append(layer(keys, values, length))
    return _cache(out)


def slab_from_rows(rows: Sequence[Sequence[tuple[Tensor, Tensor]]], room: int, dtype: torch.dtype):
    """One slab cache for several sequences of different lengths: row r holds ``rows[r]``
    ((keys, values) per layer, [1, kv_heads, length_r, head_dim]) from slot 0, zeros up to the
    longest row (the caller masks them), then ``room`` free slots."""
    layer = _slab_layer_class()
    width = max(row[0][0].shape[2] for row in rows)
    out = []
    for i in range(len(rows[0])):
        k0, v0 = rows[0][i]
        keys = k0.new_zeros((len(rows), k0.shape[1], width + room, k0.shape[3]), dtype=dtype)
        values = v0.new_zeros((len(rows), v0.shape[1], width + room, v0.shape[3]), dtype=dtype)
        for r, row in enumerate(rows):
            k, v = row[i]
            keys[r, :, : k.shape[2]] = k[0]
            values[r, :, : v.shape[2]] = v[0]
        out.append(layer(keys, values, width))
    return _cache(out)


def cast_linear_weights(
    model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16
) -> dict[str, str] | None:
    """Hold the weights (and biases) of ``model``'s linear layers in ``dtype``, as bf16
    autocast would cast them at every call; an output head tied to the input embeddings is
    untied first (the embeddings stay as they are). Outputs under autocast to ``dtype`` are
    unchanged bit for bit.

    Returns {head weight name: embedding weight name} for a head it untied (a state dict
    without the head's name then loads it from the embeddings: ``load_untied_heads``), or None
    (and changes nothing) for a wrapped model (the menu policy), whose heads read weights
    directly.
    """
    if hasattr(model, "lm") or not hasattr(model, "get_output_embeddings"):
        return None
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    untied: dict[str, str] = {}
    if head is not None and embed is not None and head.weight is embed.weight:
        names = {id(m): name for name, m in model.named_modules()}
        untied[f"{names[id(head)]}.weight"] = f"{names[id(embed)]}.weight"
        head.weight = torch.nn.Parameter(
            embed.weight.detach().clone(), requires_grad=embed.weight.requires_grad
        )
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = module.weight.data.to(dtype)
            if module.bias is not None:
                module.bias.data = module.bias.data.to(dtype)
    return untied


def load_untied_heads(model: torch.nn.Module, untied: dict[str, str], loaded: set[str]) -> None:
    """After a load of the names ``loaded``: a head untied by ``cast_linear_weights`` whose
    embeddings were loaded without it takes their values (a tied checkpoint names them once)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for head, embed in untied.items():
            if embed in loaded and head not in loaded:
                params[head].copy_(params[embed])

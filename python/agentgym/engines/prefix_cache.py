"""KV caches of earlier generations, kept so that a prompt extending one is not prefilled again.

A multi-turn episode's next prompt is its previous prompt, the reply the engine sampled and the
environment's answer: all but the answer were already run through the model. ``PrefixStore``
keeps, per finished generation, the per-layer keys and values of the tokens it ran (the prompt
and the reply but its last token), keyed by those tokens. A new prompt takes the longest stored
prefix it shares (a whole earlier turn, or the opening prompt the episodes of a GRPO group have
in common) and only the rest is prefilled. Causal attention makes the cached keys and values of a
prefix the same whatever follows it, so the result equals a full prefill up to floating-point
rounding (the same tokens at temperature 0; log-probs within ~1e-5).

Entries are evicted least recently used first beyond ``max_bytes``, and an entry that a newer one
extends is dropped (the newer one holds the same prefix). The engine clears the store whenever
its weights change: keys and values computed by other weights belong to another policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per decoder layer, keys and values of one sequence: [1, kv_heads, tokens, head_dim] each."""


@dataclass
class _Entry:
    tokens: np.ndarray
    layers: Layers
    nbytes: int
    last_used: int


class PrefixStore:
    """Cached keys/values by token prefix (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._entries: list[_Entry] = []
        self._clock = 0
        self.nbytes = 0
        self.reused_tokens = 0
        """Prompt tokens taken from the store instead of prefilled (since creation)."""
        self.prefilled_tokens = 0
        """Prompt tokens prefilled (since creation)."""

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: Sequence[int]) -> tuple[Layers | None, int]:
        """The keys/values of the longest stored prefix of ``prompt`` and its length, at most
        ``len(prompt) - 1`` (the last prompt token is always run: its logits pick the next
        token); ``(None, 0)`` when nothing is shared."""
        p = np.asarray(prompt, dtype=np.int64)
        best, best_n = None, 0
        for entry in self._entries:
            n = _common_prefix(entry.tokens, p)
            if n > best_n:
                best, best_n = entry, n
        best_n = min(best_n, len(p) - 1)
        if best is None or best_n <= 0:
            return None, 0
        self._clock += 1
        best.last_used = self._clock
        return [(k[:, :, :best_n], v[:, :, :best_n]) for k, v in best.layers], best_n

    def put(self, tokens: Sequence[int], layers: Layers) -> None:
        """Keep ``layers`` (the keys/values of ``tokens``, copied by the caller) for later
        prompts; drops entries ``tokens`` extends and the least recently used beyond the
        budget."""
        t = np.asarray(tokens, dtype=np.int64)
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers)
        if nbytes > self.max_bytes or len(t) == 0:
            return
        kept = []
        for e in self._entries:
            if len(e.tokens) <= len(t) and _common_prefix(e.tokens, t) == len(e.tokens):
                self.nbytes -= e.nbytes
            else:
                kept.append(e)
        self._entries = kept
        self._clock += 1
        self._entries.append(_Entry(t, layers, nbytes, self._clock))
        self.nbytes += nbytes
        while self.nbytes > self.max_bytes:
            oldest = min(range(len(self._entries)), key=lambda i: self._entries[i].last_used)
            self.nbytes -= self._entries.pop(oldest).nbytes

    def clear(self) -> None:
        """Forget every entry (the weights changed)."""
        self._entries.clear()
        self.nbytes = 0


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    differ = np.flatnonzero(a[:m] != b[:m])
    return int(differ[0]) if len(differ) else m

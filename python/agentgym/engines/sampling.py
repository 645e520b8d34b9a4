"""Logit processing and sampling shared by the transformers engine and the learner.

`processed_logprobs` is the behaviour distribution: log_softmax of the logits divided by the
temperature, after top-k and top-p truncation (truncated tokens get -inf). Engines sample from it
and report the log-probability of the sampled token under it, so the learner can compare its own
policy on the same support.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def processed_logprobs(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """log softmax(truncate(logits / temperature)) over the last dim; needs temperature > 0.

    top-k keeps every token whose scaled logit is >= the k-th largest (ties kept); top-p then
    keeps, in decreasing-probability order, each token whose preceding cumulative mass is < top_p
    (so the most likely token always survives).
    """
    if temperature <= 0:
        raise ValueError("processed_logprobs needs temperature > 0 (greedy has no distribution)")
    x = logits.float() / temperature
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        x = _top_p_mask(x, top_p)
    return torch.log_softmax(x, dim=-1)


def _top_p_mask(x: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_x, order = torch.sort(x, dim=-1, descending=True)
    probs = torch.softmax(sorted_x, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return x.masked_fill(drop, float("-inf"))


def sample_rows(
    logprobs: torch.Tensor, generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row, row i from `generators[i]`; returns (tokens, their logprobs).

    One generator per row keeps a request's samples independent of which other requests happen
    to share its batch.
    """
    probs = logprobs.exp()
    tokens = torch.stack(
        [torch.multinomial(probs[i], 1, generator=g)[0] for i, g in enumerate(generators)]
    )
    return tokens, logprobs.gather(-1, tokens[:, None])[:, 0]


def greedy_rows(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax per row; the log-prob of a deterministic choice is 0."""
    tokens = logits.argmax(dim=-1)
    return tokens, torch.zeros(tokens.shape, dtype=torch.float32)

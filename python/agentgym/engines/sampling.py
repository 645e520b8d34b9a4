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


_BLOCK = 256  # vocabulary entries per block of the two-level CDF in `sample_rows`


def sample_rows(
    logprobs: torch.Tensor, generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row, row i from `generators[i]`; returns (tokens, their logprobs),
    on the device of ``logprobs``.

    Inverse-CDF sampling: one uniform draw u_i per row from its own (CPU) generator, and the
    token is the first whose cumulative probability exceeds u_i times the row's total. One
    generator per row keeps a request's samples independent of which other requests share its
    batch. The CDF has two levels: float64 over the (float32) sums of blocks of 256 tokens,
    float32 within the chosen block, so every token's share is exact to the float32 rounding of
    one block's sums (a flat float32 CDF over 49k tokens would round small probabilities away;
    float64 reductions over the whole vocabulary cost 8x more on CPU). The rest is batched
    tensor work on the logits' device: on one CPU core 64 rows of a 49k vocabulary take a few
    ms, where one ``torch.multinomial`` call per row took over 100 ms (bench/micro); on a GPU
    only the B draws and the B picks cross the bus.
    """
    rows, vocab = logprobs.shape
    draws = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    probs = logprobs.exp()
    if vocab % _BLOCK:
        probs = torch.nn.functional.pad(probs, (0, _BLOCK - vocab % _BLOCK))
    blocks = probs.view(rows, -1, _BLOCK)
    block_cdf = blocks.sum(-1).double().cumsum(-1)
    target = draws.to(probs.device) * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, target[:, None], right=True).clamp_max(
        block_cdf.shape[-1] - 1
    )
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp_min(0)), 0.0)
    inner = blocks.gather(1, block[:, :, None].expand(-1, -1, _BLOCK))[:, 0].cumsum(-1)
    rest = (target[:, None] - before).to(inner.dtype)
    offset = torch.searchsorted(inner, rest, right=True).clamp_max(_BLOCK - 1)
    tokens = (block * _BLOCK + offset)[:, 0].clamp_max(vocab - 1)
    chosen = logprobs.gather(-1, tokens[:, None])[:, 0]
    off = torch.isinf(chosen)
    if off.any():
        # Rounding put a target past the last token with mass in its block or row: take the
        # row's last token with mass (never a truncated one).
        bad = off.nonzero()[:, 0]
        tokens[bad] = (logprobs[bad] > float("-inf")).cumsum(-1).argmax(-1)
        chosen = logprobs.gather(-1, tokens[:, None])[:, 0]
    return tokens, chosen


def greedy_rows(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax per row; the log-prob of a deterministic choice is 0."""
    tokens = logits.argmax(dim=-1)
    return tokens, torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)

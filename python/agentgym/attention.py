"""agentgym's attention for transformers models: one decode token on the CPU, and packed
sequences whose rows share a prefix.

Registered in transformers' attention interface under ``ATTENTION`` (``install``), one function
serves every call of a model, because a model may be shared by a learner and an engine (the
periodic eval); it picks its path from its inputs:

- **Packed**: the learner runs a micro-batch as one sequence of segments (``SegmentTable``)
  in place of the attention mask (transformers hands a 4-D mask to attention untouched).
  A segment attends to its ancestors' tokens and causally to its own, so the opening that the
  episodes of a group share is one segment, run once, and each episode's rest a child of it.
  Gradients flow into the shared segment's keys and values from every child, so the result
  (and its gradient) is that of running every episode whole. A segment may also continue an
  opening run in another pass (``agentgym.learner.packing.Opening``, listed on the table):
  its keys and values are the ones that pass kept, and the gradient sent to them is added to
  the opening's own keys and values where the table says a pass lends it.
- **Decode**: one query token, no gradient, on the CPU: softmax(q k^T) v over grouped key/value
  heads as two float32 matrix products (keys and values upcast as they are read). PyTorch's
  fused CPU kernel is tuned for long query blocks: at one token, bf16, batch 16 and context
  1,800 it took 30 ms per layer, these products 6 ms, and its result is one bf16 rounding of
  the output from exact, as theirs is.
- Anything else: transformers' SDPA, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

ATTENTION = "agentgym"
"""The name this module's attention is registered under in transformers."""


@dataclass(frozen=True)
class Segment:
    """A run of tokens of a packed sequence."""

    start: int
    """Index of its first token in the packed sequence."""
    length: int
    parent: int
    """Index of the segment it continues (its tokens come after the parent's and its
    ancestors'), -1 for none, or -2 - j: it continues the table's ``openings[j]``."""


class Opening(Protocol):
    """An opening run in another pass (``agentgym.learner.packing.Opening``): per layer index,
    its keys and values [1, H_kv, length, D] as leaves."""

    length: int
    keys: dict[int, Tensor]
    values: dict[int, Tensor]

    def keep(self, layer: int, key: Tensor, value: Tensor) -> None: ...


def segment_table(
    segments: Sequence[Segment],
    device: torch.device | str = "cpu",
    *,
    openings: Sequence[Opening] = (),
    lends: Sequence[tuple[int, Opening]] = (),
    capture: Opening | None = None,
) -> Tensor:
    """long[1, 1, S, 3] (start, length, parent) of ``segments``, in packed order (a parent
    before its children): what a packed forward passes as its attention mask. ``openings``:
    those segments continue (parent -2 - j); ``lends``: (packed index of its first token,
    opening) of each opening this pass runs for passes that borrowed it; ``capture``: keep
    every layer's keys and values of the sequence in this opening. They ride on the tensor,
    which transformers hands to attention as it is, in activation checkpointing's recomputed
    forward too."""
    rows = [[s.start, s.length, s.parent] for s in segments]
    table = torch.tensor(rows, dtype=torch.long, device=device).reshape(1, 1, len(rows), 3)
    table.openings, table.lends, table.capture = tuple(openings), tuple(lends), capture
    return table


def is_segment_table(mask: Tensor | None) -> bool:
    """Whether an attention mask is a packed forward's ``segment_table``."""
    return (
        isinstance(mask, Tensor) and mask.dim() == 4 and mask.dtype == torch.long
        and mask.shape[-1] == 3
    )  # fmt: skip


def attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """transformers' attention interface (module docstring): ``query`` [B, H, Q, D],
    ``key``/``value`` [B, H_kv, K, D]; returns ([B, Q, H, D], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if is_segment_table(attention_mask):
        return packed_attention(module, query, key, value, attention_mask, scaling), None
    decode = query.shape[2] == 1 and query.device.type == "cpu" and not torch.is_grad_enabled()
    if decode and kwargs.get("position_bias") is None:
        return decode_attention(query, key, value, attention_mask, scaling), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def decode_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scaling: float | None
) -> Tensor:
    """One query token per row over grouped key/value heads in float32, rounded to the value
    dtype. ``mask``: SDPA's (boolean [B, 1, 1, K], True where attended) or additive float."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = dim**-0.5 if scaling is None else scaling
    # Rounded to the dtype attention sees under autocast, then computed in float32.
    q = query.to(key.dtype).float().reshape(batch, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(q, key.float().transpose(-1, -2)) * scale  # [B, H_kv, group, K]
    if mask is not None:
        mask = mask.reshape(mask.shape[0], 1, 1, -1)[..., -scores.shape[-1] :]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, value.float()).to(value.dtype)  # [B, H_kv, group, D]
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous()


def packed_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    table: Tensor,
    scaling: float | None,
) -> Tensor:
    """Each segment of ``table`` (``segment_table``) attends to its ancestors' keys and values
    (an opening's kept ones first, where it continues one) and causally to its own; one packed
    sequence (batch 1). Returns [1, N, H, D]."""
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import repeat_kv

    layer = getattr(module, "layer_idx", None)
    openings, lends = getattr(table, "openings", ()), getattr(table, "lends", ())
    capture = getattr(table, "capture", None)
    if (openings or lends or capture is not None) and layer is None:
        raise ValueError(f"{type(module).__name__} has no layer_idx to keep an opening by")
    if capture is not None:
        capture.keep(layer, key[:, :, : capture.length], value[:, :, : capture.length])
    for start, opening in lends:
        if torch.is_grad_enabled() and layer in opening.keys:
            key, value = _Lent.apply(key, value, start, opening.keys[layer], opening.values[layer])
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    spans = [(int(s), int(n), int(p)) for s, n, p in table.reshape(-1, 3).tolist()]
    outs = []
    for start, length, parent in spans:
        own = slice(start, start + length)
        q = query[:, :, own]
        k_seen, v_seen = [], []  # the ancestors', outermost first
        while parent >= 0:
            a_start, a_length, parent = spans[parent]
            k_seen.insert(0, key[:, :, a_start : a_start + a_length])
            v_seen.insert(0, value[:, :, a_start : a_start + a_length])
        if parent <= -2:
            opening = openings[-2 - parent]
            k_seen.insert(0, repeat_kv(opening.keys[layer].to(key.dtype), groups))
            v_seen.insert(0, repeat_kv(opening.values[layer].to(value.dtype), groups))
        if not k_seen:
            outs.append(
                F.scaled_dot_product_attention(
                    q, key[:, :, own], value[:, :, own], is_causal=True, scale=scaling
                )
            )
            continue
        k_seen, v_seen = torch.cat(k_seen, dim=2), torch.cat(v_seen, dim=2)
        outs.append(_continued(q, k_seen, v_seen, key[:, :, own], value[:, :, own], scaling))
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()


class _Lent(torch.autograd.Function):
    """The identity on a sequence's keys and values [1, H_kv, N, D], whose backward pass adds,
    on the tokens of an opening this pass lends (from ``start``), the gradient its borrowers'
    passes sent to its kept keys and values (the leaves' ``.grad``; they ran before)."""

    @staticmethod
    def forward(ctx, key, value, start, kept_key, kept_value):
        ctx.start, ctx.kept = start, (kept_key, kept_value)
        return key.view_as(key), value.view_as(value)

    @staticmethod
    def backward(ctx, grad_key, grad_value):
        out = []
        for grad, kept in zip((grad_key, grad_value), ctx.kept, strict=True):
            if kept.grad is not None:
                grad = grad.clone()
                span = slice(ctx.start, ctx.start + kept.shape[2])
                grad[:, :, span] += kept.grad.to(grad.dtype)
            out.append(grad)
        return out[0], out[1], None, None, None


def _continued(
    q: Tensor, k_seen: Tensor, v_seen: Tensor, k_own: Tensor, v_own: Tensor, scale: float | None
) -> Tensor:
    """Attention of a segment's queries over the keys it continues (all of them) and its own
    (causally): on the CPU as two fused passes merged by their log-sum-exp (``_TwoPart``),
    elsewhere as one masked SDPA call."""
    import torch.nn.functional as F

    if q.device.type == "cpu":
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else q.dtype
        parts = [t.to(dtype) for t in (q, k_seen, v_seen, k_own, v_own)]
        return _TwoPart.apply(*parts, scale)
    n, m = q.shape[2], k_seen.shape[2]
    mask = torch.ones(n, m + n, dtype=torch.bool, device=q.device)
    mask[:, m:] = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    k, v = torch.cat([k_seen, k_own], dim=2), torch.cat([v_seen, v_own], dim=2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class _TwoPart(torch.autograd.Function):
    """softmax over [seen keys, own keys (causal)] as two calls of PyTorch's fused CPU
    attention: one dense mask over both would be computed whole (its causal half included),
    these skip the masked half. The outputs merge by their log-sum-exp; the backward pass runs
    each part's backward with the merged output and log-sum-exp, which gives each part's exact
    share of the gradient (as split-key attention does)."""

    @staticmethod
    def forward(ctx, q, k_seen, v_seen, k_own, v_own, scale):
        fused = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
        out_seen, lse_seen = fused(q, k_seen, v_seen, 0.0, False, scale=scale)
        out_own, lse_own = fused(q, k_own, v_own, 0.0, True, scale=scale)
        lse = torch.logaddexp(lse_seen, lse_own)
        out = (
            torch.exp(lse_seen - lse)[..., None] * out_seen.float()
            + torch.exp(lse_own - lse)[..., None] * out_own.float()
        ).to(q.dtype)
        ctx.save_for_backward(q, k_seen, v_seen, k_own, v_own, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k_seen, v_seen, k_own, v_own, out, lse = ctx.saved_tensors
        back = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
        grad = grad.contiguous()
        dq_seen, dk_seen, dv_seen = back(grad, q, k_seen, v_seen, out, lse, 0.0, False,
                                         scale=ctx.scale)  # fmt: skip
        dq_own, dk_own, dv_own = back(grad, q, k_own, v_own, out, lse, 0.0, True, scale=ctx.scale)
        return dq_seen + dq_own, dk_seen, dv_seen, dk_own, dv_own, None


_registered = False


def install(model: torch.nn.Module) -> bool:
    """Route ``model``'s attention through ``attention`` when it uses transformers' SDPA
    (other implementations, flash attention on a GPU, are left alone); returns whether it
    does now. A wrapped model (the menu policy) is installed on the model it wraps."""
    global _registered
    inner = getattr(model, "lm", model)
    config = getattr(inner, "config", None)
    if config is None or not hasattr(inner, "set_attn_implementation"):
        return False
    current = getattr(config, "_attn_implementation", None)
    if current == ATTENTION:
        return True
    if current != "sdpa":
        return False
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(ATTENTION, attention)
        AttentionMaskInterface.register(ATTENTION, sdpa_mask)
        _registered = True
    inner.set_attn_implementation(ATTENTION)
    return config._attn_implementation == ATTENTION

"""Micro-batches by a token budget, and a group's shared opening run once.

The episodes of a GRPO group start from one prompt, and on the SmolLM2 recipes that opening is
60-70% of the tokens a learner step runs. A micro-batch here is one *packed* sequence of
segments (``agentgym.attention``): the common prefix of a group's rows is one segment, each
row's remainder a child segment that attends to it; rows that share nothing are segments of
their own. Nothing is padded, and the prefix's forward and backward pass run once for all its
children, whose gradients add into its keys and values: the loss and its gradient are those of
running every row whole (``forward_packed``).

``plan`` cuts a minibatch's rows into such micro-batches under a budget of tokens actually run
(a shared prefix counted once), so the memory peak follows the budget and not the longest rows;
a group too large for one micro-batch is split, each part running the prefix again; a row
longer than the budget runs alone. Under several ranks the units are dealt to the ranks by
tokens first, and every rank runs as many micro-batches as the busiest (``None`` pads: a
filler pass).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from agentgym.attention import Segment, segment_table
from agentgym.learner.losses import scatter_logprobs
from agentgym.models import keeps_logits


@dataclass(frozen=True)
class Micro:
    """One micro-batch: rows of the batch and the prefixes some of them share."""

    rows: Tensor
    """long[R] batch rows, in the order of the micro-batch's tensors."""
    shared: tuple[tuple[tuple[int, ...], int], ...] = ()
    """(positions in ``rows``, common prefix length) of each set of rows run on one shared
    prefix; rows in no set run whole."""


@dataclass(frozen=True)
class _Unit:
    rows: tuple[int, ...]
    prefix: int
    cost: int


def common_prefix(tokens: Tensor, lengths: Tensor, rows: list[int]) -> int:
    """How many leading tokens the ``rows`` of ``tokens`` all have in common."""
    m = int(lengths[rows].min())
    if len(rows) < 2 or m == 0:
        return 0
    block = tokens[rows, :m]
    differ = (block != block[0]).any(0).nonzero()
    return int(differ[0]) if len(differ) else m


def _group_units(rows: list[int], lengths: list[int], prefix: int, budget: int) -> list[_Unit]:
    """``rows`` of one group (longest first) in parts that each run ``prefix`` once and fit
    ``budget`` where they can; a part of one row runs whole."""
    units, part, cost = [], [], prefix
    for r in rows:
        extra = lengths[r] - prefix
        if part and cost + extra > budget:
            units.append(_part(part, lengths, prefix, cost))
            part, cost = [], prefix
        part.append(r)
        cost += extra
    units.append(_part(part, lengths, prefix, cost))
    return units


def _part(part: list[int], lengths: list[int], prefix: int, cost: int) -> _Unit:
    if len(part) == 1:
        return _Unit(tuple(part), 0, lengths[part[0]])
    return _Unit(tuple(part), prefix, cost)


def plan(
    tokens: Tensor,
    lengths: Tensor,
    groups: Tensor,
    index: Tensor,
    *,
    budget: int,
    share: bool = True,
    rank: int = 0,
    world_size: int = 1,
) -> list[Micro | None]:
    """This rank's micro-batches of the rows ``index`` (module docstring). ``tokens``,
    ``lengths`` and ``groups`` are the batch's [B, T] ids, real lengths and group numbers;
    ``share``: run each group's common prefix once (else every row whole). Deterministic in
    its inputs."""
    lens = lengths.tolist()
    by_group: dict[int, list[int]] = {}
    for r in index.tolist():
        by_group.setdefault(int(groups[r]), []).append(r)
    units: list[_Unit] = []
    for g in sorted(by_group):
        rows = sorted(by_group[g], key=lambda r: (-lens[r], r))
        prefix = common_prefix(tokens, lengths, rows) if share else 0
        if prefix == 0:
            units += [_Unit((r,), 0, lens[r]) for r in rows]
        else:
            units += _group_units(rows, lens, prefix, budget)
    units.sort(key=lambda u: (-u.cost, u.rows))
    packs = [_pack(dealt, budget) for dealt in _deal(units, world_size)]
    busiest = max(len(p) for p in packs)
    return [_micro(p) for p in packs[rank]] + [None] * (busiest - len(packs[rank]))


def _deal(units: list[_Unit], world_size: int) -> list[list[_Unit]]:
    """Units (largest first) to the rank with the fewest tokens so far."""
    out: list[list[_Unit]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for u in units:
        k = min(range(world_size), key=lambda i: (loads[i], i))
        out[k].append(u)
        loads[k] += u.cost
    return out


def _pack(units: list[_Unit], budget: int) -> list[list[_Unit]]:
    """First fit, largest first: each unit into the first micro-batch it fits."""
    bins: list[list[_Unit]] = []
    loads: list[int] = []
    for u in sorted(units, key=lambda u: (-u.cost, u.rows)):
        for k, load in enumerate(loads):
            if load + u.cost <= budget:
                bins[k].append(u)
                loads[k] += u.cost
                break
        else:
            bins.append([u])
            loads.append(u.cost)
    return bins


def _micro(units: list[_Unit]) -> Micro:
    rows: list[int] = []
    shared = []
    for u in units:
        if u.prefix > 0:
            shared.append((tuple(range(len(rows), len(rows) + len(u.rows))), u.prefix))
        rows += u.rows
    return Micro(torch.tensor(rows, dtype=torch.long), tuple(shared))


def tokens_run(lengths: Tensor, micro: Micro) -> int:
    """How many tokens the packed pass of ``micro`` runs (rows of real ``lengths``, the
    micro-batch's rows already selected): each shared prefix once."""
    total = int(lengths.sum())
    return total - sum(prefix * (len(members) - 1) for members, prefix in micro.shared)


@dataclass(frozen=True)
class Packed:
    """A micro-batch laid out as one sequence (``packed_layout``)."""

    tokens: Tensor
    """long[1, N] the segments' tokens, end to end."""
    positions: Tensor
    """long[1, N] each token's position in its row."""
    table: Tensor
    """The segment table passed where the attention mask goes."""
    where: Tensor
    """long[R, L]: the packed index of each row's token (-1 past the row's end)."""


def packed_layout(tokens: Tensor, lengths: Tensor, micro: Micro) -> Packed:
    """The packed sequence of a micro-batch whose rows are ``tokens`` [R, L] with real
    ``lengths`` [R] (``micro.rows`` already selected)."""
    device = tokens.device
    R, L = tokens.shape
    lens = lengths.tolist()
    where = torch.full((R, L), -1, dtype=torch.long, device=device)
    pieces, positions, segments = [], [], []
    n = 0

    def add(row: int, begin: int, end: int, parent: int) -> int:
        nonlocal n
        pieces.append(tokens[row, begin:end])
        positions.append(torch.arange(begin, end, device=device))
        segments.append(Segment(n, end - begin, parent))
        n += end - begin
        return len(segments) - 1

    alone = set(range(R))
    for members, prefix in micro.shared:
        start = n
        parent = add(members[0], 0, prefix, -1)
        for r in members:
            where[r, :prefix] = torch.arange(start, start + prefix, device=device)
            alone.discard(r)
            if lens[r] > prefix:
                first = n
                add(r, prefix, lens[r], parent)
                where[r, prefix : lens[r]] = torch.arange(first, n, device=device)
    for r in sorted(alone):
        first = n
        add(r, 0, lens[r], -1)
        where[r, : lens[r]] = torch.arange(first, n, device=device)
    return Packed(
        torch.cat(pieces)[None],
        torch.cat(positions)[None],
        segment_table(segments, device),
        where,
    )


def forward_packed(
    model: torch.nn.Module,
    tokens: Tensor,
    lengths: Tensor,
    loss_mask: Tensor,
    micro: Micro,
    temperature: float,
    value_head: torch.nn.Module | None = None,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """One forward pass of a micro-batch as a packed sequence: float[R, L] log-probs (at
    ``temperature``) and entropies of the tokens on ``loss_mask`` (0 elsewhere), and values at
    every token when ``value_head`` is given, laid out like ``tokens`` [R, L] (the rows of
    ``micro``), as a forward pass of those rows gives them."""
    packed = packed_layout(tokens, lengths, micro)
    rows, cols = (loss_mask[:, 1:] > 0).nonzero(as_tuple=True)  # token cols + 1, at cols
    source = packed.where[rows, cols]  # the packed position that predicts each loss token
    kept = source.unique()
    extra = {"logits_to_keep": kept} if keeps_logits(model) else {}
    out = model(
        input_ids=packed.tokens,
        position_ids=packed.positions,
        attention_mask=packed.table,
        output_hidden_states=value_head is not None,
        use_cache=False,
        **extra,
    )
    at = torch.searchsorted(kept, source) if extra else source
    logp, entropy = scatter_logprobs(
        out.logits[0, at], tokens, rows, cols, temperature, entropy_grad
    )
    values = None
    if value_head is not None:
        flat = value_head(out.hidden_states[-1][0])  # [N]
        before = packed.where[:, :-1]  # the value of token t comes from position t - 1
        values = torch.nn.functional.pad(
            torch.where(before >= 0, flat[before.clamp(min=0)], 0.0), (1, 0)
        )
    return logp, entropy, values

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
a group too large for one micro-batch is split; a row longer than the budget runs alone. Under
several ranks the units are dealt to the ranks by tokens first, and every rank runs as many
micro-batches as the busiest (``None`` pads: a filler pass).

A split group runs its opening once (one process): the last of its micro-batches runs it with
its rows (it *lends* it), the earlier ones *borrow* it (``Opening``): the first of them runs
the opening alone without gradient and keeps its keys and values, their rows attend those, and
the gradient they send to them is added to the lender's keys and values in its backward pass.
So each part after the first costs its rows' remainders, not the opening again. A borrowing
row starts one token before the end of the common prefix, so the log-prob of its first own
token comes from its own pass; a borrower whose rows have loss tokens inside the opening, or
that computes values, runs the opening itself, as an unsplit group does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from agentgym.attention import Segment, segment_table
from agentgym.learner.losses import scatter_logprobs
from agentgym.models import keeps_logits


class Opening:
    """The opening of a group split over micro-batches, lent by one and borrowed by the others:
    its first ``length`` tokens, and per decoder layer their keys and values as the borrowers
    see them (float32 leaves, so that the gradient the borrowers send them accumulates in
    ``.grad``), kept by the first borrower's pass without gradient."""

    def __init__(self, length: int):
        self.length = length
        self.keys: dict[int, Tensor] = {}
        self.values: dict[int, Tensor] = {}

    def keep(self, layer: int, key: Tensor, value: Tensor) -> None:
        """Keep one layer's keys and values [1, H_kv, length, D] of the opening."""
        self.keys[layer] = key.detach().float().requires_grad_()
        self.values[layer] = value.detach().float().requires_grad_()


@dataclass(frozen=True)
class Micro:
    """One micro-batch: rows of the batch and the prefixes some of them share."""

    rows: Tensor
    """long[R] batch rows, in the order of the micro-batch's tensors."""
    shared: tuple[tuple[tuple[int, ...], int], ...] = ()
    """(positions in ``rows``, common prefix length) of each set of rows run on one shared
    prefix; rows in no set (and not borrowing) run whole."""
    borrowed: tuple[tuple[tuple[int, ...], int, Opening], ...] = ()
    """(positions in ``rows``, common prefix length, opening) of each set of rows that attend
    an opening that a later micro-batch runs (``Opening``); they start at its end."""
    lent: tuple[tuple[int, Opening], ...] = ()
    """(position in ``rows``, opening) of each opening whose borrowers ran before this
    micro-batch: that row's first ``opening.length`` tokens are the opening."""


@dataclass(frozen=True)
class _Unit:
    rows: tuple[int, ...]
    prefix: int
    cost: int
    group: int = -1
    """The group of a part of a split group (-1: a group in one unit, or none shared)."""
    common: int = 0
    """That group's common prefix (also for a part of one row, which runs whole)."""


def common_prefix(tokens: Tensor, lengths: Tensor, rows: list[int]) -> int:
    """How many leading tokens the ``rows`` of ``tokens`` all have in common."""
    m = int(lengths[rows].min())
    if len(rows) < 2 or m == 0:
        return 0
    block = tokens[rows, :m]
    differ = (block != block[0]).any(0).nonzero()
    return int(differ[0]) if len(differ) else m


def _group_units(
    rows: list[int], lengths: list[int], prefix: int, budget: int, group: int
) -> list[_Unit]:
    """``rows`` of one group (longest first) in parts that each run ``prefix`` once and fit
    ``budget`` where they can; a part of one row runs whole. Parts of a split group are marked
    with ``group`` (lending and borrowing its opening, ``_lend``)."""
    parts, part, cost = [], [], prefix
    for r in rows:
        extra = lengths[r] - prefix
        if part and cost + extra > budget:
            parts.append((part, cost))
            part, cost = [], prefix
        part.append(r)
        cost += extra
    parts.append((part, cost))
    mark = group if len(parts) > 1 else -1
    return [_part(p, lengths, prefix, c, mark) for p, c in parts]


def _part(part: list[int], lengths: list[int], prefix: int, cost: int, group: int) -> _Unit:
    if len(part) == 1:
        return _Unit(tuple(part), 0, lengths[part[0]], group, prefix)
    return _Unit(tuple(part), prefix, cost, group, prefix)


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
            units += _group_units(rows, lens, prefix, budget, g)
    units.sort(key=lambda u: (-u.cost, u.rows))
    packs = [_pack(dealt, budget) for dealt in _deal(units, world_size)]
    busiest = max(len(p) for p in packs)
    # Lending needs a pass without gradient that the other ranks would not run (FSDP's
    # collectives must match), so it is for one process only.
    roles = _lend(packs[rank]) if world_size == 1 else {}
    return [_micro(p, roles) for p in packs[rank]] + [None] * (busiest - len(packs[rank]))


def _lend(bins: list[list[_Unit]]) -> dict[_Unit, tuple[bool, Opening]]:
    """The parts of split groups that lend (True) or borrow (False) their group's opening: the
    part in the group's last micro-batch lends it (its backward pass runs after every
    borrower's), the parts in earlier micro-batches borrow it; a part in the lender's
    micro-batch runs as planned."""
    where: dict[int, list[tuple[int, _Unit]]] = {}
    for k, units in enumerate(bins):
        for u in units:
            if u.group >= 0 and u.common > 1:
                where.setdefault(u.group, []).append((k, u))
    roles: dict[_Unit, tuple[bool, Opening]] = {}
    for parts in where.values():
        last, lender = parts[-1]
        borrowers = [u for k, u in parts if k < last]
        if borrowers:
            opening = Opening(lender.common - 1)
            roles[lender] = (True, opening)
            roles.update((u, (False, opening)) for u in borrowers)
    return roles


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


def _micro(units: list[_Unit], roles: dict[_Unit, tuple[bool, Opening]]) -> Micro:
    rows: list[int] = []
    shared, borrowed, lent = [], [], []
    for u in units:
        at = tuple(range(len(rows), len(rows) + len(u.rows)))
        lends, opening = roles.get(u, (None, None))
        if lends is False:
            borrowed.append((at, u.common, opening))
        elif u.prefix > 0:
            shared.append((at, u.prefix))
        if lends:
            lent.append((at[0], opening))
        rows += u.rows
    return Micro(torch.tensor(rows, dtype=torch.long), tuple(shared), tuple(borrowed), tuple(lent))


def tokens_run(lengths: Tensor, micro: Micro) -> int:
    """How many tokens the packed pass of ``micro`` runs (rows of real ``lengths``, the
    micro-batch's rows already selected): each shared prefix once, a borrowed opening not at
    all, and a lent one once more (its borrowers' pass without gradient)."""
    total = int(lengths.sum())
    total -= sum(prefix * (len(members) - 1) for members, prefix in micro.shared)
    total -= sum(o.length * len(members) for members, _, o in micro.borrowed)
    return total + sum(o.length for _, o in micro.lent)


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
    """long[R, L]: the packed index of each row's token (-1 past the row's end, and in an
    opening the row borrows)."""


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
    openings = [opening for _, _, opening in micro.borrowed]
    for j, (members, _, opening) in enumerate(micro.borrowed):
        for r in members:
            first, begin = n, opening.length
            add(r, begin, lens[r], -2 - j)
            where[r, begin : lens[r]] = torch.arange(first, n, device=device)
            alone.discard(r)
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
    lends = [(int(where[r, 0]), opening) for r, opening in micro.lent]
    return Packed(
        torch.cat(pieces)[None],
        torch.cat(positions)[None],
        segment_table(segments, device, openings=openings, lends=lends),
        where,
    )


def _settled(micro: Micro, loss_mask: Tensor, values: bool) -> Micro:
    """``micro`` with the openings its rows cannot borrow run in its own pass, as a shared
    prefix: those of rows with a loss token inside the opening (its log-prob would come from
    the opening's positions), and all when values are computed (a value at every token)."""
    borrowed, shared = [], list(micro.shared)
    for members, common, opening in micro.borrowed:
        inside = loss_mask[list(members), 1 : opening.length + 1]
        if values or bool(inside.any()):
            shared.append((members, common))
        else:
            borrowed.append((members, common, opening))
    if len(borrowed) == len(micro.borrowed):
        return micro
    return Micro(micro.rows, tuple(shared), tuple(borrowed), micro.lent)


def _keep_opening(model: torch.nn.Module, tokens: Tensor, opening: Opening) -> None:
    """Run ``opening``'s tokens (long[length]) alone without gradient, keeping every layer's
    keys and values in it (``agentgym.attention``'s ``capture``)."""
    n = opening.length
    table = segment_table([Segment(0, n, -1)], tokens.device, capture=opening)
    extra = {"logits_to_keep": 1} if keeps_logits(model) else {}
    with torch.no_grad():
        model(
            input_ids=tokens[None, :n],
            position_ids=torch.arange(n, device=tokens.device)[None],
            attention_mask=table,
            use_cache=False,
            **extra,
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
    ``micro``), as a forward pass of those rows gives them. Borrowed openings (``Opening``)
    are run here, without gradient, by the first micro-batch that borrows them."""
    micro = _settled(micro, loss_mask, value_head is not None)
    for members, _, opening in micro.borrowed:
        if not opening.keys:
            _keep_opening(model, tokens[members[0]], opening)
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

"""Packed micro-batches (``agentgym.learner.packing``): the token-budget plan, and a forward and
backward pass over a group's shared prefix that equals running every row whole."""

import copy

import pytest

torch = pytest.importorskip("torch")

from learner_helpers import VOCAB, tiny_model  # noqa: E402

from agentgym import attention  # noqa: E402
from agentgym.learner.batch import TrainBatch  # noqa: E402
from agentgym.learner.forward import ValueHead  # noqa: E402
from agentgym.learner.losses import token_logprobs  # noqa: E402
from agentgym.learner.packing import (  # noqa: E402
    Micro,
    common_prefix,
    forward_packed,
    plan,
    tokens_run,
)
from agentgym.learner.update import _enable_activation_checkpointing  # noqa: E402


def rows_sharing(prefix: int, lengths: list[int], seed: int = 0):
    """Token rows, right-padded, whose first ``prefix`` tokens are equal (each row's next token
    differs from the others', so the common prefix is exactly ``prefix``)."""
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    opening = torch.randint(0, VOCAB, (prefix,), generator=gen)
    tokens = torch.zeros(len(lengths), T, dtype=torch.long)
    for r, n in enumerate(lengths):
        rest = torch.randint(0, VOCAB, (n - prefix,), generator=gen)
        if n > prefix:
            rest[0] = r % VOCAB  # rows part right after the opening
        tokens[r, :n] = torch.cat([opening, rest])
    return tokens


def loss_mask_of(tokens, lengths, first: int):
    mask = torch.zeros(tokens.shape)
    for r, n in enumerate(lengths):
        mask[r, first:n] = 1.0
        mask[r, first + 2 : first + 4] = 0.0  # an env turn inside the episode
    return mask


def test_common_prefix() -> None:
    t = rows_sharing(5, [9, 7, 8])
    assert common_prefix(t, torch.tensor([9, 7, 8]), [0, 1, 2]) == 5
    assert common_prefix(t, torch.tensor([9, 7, 8]), [1]) == 0


def test_plan_counts_a_shared_prefix_once_and_keeps_the_budget() -> None:
    lengths = [30, 28, 26, 25, 40]
    tokens = torch.zeros(5, 40, dtype=torch.long)
    tokens[:4, :30] = rows_sharing(20, lengths[:4])
    tokens[4] = torch.arange(40) % VOCAB
    groups = torch.tensor([0, 0, 0, 0, 1])
    index = torch.arange(5)
    micro = plan(tokens, torch.tensor(lengths), groups, index, budget=60)
    # Group 0 costs 20 + 10 + 8 + 6 + 5 = 49 tokens run once; row 4 (40) runs alone.
    assert sorted(len(m.rows) for m in micro) == [1, 4]
    four = next(m for m in micro if len(m.rows) == 4)
    assert four.shared == (((0, 1, 2, 3), 20),)
    # Budget 40: the group splits in two parts; the last runs the prefix and lends it, the
    # first borrows it (its rows start at its last token).
    split = plan(tokens, torch.tensor(lengths), groups, index, budget=40)
    parts = [m for m in split if m.shared or m.borrowed]
    assert [len(m.rows) for m in parts] == [2, 2]
    borrower, lender = parts
    ((members, common, opening),) = borrower.borrowed
    assert (members, common, opening.length) == ((0, 1), 20, 19) and not borrower.shared
    assert lender.shared == (((0, 1), 20),) and lender.lent == ((0, opening),)
    assert [m is borrower for m in split].index(True) < [m is lender for m in split].index(True)
    assert tokens_run(torch.tensor(lengths)[borrower.rows], borrower) == 30 + 28 - 2 * 19
    assert tokens_run(torch.tensor(lengths)[lender.rows], lender) == 26 + 25 - 20 + 19
    # Over two ranks nothing is lent: each part runs the prefix.
    for k in range(2):
        dealt = plan(tokens, torch.tensor(lengths), groups, index, budget=40, rank=k,
                     world_size=2)  # fmt: skip
        assert all(not m.borrowed and not m.lent for m in dealt if m is not None)
    # Without sharing: rows by tokens, the longest alone.
    flat = plan(tokens, torch.tensor(lengths), groups, index, budget=60, share=False)
    assert all(not m.shared for m in flat)
    assert sorted(int(r) for m in flat for r in m.rows) == [0, 1, 2, 3, 4]
    assert all(sum(lengths[int(r)] for r in m.rows) <= 60 for m in flat if len(m.rows) > 1)


def test_plan_gives_every_rank_as_many_micro_batches() -> None:
    lengths = [30, 28, 10, 9, 8]
    tokens = torch.arange(5 * 30).reshape(5, 30) % VOCAB
    groups = torch.arange(5)
    plans = [
        plan(
            tokens, torch.tensor(lengths), groups, torch.arange(5), budget=30, rank=k, world_size=2
        )  # fmt: skip
        for k in range(2)
    ]
    assert len(plans[0]) == len(plans[1])
    rows = sorted(int(r) for p in plans for m in p if m is not None for r in m.rows)
    assert rows == [0, 1, 2, 3, 4]


def per_row(model, tokens, lengths, mask, value_head=None):
    """The reference: every row's own unpadded forward pass."""
    logp, ent, vals = [], [], []
    for r, n in enumerate(lengths):
        out = model(input_ids=tokens[r : r + 1, :n], output_hidden_states=value_head is not None)
        lp, en = token_logprobs(out.logits, tokens[r : r + 1, :n], mask[r : r + 1, :n], 0.8,
                                entropy_grad=True)  # fmt: skip
        pad = tokens.shape[1] - n
        logp.append(torch.nn.functional.pad(lp, (0, pad)))
        ent.append(torch.nn.functional.pad(en, (0, pad)))
        if value_head is not None:
            v = torch.nn.functional.pad(value_head(out.hidden_states[-1][:, :-1]), (1, 0))
            vals.append(torch.nn.functional.pad(v, (0, pad)))
    return torch.cat(logp), torch.cat(ent), (torch.cat(vals) if vals else None)


def grads(model, value_head=None):
    params = list(model.parameters()) + (list(value_head.parameters()) if value_head else [])
    return [p.grad.clone() for p in params]


CASES = {
    "nothing shared": (0, [14, 11, 16]),
    "part shared": (8, [20, 15, 18, 9]),
    "all shared": (12, [12, 12, 12]),
}


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_pass_equals_each_row_whole(case, checkpointing) -> None:
    prefix, lengths = CASES[case]
    tokens = rows_sharing(prefix, lengths, seed=3)
    first = max(prefix - 3, 1)  # loss tokens start inside the shared part where there is one
    mask = loss_mask_of(tokens, lengths, first)
    adv = torch.linspace(-1.0, 1.5, len(lengths))[:, None]
    ref_model, packed_model, head, packed_head = _model_pair(1, True, checkpointing)
    real = torch.zeros(tokens.shape, dtype=torch.bool)
    for r, n in enumerate(lengths):
        real[r, :n] = True

    def objective(logp, entropy, values):  # a loss of the usual scale: means, not sums
        n = mask.sum()
        return ((logp * adv + 0.1 * entropy) * mask).sum() / n + values[real].mean()

    lp, en, vals = per_row(ref_model, tokens, lengths, mask, head)
    objective(lp, en, vals).backward()
    shared = ((tuple(range(len(lengths))), prefix),) if prefix else ()
    micro = Micro(torch.arange(len(lengths)), shared)
    got = forward_packed(
        packed_model, tokens, torch.tensor(lengths), mask, micro, 0.8, packed_head, True
    )
    assert torch.allclose(got[0], lp, atol=1e-5)
    assert torch.allclose(got[1], en, atol=1e-5)
    assert torch.allclose(got[2][real], vals[real], atol=1e-5)
    objective(*got).backward()
    for a, b in zip(grads(ref_model, head), grads(packed_model, packed_head), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-5), (a - b).abs().max()


SPLITS = {
    "two parts of two rows": 30,  # 8 + 12 + 10 | 8 + 9 + 7
    "rows alone and a part": 25,  # 20 | 18 | 8 + 9 + 7
}


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("fallback", ["none", "values", "loss in the opening"])
def test_a_split_group_borrows_its_opening_to_the_same_gradient(split, fallback, checkpointing):
    """The micro-batches of a group too long for one, in plan order, each backward on its own
    (as the learner runs them): the same log-probs and gradient as every row whole, whether
    the earlier parts borrow the opening or (values, loss tokens inside it) run it."""
    prefix, lengths = 8, [20, 18, 17, 15]
    tokens = rows_sharing(prefix, lengths, seed=5)
    first = 3 if fallback == "loss in the opening" else prefix
    mask = loss_mask_of(tokens, lengths, first)
    adv = torch.linspace(-1.0, 1.5, len(lengths))[:, None]
    ref_model, packed_model, head, packed_head = _model_pair(2, fallback == "values", checkpointing)
    n = mask.sum()

    def objective(logp, entropy, values, rows):  # the minibatch's loss share of ``rows``
        loss = ((logp * adv[rows] + 0.1 * entropy) * mask[rows]).sum() / n
        return loss if values is None else loss + (values * mask[rows]).sum() / n

    lp, en, vals = per_row(ref_model, tokens, lengths, mask, head)
    objective(lp, en, vals, torch.arange(4)).backward()
    lens = torch.tensor(lengths)
    micros = plan(tokens, lens, torch.zeros(4, dtype=torch.long), torch.arange(4),
                  budget=SPLITS[split])  # fmt: skip
    assert len(micros) > 1 and any(m.borrowed for m in micros)
    for m in micros:
        got = forward_packed(packed_model, tokens[m.rows], lens[m.rows], mask[m.rows], m, 0.8,
                             packed_head, True)  # fmt: skip
        L = got[0].shape[1]
        assert torch.allclose(got[0], lp[m.rows][:, :L], atol=1e-5)
        assert torch.allclose(got[1], en[m.rows][:, :L], atol=1e-5)
        objective(*got, m.rows).backward()
    for a, b in zip(grads(ref_model, head), grads(packed_model, packed_head), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-5), (a - b).abs().max()


def test_a_batch_select_keeps_the_packed_rows_consistent() -> None:
    lengths = [10, 7]
    tokens = rows_sharing(4, lengths)
    batch = TrainBatch(
        tokens=tokens,
        attention_mask=(torch.arange(10)[None] < torch.tensor(lengths)[:, None]).long(),
        loss_mask=loss_mask_of(tokens, lengths, 4),
        behav_logp=torch.zeros(2, 10),
        rewards=torch.zeros(2),
        group_index=torch.zeros(2, dtype=torch.long),
        min_versions=torch.zeros(2, dtype=torch.long),
    )
    model = tiny_model()
    attention.install(model)
    (micro,) = plan(batch.tokens, torch.tensor(lengths), batch.group_index, torch.arange(2),
                    budget=100)  # fmt: skip
    mb = batch.select(micro.rows)
    with torch.no_grad():
        logp, _, _ = forward_packed(model, mb.tokens, torch.tensor(lengths)[micro.rows],
                                    mb.loss_mask, micro, 0.8)  # fmt: skip
        ref, _, _ = per_row(model, tokens, lengths, batch.loss_mask)
    assert torch.allclose(logp, ref[micro.rows][:, : logp.shape[1]], atol=1e-5)


@pytest.mark.parametrize(
    ("opening", "budget"),
    [(10, 200), (4, 40)],  # a group per micro-batch; groups split, the opening lent
)
def test_a_learner_step_on_shared_prefixes_runs_fewer_tokens_to_the_same_gradient(
    opening, budget
) -> None:
    from learner_helpers import make_groups

    from agentgym.learner import Learner, LearnerConfig, OptimConfig

    trajs = make_groups(tiny_model(), num_groups=2, group_size=4, seed=7, opening=opening)
    results = {}
    for share in (False, True):
        cfg = LearnerConfig(optim=OptimConfig(lr=1e-2), groups_per_step=2, shared_prefix=share,
                            micro_batch_tokens=budget)  # fmt: skip
        learner = Learner(tiny_model(), cfg)
        assert learner.update.packed
        metrics = learner.step(trajs)
        results[share] = metrics
    plain, shared = results[False], results[True]
    assert shared["tokens_run"] < plain["tokens_run"] == plain["tokens"]  # one pass: its own prox
    assert shared["loss/policy"] == pytest.approx(plain["loss/policy"], abs=1e-6)
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)


def _model_pair(seed: int, value_head: bool, checkpointing: bool):
    """The reference model, its copy with the packed attention installed, and a value head
    with its copy (None, None without one)."""
    ref_model = tiny_model(seed=seed)
    packed_model = copy.deepcopy(ref_model)
    assert attention.install(packed_model)
    head = packed_head = None
    if value_head:
        head = ValueHead(32)
        torch.nn.init.normal_(head.proj.weight, std=0.05)
        packed_head = copy.deepcopy(head)
    if checkpointing:
        for m in (ref_model, packed_model):
            _enable_activation_checkpointing(m)
    return ref_model, packed_model, head, packed_head

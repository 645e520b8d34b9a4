"""The policy's side of learning: the model (with its value head and reference model), its
optimizer, and one RL update on a batch of whole groups. RL (``Learner``), SFT and DPO build
their optimizer with ``adamw`` and step it through the one ``OptimizerStep``.

One update (``PolicyUpdate.__call__``): collate -> recompute pi_prox (and the reference /
values when needed) -> advantages -> ``ppo_epochs`` x ``minibatches`` optimizer steps with
gradient accumulation over micro-batches. Dropout is off throughout (the model stays in eval
mode), so pi_prox and pi_theta are the same function before the first step: the first
minibatch takes pi_prox from its own forward pass (detached) instead of a separate one, unless
the advantages need pi_prox or values of every row first (KL reward, GAE). What the update
does not know: versions, horizons, curricula, env weights (the ``Learner`` around it).
"""

from __future__ import annotations

import copy
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from agentgym import attention
from agentgym.learner import advantages as adv_fns
from agentgym.learner import packing
from agentgym.learner.batch import TrainBatch, collate
from agentgym.learner.config import LearnerConfig
from agentgym.learner.distributed import Dist, full_tensor, shard
from agentgym.learner.forward import ForwardOut, ValueHead, forward_tokens
from agentgym.learner.losses import aggregate, kl_estimate, policy_loss, value_loss
from agentgym.transport.wire import Trajectory

log = logging.getLogger(__name__)


class OptimizerStep:
    """Calling it takes one optimizer step on the gradients accumulated so far.

    A gradient whose norm is not finite (an overflow somewhere in the step's batch) is
    dropped instead: the step is skipped and counted in ``skipped``, since one step of NaN
    would ruin every parameter and the optimizer's moments. ``global_norm`` turns this
    process's norm into the one every rank sees (under FSDP2, ``distributed.full_tensor``),
    so that all ranks skip together.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        clip: float | None,
        *,
        global_norm: Callable[[Tensor], Tensor] | None = None,
    ):
        self.optimizer = optimizer
        self.clip = clip
        """The global gradient norm is clipped to this; None: no clipping."""
        self.global_norm = global_norm
        self.skipped = 0
        """Steps skipped so far because the gradient norm was not finite."""

    def __call__(self) -> float:
        """Clip, step (or skip) and zero the gradients; returns the norm before clipping."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        clip = self.clip if self.clip is not None else float("inf")
        norm = nn.utils.clip_grad_norm_(params, clip)
        if self.global_norm is not None:
            norm = self.global_norm(norm)
        norm = float(norm)
        if math.isfinite(norm):
            self.optimizer.step()
        else:
            self.skipped += 1
            log.warning("gradient norm %s: optimizer step skipped (%d so far)", norm, self.skipped)
        self.optimizer.zero_grad(set_to_none=True)
        return norm


def adamw(params: Iterable[nn.Parameter], optim: Any) -> torch.optim.AdamW:
    """AdamW over ``params`` with an ``OptimConfig``'s lr, betas, eps and weight decay."""
    return torch.optim.AdamW(
        params, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
        weight_decay=optim.weight_decay,
    )  # fmt: skip


# What one micro-batch's pass reports (see ``PolicyUpdate._micro_backward``).
_UPDATE_KEYS = (
    "loss/total", "loss/policy", "loss/kl", "loss/entropy", "loss/value",
    "stat/clip_fraction", "stat/dual_clip_fraction", "stat/is_weight_mean",
    "stat/is_weight_max", "stat/is_weight_ess", "stat/approx_kl_prox",
)  # fmt: skip


@dataclass(frozen=True)
class Prepared:
    """Per-token tensors computed once per update, before any parameter changes (pi_prox of
    the first minibatch's rows is filled in by that minibatch's own pass)."""

    prox_logp: Tensor
    advantages: Tensor
    ref_logp: Tensor | None
    old_values: Tensor | None
    returns: Tensor | None


@dataclass(frozen=True)
class UpdateResult:
    """What one update did."""

    batch: TrainBatch
    """The collated batch it trained on."""
    metrics: dict[str, float]
    """Losses and statistics, averaged over its minibatches (maxima: the max), and grad_norm."""
    flat: bool
    """No advantage was nonzero and no term moves the weights without one: no optimizer step
    was taken (AdamW would still move every weight by its momentum on a zero gradient)."""
    skipped: int
    """Optimizer steps of this update skipped for a non-finite gradient norm."""
    tokens_run: int
    """Tokens this rank's forward passes ran (a packed shared opening counted once)."""


def _rows(t: Tensor | None, index: Tensor, length: int) -> Tensor | None:
    return None if t is None else t[index][:, :length]


class PolicyUpdate:
    """Owns the model, its value head (GAE) and reference model (a KL term), the optimizer and
    the random stream of minibatch orders; calling it runs one update on whole groups."""

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig,
        dist: Dist,
        *,
        ref_model: nn.Module | None = None,
    ):
        self.cfg = config
        self.dist = dist
        self.device = torch.device(dist.device if dist.sharded else config.device)
        self.model = model.to(self.device).eval()
        self.packed = not hasattr(self.model, "lm") and attention.install(self.model)
        """Micro-batches run as packed sequences (``agentgym.learner.packing``); False for a
        model whose attention cannot take them (the menu policy, flash attention), whose
        micro-batches are padded rows."""
        if config.activation_checkpointing:
            _enable_activation_checkpointing(self.model)
        self.value_head = None
        if config.advantage.estimator == "gae":
            self.value_head = ValueHead(model.config.hidden_size).to(self.device)
        self.ref_model = ref_model
        if self._needs_ref and ref_model is None:
            self.ref_model = copy.deepcopy(self.model)
        if self.ref_model is not None:
            self.ref_model.to(self.device).eval().requires_grad_(False)
            if self.packed and not attention.install(self.ref_model):
                raise ValueError("the reference model's attention cannot run packed sequences")
        if dist.sharded:  # before the optimizer: sharding replaces the parameters
            for module in (self.model, self.value_head, self.ref_model):
                if module is not None:
                    shard(module, bf16=config.bf16)
        params = list(self.model.parameters())
        if self.value_head is not None:
            params += list(self.value_head.parameters())
        self.optimizer = adamw(params, config.optim)
        self.optimizer_step = OptimizerStep(
            self.optimizer, config.optim.grad_clip, global_norm=full_tensor
        )
        self.generator = torch.Generator().manual_seed(config.seed)
        self.tokens_run = 0  # tokens this rank's forward passes ran in the current update
        lc = config.loss
        if config.aggregation == "seq-mean-token-sum-norm" and lc.norm_tokens is None:
            raise ValueError(
                "learner.loss.norm_tokens must be set for the seq-mean-token-sum-norm "
                "aggregation (dr_grpo's default): the constant a minibatch's token sum is divided "
                "by, e.g. the most tokens a minibatch can generate"
            )
        self.loss_cfg = replace(lc, aggregation=config.aggregation)
        """The loss terms' settings, the estimator's default aggregation resolved."""
        self._aggregate = {"mode": config.aggregation, "norm_tokens": lc.norm_tokens}

    @property
    def prox_from_first_pass(self) -> bool:
        """Whether the first minibatch of an update takes pi_prox from its own forward pass.

        It trains on the parameters that define pi_prox, so that pass gives pi_prox for its
        rows and a separate one is saved; not when the advantages need pi_prox (KL reward) or
        values (GAE) of every row before the first optimizer step.
        """
        return self.value_head is None and self.cfg.advantage.kl_reward_coef == 0

    @property
    def _needs_ref(self) -> bool:
        return self.cfg.loss.kl_coef > 0 or self.cfg.advantage.kl_reward_coef > 0

    def __call__(
        self, trajectories: Sequence[Trajectory], weights: Tensor | None = None
    ) -> UpdateResult:
        """One update on ``trajectories`` (whole groups); ``weights``, one per row, multiply
        its advantages (an env's ``loss_weight``)."""
        self.tokens_run = 0
        batch = collate(trajectories, self.cfg.pad_token_id).to(self.device)
        splits = min(self.cfg.minibatches, batch.size)
        orders = [
            torch.randperm(batch.size, generator=self.generator).to(self.device)
            for _ in range(self.cfg.ppo_epochs)
        ]
        minibatches = [order.tensor_split(splits) for order in orders]
        reuse = self.prox_from_first_pass
        skipped_before = self.optimizer_step.skipped
        prep = self.prepare(batch, skip=minibatches[0][0] if reuse else None)
        if weights is not None:
            prep = replace(prep, advantages=prep.advantages * weights[:, None])
        flat = self._without_signal(prep)
        if flat:
            parts = [dict.fromkeys([k.removeprefix("stat/") for k in _UPDATE_KEYS], 0.0)]
            parts[0]["grad_norm"] = 0.0
        else:
            parts = [
                self._minibatch(batch, prep, index, prox_from_pass=reuse and i + j == 0)
                for i, epoch in enumerate(minibatches)
                for j, index in enumerate(epoch)
            ]
        skipped = self.optimizer_step.skipped - skipped_before
        return UpdateResult(batch, _mean_dicts(parts), flat, skipped, self.tokens_run)

    def _without_signal(self, prep: Prepared) -> bool:
        """Whether the update would compute a zero gradient: every advantage exactly 0 (every
        group's rewards equal, under a group-relative estimator) and no term that moves the
        weights without one (KL, entropy, a value head)."""
        lc = self.cfg.loss
        if self.value_head is not None or lc.kl_coef > 0 or lc.entropy_coef > 0:
            return False
        return not bool(prep.advantages.any())

    @torch.no_grad()
    def prepare(self, batch: TrainBatch, skip: Tensor | None = None) -> Prepared:
        """pi_prox (and reference log-probs, values, advantages) before any parameter change.

        Rows in ``skip`` get no pi_prox here (0): their update takes it from its own forward
        pass, made before the first optimizer step.
        """
        prox_logp = torch.zeros_like(batch.behav_logp)
        ref_logp = torch.zeros_like(prox_logp) if self.ref_model is not None else None
        old_values = torch.zeros_like(prox_logp) if self.value_head is not None else None
        rows = torch.ones(batch.size, dtype=torch.bool, device=self.device)
        if skip is not None:
            rows[skip] = False
        for micro in self._micro_batches(batch, rows.nonzero().squeeze(1)):
            _, out = self._forward(self.model, batch, micro, self.value_head)
            if micro is None:
                continue
            prox_logp[micro.rows, : out.logp.shape[1]] = out.logp
            if old_values is not None and out.values is not None:
                old_values[micro.rows, : out.values.shape[1]] = out.values
        if ref_logp is not None:
            every = torch.arange(batch.size, device=self.device)
            for micro in self._micro_batches(batch, every):
                _, ref = self._forward(self.ref_model, batch, micro)
                if micro is not None:
                    ref_logp[micro.rows, : ref.logp.shape[1]] = ref.logp
        for t in (prox_logp, ref_logp, old_values):  # each row was filled by one rank only
            if t is not None:
                self.dist.all_sum_(t)
        advantages, returns = self._advantages(batch, prox_logp, ref_logp, old_values)
        return Prepared(prox_logp, advantages, ref_logp, old_values, returns)

    def _advantages(self, batch, prox_logp, ref_logp, values) -> tuple[Tensor, Tensor | None]:
        """The configured estimator's advantages (and value targets) of ``batch``; its KL to
        the reference is the k1 estimate at pi_prox."""
        m = batch.loss_mask
        kl = None if ref_logp is None else kl_estimate(prox_logp, ref_logp, "k1") * m
        inputs = adv_fns.EstimatorInputs(batch.rewards, batch.group_index, m, kl, values)
        return adv_fns.estimate(inputs, self.cfg.advantage)

    def _minibatch(
        self, batch: TrainBatch, prep: Prepared, index: Tensor, prox_from_pass: bool
    ) -> dict[str, float]:
        """The gradient of the rows ``index``, accumulated over micro-batches, then one
        optimizer step; returns the minibatch's metrics."""
        mask = batch.loss_mask[index]
        counts = {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}
        sums: defaultdict[str, float] = defaultdict(float)
        for micro in self._micro_batches(batch, index):
            if micro is None:  # this rank has no rows left; the others' passes need it
                self._filler_backward(batch)
                continue
            share = float(batch.loss_mask[micro.rows].sum() / counts["num_tokens"].clamp(min=1))
            for key, value in self._micro_backward(batch, prep, micro, counts, prox_from_pass):
                if key.endswith("_max"):
                    sums[key] = max(sums[key], value)
                elif key.startswith("stat/"):  # token-weighted mean over micro-batches
                    sums[key] += value * share
                else:  # losses use minibatch-wide counts, so they add up
                    sums[key] += value
        if prox_from_pass:  # these rows' pi_prox, filled by the rank that trained on them
            rows = self.dist.all_sum_(prep.prox_logp[index])
            prep.prox_logp[index] = rows
        sums = self._reduce_metrics(sums)
        sums["grad_norm"] = self.optimizer_step()
        return {k.removeprefix("stat/"): v for k, v in sums.items()}

    def _reduce_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """A minibatch's metrics over every rank's rows: sums add, maxima take the max."""
        if not self.dist.sharded:
            return sums
        out = {}
        for keys, reduce in (
            ([k for k in _UPDATE_KEYS if not k.endswith("_max")], self.dist.all_sum_),
            ([k for k in _UPDATE_KEYS if k.endswith("_max")], self.dist.all_max_),
        ):
            values = reduce(torch.tensor([sums[k] for k in keys], dtype=torch.float64))
            out.update(zip(keys, values.tolist(), strict=True))
        return out

    def _filler_backward(self, batch: TrainBatch) -> None:
        """A forward and backward pass that adds nothing (loss x 0) on the batch's shortest row
        with generated tokens: under FSDP every rank must run as many passes as the busiest."""
        _, out = self._forward(self.model, batch, None, self.value_head)
        loss = out.logp.sum() * 0.0
        if out.values is not None:
            loss = loss + out.values.sum() * 0.0
        loss.backward()

    def _micro_backward(
        self, batch: TrainBatch, prep: Prepared, micro: packing.Micro, counts: dict,
        prox_from_pass: bool,
    ):  # fmt: skip
        cfg = self.loss_cfg
        entropy_grad = cfg.entropy_coef > 0
        mb, out = self._forward(self.model, batch, micro, self.value_head, entropy_grad)
        L, m, micro = mb.tokens.shape[1], mb.loss_mask, micro.rows
        if prox_from_pass:  # kept for these rows' later epochs
            prep.prox_logp[micro, :L] = out.logp.detach()
        prox = _rows(prep.prox_logp, micro, L)
        pl = policy_loss(
            out.logp, prox, mb.behav_logp,
            _rows(prep.advantages, micro, L), m, self.loss_cfg, **counts,
        )  # fmt: skip
        loss = pl.loss
        kl_loss = entropy_loss = v_loss = torch.zeros((), device=self.device)
        if prep.ref_logp is not None and cfg.kl_coef > 0:
            kl = kl_estimate(out.logp, _rows(prep.ref_logp, micro, L), cfg.kl_estimator)
            kl_loss = aggregate(kl, m, **self._aggregate, **counts)
            loss = loss + cfg.kl_coef * kl_loss
        entropy_loss = aggregate(out.entropy, m, **self._aggregate, **counts)
        if entropy_grad:
            loss = loss - cfg.entropy_coef * entropy_loss
        if out.values is not None:
            v_loss = value_loss(
                out.values, _rows(prep.old_values, micro, L), _rows(prep.returns, micro, L), m,
                clip=cfg.value_clip, aggregation=self._aggregate["mode"],
                norm_tokens=self._aggregate["norm_tokens"], **counts,
            )  # fmt: skip
            loss = loss + cfg.value_coef * v_loss
        (loss * self.dist.grad_scale).backward()
        yield from {
            "loss/total": loss.item(),
            "loss/policy": pl.loss.item(),
            "loss/kl": kl_loss.item(),
            "loss/entropy": entropy_loss.item(),
            "loss/value": v_loss.item(),
            "stat/clip_fraction": pl.clip_fraction.item(),
            "stat/dual_clip_fraction": pl.dual_clip_fraction.item(),
            "stat/is_weight_mean": pl.weight_mean.item(),
            "stat/is_weight_max": pl.weight_max.item(),
            "stat/is_weight_ess": pl.weight_ess.item(),
            "stat/approx_kl_prox": pl.approx_kl_prox.item(),
        }.items()

    def _micro_batches(self, batch: TrainBatch, index: Tensor) -> list[packing.Micro | None]:
        """This rank's rows of ``index`` in micro-batches of at most ``micro_batch_tokens``
        tokens run (default: ``micro_batch_size`` times the longest row), a row longer than
        that alone; the list is padded with None up to the busiest rank's number of
        micro-batches (FSDP needs the same number of passes on every rank). One process: all
        rows, no None.

        Packed (``self.packed``): ``agentgym.learner.packing.plan``, a group's shared opening
        counted (and run) once with ``shared_prefix``. Padded: rows sorted by length, longest
        first, dealt to the ranks in turn, each micro-batch padded to its longest row and
        costing that many tokens per row.
        """
        lengths = batch.attention_mask.sum(-1)
        budget = self.cfg.micro_batch_tokens or self.cfg.micro_batch_size * int(
            lengths[index].max() if len(index) else 1
        )
        if self.packed:
            return packing.plan(
                batch.tokens, lengths, batch.group_index, index, budget=budget,
                share=self.cfg.shared_prefix, rank=self.dist.rank,
                world_size=self.dist.world_size,
            )  # fmt: skip
        ordered = index[lengths[index].argsort(descending=True, stable=True)]
        ranks = self.dist.world_size
        dealt = [_padded_micro(ordered[k::ranks], lengths, budget) for k in range(ranks)]
        busiest = max(len(d) for d in dealt)
        mine = dealt[self.dist.rank]
        return [packing.Micro(rows) for rows in mine] + [None] * (busiest - len(mine))

    def _forward(
        self,
        model: nn.Module,
        batch: TrainBatch,
        micro: packing.Micro | None,
        value_head: ValueHead | None = None,
        entropy_grad: bool = False,
    ) -> tuple[TrainBatch, ForwardOut]:
        """The rows of ``micro`` (None: a filler, the shortest row with generated tokens) and
        one forward pass over them, packed or padded."""
        mb = _select(batch, None if micro is None else micro.rows)
        with self._autocast():
            if micro is None or not self.packed:
                self.tokens_run += mb.tokens.numel()
                return mb, forward_tokens(model, mb, self.cfg.temperature, value_head, entropy_grad)
            self.tokens_run += packing.tokens_run(mb.attention_mask.sum(-1), micro)
            logp, entropy, values = packing.forward_packed(
                model, mb.tokens, mb.attention_mask.sum(-1), mb.loss_mask, micro,
                self.cfg.temperature, value_head, entropy_grad,
            )  # fmt: skip
        return mb, ForwardOut(logp, entropy, values)

    def _autocast(self):
        if not self.cfg.bf16 or self.dist.sharded:  # FSDP's mixed precision policy casts
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    @torch.no_grad()
    def evaluate_loss(self, trajectories: Sequence[Trajectory]) -> float:
        """The policy loss of ``trajectories`` against their own behaviour log-probs.

        With pi_prox = mu this is the plain clipped surrogate of the sampling policy: it falls
        as the policy moves towards the tokens with positive advantage.
        """
        batch = collate(trajectories, self.cfg.pad_token_id).to(self.device)
        out = forward_tokens(self.model, batch, self.cfg.temperature)
        prep = self.prepare(batch)
        pl = policy_loss(
            out.logp, batch.behav_logp, batch.behav_logp, prep.advantages, batch.loss_mask,
            self.loss_cfg,
        )  # fmt: skip
        return float(pl.loss)


def _select(batch: TrainBatch, micro: Tensor | None) -> TrainBatch:
    """The rows ``micro``; for None the shortest row with generated tokens (a filler)."""
    if micro is not None:
        return batch.select(micro)
    lengths = batch.attention_mask.sum(-1).masked_fill(batch.loss_mask.sum(-1) == 0, 1 << 30)
    return batch.select(lengths.argmin().reshape(1))


def _padded_micro(ordered: Tensor, lengths: Tensor, budget: int) -> list[Tensor]:
    """Rows sorted longest first in runs whose padded size (rows x the run's first, longest
    row) stays within ``budget`` tokens; a row longer than the budget runs alone."""
    out, start = [], 0
    lens = lengths[ordered].tolist()
    while start < len(lens):
        end = start + max(1, budget // max(lens[start], 1))
        out.append(ordered[start:end])
        start = end
    return out


def _mean_dicts(parts: list[dict[str, float]]) -> dict[str, float]:
    keys = parts[0].keys() if parts else ()
    return {
        k: max(p[k] for p in parts) if k.endswith("_max") else sum(p[k] for p in parts) / len(parts)
        for k in keys
    }


def _enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute activations block by block in the backward pass (Hugging Face models)."""
    inner = getattr(model, "lm", model)  # MenuPolicy wraps the language model
    if hasattr(inner, "activation_checkpointing_enable"):  # transformers >= 5's name
        inner.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    elif hasattr(inner, "gradient_checkpointing_enable"):
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        raise ValueError(f"{type(inner).__name__} has no activation checkpointing switch")
    # Hugging Face recomputes a module only while that module is in training mode, and the
    # learner keeps the model in eval mode (no dropout): so only the checkpointed modules' own
    # flag is set, their submodules (attention and its dropout) stay in eval mode.
    for module in inner.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            module.training = True

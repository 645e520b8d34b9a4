"""The learner: trajectories in, updated weights, version and horizon cap out.

Two ways to drive it, differing only in transport:

- in process: ``learner.step(trajectories)`` runs one update on the given trajectories (tests,
  a serial debug loop); ``learner.ingest`` + ``learner.train_ready`` adds the group assembly
  and staleness filter in front of it;
- over ZeroMQ: ``learner.run(channels)`` pulls trajectories from actors, trains whenever
  ``groups_per_step`` complete groups are ready, and publishes weights and control.

One update: collate -> recompute pi_prox (and the reference / values when needed) -> advantages
-> ``ppo_epochs`` x ``minibatches`` optimizer steps with gradient accumulation over
micro-batches -> version + 1 -> horizon controller. Dropout is off throughout (the model stays
in eval mode), so pi_prox and pi_theta are the same function before the first step: the first
minibatch takes pi_prox from its own forward pass (detached) instead of a separate one, unless
the advantages need pi_prox or values of every row first (KL reward, GAE).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from agentgym import attention
from agentgym.curriculum import Curriculum, CurriculumConfig, EnvMix
from agentgym.durable import write_atomic
from agentgym.horizon import HorizonController, HorizonStats
from agentgym.learner import advantages as adv_fns
from agentgym.learner import packing
from agentgym.learner.batch import GroupBuffer, TrainBatch, collate
from agentgym.learner.checkpoint import LearnerParts, load_learner, save_learner
from agentgym.learner.config import EnvTraining, LearnerConfig
from agentgym.learner.distributed import Command, Dist, Ranks, full_tensor, shard
from agentgym.learner.forward import ForwardOut, ValueHead, forward_tokens
from agentgym.learner.losses import (
    PolicyLossConfig,
    aggregate,
    kl_estimate,
    policy_loss,
    value_loss,
)
from agentgym.learner.metrics import MetricsWriter
from agentgym.learner.publish import Publisher
from agentgym.learner.update import OptimizerStep
from agentgym.transport.channels import ActorRegistry, LearnerChannels
from agentgym.transport.malloc import trim_heap
from agentgym.transport.wire import TRUNCATIONS, Control, Trajectory

log = logging.getLogger(__name__)

BLOCKED_WARN_S = 60.0
"""How long complete groups may wait for an earlier group of their stream before the learner
says so (and again every as long while they wait)."""

TaskGroup = Callable[[str, int], "str | None"]
"""(env, task id) -> the group the task counts in (BabyAI: ``level 3``), or None."""


# What one micro-batch's pass reports (see ``Learner._micro_backward``).
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


def _rows(t: Tensor | None, index: Tensor, length: int) -> Tensor | None:
    return None if t is None else t[index][:, :length]


class Learner:
    """Owns the model, optimizer, version counter and horizon controller."""

    def __init__(
        self,
        model: nn.Module,
        config: LearnerConfig,
        *,
        ref_model: nn.Module | None = None,
        dist: Dist | None = None,
        envs: Mapping[str, EnvTraining] | None = None,
        curricula: Mapping[str, CurriculumConfig] | None = None,
        env_mix: EnvMix | None = None,
        tokenizer_id: str = "",
        task_group: TaskGroup | None = None,
    ):
        """``tokenizer_id``: the policy's tokenizer (``agentgym.actor.policy.tokenizer_id``),
        kept in checkpoints so that their weights are never loaded under another tokenizer.
        ``task_group``: (env, task id) -> a group of tasks (or None) whose success is logged
        per group (``success/babyai/level_3``)."""
        self.cfg = config
        self.tokenizer_id = tokenizer_id
        self.task_group = task_group
        self.envs = dict(envs or {})
        """Per env of a multi-env run: its schedule and weights (empty: one env)."""
        self.dist = dist or Dist(device=config.device)
        self.device = torch.device(self.dist.device if self.dist.sharded else config.device)
        self.model = model.to(self.device).eval()
        self.packed = not hasattr(self.model, "lm") and attention.install(self.model)
        """Micro-batches run as packed sequences (``agentgym.learner.packing``); False for a
        model whose attention cannot take them (the menu policy, flash attention), whose
        micro-batches are padded rows."""
        if config.activation_checkpointing:
            _enable_activation_checkpointing(self.model)
        self.version = 0
        self.horizon = HorizonController(config.horizon)
        self.horizons = {env: HorizonController(e.horizon) for env, e in self.envs.items()}
        self.curricula = {env: Curriculum(c) for env, c in (curricula or {}).items()}
        self.env_mix = env_mix
        """Moves the env weights of a multi-env run (None: the configured weights hold)."""
        self.buffer = GroupBuffer(config.max_staleness, order=config.train_order)
        self.counters: Counter[str] = Counter()
        self._actor_launches: dict[int, int] = {}
        self._registry: ActorRegistry | None = None  # the channels' actors, while running
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
        if self.dist.sharded:  # before the optimizer: sharding replaces the parameters
            for module in (self.model, self.value_head, self.ref_model):
                if module is not None:
                    shard(module, bf16=config.bf16)
        params = list(self.model.parameters())
        if self.value_head is not None:
            params += list(self.value_head.parameters())
        o = config.optim
        self.optimizer = torch.optim.AdamW(
            params, lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay
        )
        self.optimizer_step = OptimizerStep(self.optimizer, o.grad_clip, global_norm=full_tensor)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.publisher = Publisher(self.model, self.dist, config.weights_via, config.weights_dir)
        self.ranks = Ranks(self.dist, {
            Command.STEP: self._step_and_trim,
            Command.WEIGHTS: self.publisher.gather,
            Command.CHECKPOINT: self._save_checkpoint,
        })  # fmt: skip
        self._tokens_run = 0  # tokens this rank's forward passes ran in the current update
        lc = config.loss
        if config.aggregation == "seq-mean-token-sum-norm" and lc.norm_tokens is None:
            raise ValueError(
                "learner.loss.norm_tokens must be set for the seq-mean-token-sum-norm "
                "aggregation (dr_grpo's default): the constant a minibatch's token sum is divided "
                "by, e.g. the most tokens a minibatch can generate"
            )
        self._policy_cfg = PolicyLossConfig(
            lc.clip_eps, lc.clip_eps_high, lc.dual_clip, lc.behaviour_weight,
            lc.behaviour_cap, config.aggregation, lc.norm_tokens,
        )  # fmt: skip
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

    # --- one update -------------------------------------------------------------------------

    def step(self, trajectories: Sequence[Trajectory]) -> dict[str, Any]:
        """One update on ``trajectories`` (whole groups); returns this update's metrics."""
        start = time.perf_counter()
        self._tokens_run = 0
        trajectories = self._scale_rewards(trajectories)
        batch = collate(trajectories, self.cfg.pad_token_id).to(self.device)
        splits = min(self.cfg.minibatches, batch.size)
        orders = [
            torch.randperm(batch.size, generator=self.generator).to(self.device)
            for _ in range(self.cfg.ppo_epochs)
        ]
        minibatches = [order.tensor_split(splits) for order in orders]
        reuse = self.prox_from_first_pass
        skipped_before = self.optimizer_step.skipped
        prep = self._prepare(batch, skip=minibatches[0][0] if reuse else None)
        if (weights := self._loss_weights(trajectories)) is not None:
            prep = replace(prep, advantages=prep.advantages * weights[:, None])
        flat = self._without_signal(prep)
        if flat:  # AdamW would still move every weight by its momentum on a zero gradient
            self.counters["skipped_flat_steps"] += 1
            parts = [dict.fromkeys([k.removeprefix("stat/") for k in _UPDATE_KEYS], 0.0)]
            parts[0]["grad_norm"] = 0.0
        else:
            parts = [
                self._update(batch, prep, index, prox_from_pass=reuse and i + j == 0)
                for i, epoch in enumerate(minibatches)
                for j, index in enumerate(epoch)
            ]
        skipped = self.optimizer_step.skipped - skipped_before
        lags = (self.version - batch.min_versions).tolist()
        cap = self.horizon.cap
        env_caps = {env: h.cap for env, h in self.horizons.items()}
        self.version += 1
        self._observe_horizons(trajectories)
        self._observe_curricula(trajectories)
        if self.env_mix is not None:
            self.env_mix.observe((t.env, t.success) for t in trajectories)
        elapsed = time.perf_counter() - start
        num_tokens = int(batch.attention_mask.sum())
        self.counters["steps"] += 1
        self.counters["tokens"] += num_tokens
        self.counters["trajectories"] += len(trajectories)
        metrics = _mean_dicts(parts)
        metrics.update(_episode_metrics(trajectories, self.task_group))
        metrics.update({f"staleness/{k}": v for k, v in sorted(Counter(lags).items())})
        metrics.update(
            version=self.version,
            horizon_cap=self.horizon.cap,
            horizon_cap_trained=cap,  # the schedule's cap at this update
            **{f"horizon_cap_data/{c}": n for c, n in _caps_of(trajectories).items()},
            **{f"horizon_cap/{env}": h.cap for env, h in self.horizons.items()},
            **{f"horizon_cap_trained/{env}": c for env, c in env_caps.items()},
            **{f"curriculum_stage/{env}": c.stage for env, c in self.curricula.items()},
            **{f"env_weight/{env}": w for env, w in self._env_weights().items()},
            step_time_s=elapsed,
            tokens=num_tokens,
            tokens_per_s=num_tokens / elapsed,
            tokens_run=self._tokens_run,
            generated_tokens=int(batch.loss_mask.sum()),
            skipped_steps=skipped,
            skipped_steps_total=self.optimizer_step.skipped,
            skipped_flat_steps=int(flat),
            skipped_flat_steps_total=self.counters["skipped_flat_steps"],
        )
        return metrics

    def _without_signal(self, prep: Prepared) -> bool:
        """Whether the update would compute a zero gradient: every advantage exactly 0 (every
        group's rewards equal, under a group-relative estimator) and no term that moves the
        weights without one (KL, entropy, a value head)."""
        lc = self.cfg.loss
        if self.value_head is not None or lc.kl_coef > 0 or lc.entropy_coef > 0:
            return False
        return not bool(prep.advantages.any())

    def _scale_rewards(self, trajectories: Sequence[Trajectory]) -> Sequence[Trajectory]:
        """Each episode's reward times its env's ``reward_scale``."""
        scales = {env: e.reward_scale for env, e in self.envs.items() if e.reward_scale != 1}
        if not scales:
            return trajectories
        return [
            replace(t, reward=t.reward * scales[t.env]) if t.env in scales else t
            for t in trajectories
        ]

    def _loss_weights(self, trajectories: Sequence[Trajectory]) -> Tensor | None:
        """Per row, its env's ``loss_weight`` (None when all are 1)."""
        envs = self.envs
        weights = [envs[t.env].loss_weight if t.env in envs else 1.0 for t in trajectories]
        if all(w == 1.0 for w in weights):
            return None
        return torch.tensor(weights, dtype=torch.float32, device=self.device)

    def _observe_horizons(self, trajectories: Sequence[Trajectory]) -> None:
        """One update for every horizon controller: the run's, and each env's on its own
        episodes (every env counts the update, so step-driven schedules move together). Only a
        cut-off by the turn cap counts as truncated for them: a full context or the env's own
        limit is not lifted by a higher cap."""
        at_cap = [(t.env, t.horizon_cap, t.truncation == "cap", t.success) for t in trajectories]
        self.horizon.observe(HorizonStats.from_episodes([e[1:] for e in at_cap], self.horizon.cap))
        for env, h in self.horizons.items():
            mine = [e[1:] for e in at_cap if e[0] == env]
            h.observe(HorizonStats.from_episodes(mine, h.cap))

    def _observe_curricula(self, trajectories: Sequence[Trajectory]) -> None:
        for env, c in self.curricula.items():
            if c.observe((t.task_id, t.success) for t in trajectories if t.env == env):
                log.info("curriculum: %s opens stage %d at version %d", env, c.stage, self.version)

    def control(self, *, stop: bool = False) -> Control:
        """What the actors are told now: version, caps (the run's and each env's), each
        curriculum's open stage, stop."""
        caps = {env: h.cap for env, h in self.horizons.items()}
        stages = {env: c.stage for env, c in self.curricula.items()}
        return Control(self.version, self.horizon.cap, stop=stop, env_caps=caps,
                       env_stages=stages, env_weights=self._env_weights(),
                       dropped_groups=dict(self.buffer.stats.dropped_groups),
                       task_streams=self.buffer.task_streams(),
                       cap_plans=self._cap_plans())  # fmt: skip

    def _controllers(self) -> dict[str, HorizonController]:
        """Each horizon controller by the env it caps ("" for the run's own)."""
        return {"": self.horizon, **self.horizons}

    def _cap_plans(self) -> dict[str, tuple[int | None, ...]]:
        """For strict schedules, the caps of the next updates an actor's new group may be
        trained at (``Control.cap_plans``): as many as the staleness bound lets it run ahead."""
        ahead = max(self.cfg.max_staleness, 1)
        return {env: h.upcoming(ahead) for env, h in self._controllers().items()
                if h.config.strict}  # fmt: skip

    def _cap_now(self, env: str) -> int | None:
        """The cap the schedule gives ``env``'s episodes at this update."""
        return self.horizons[env].cap if env in self.horizons else self.horizon.cap

    def _strict(self, env: str) -> bool:
        return (self.horizons[env] if env in self.horizons else self.horizon).config.strict

    def _env_weights(self) -> dict[str, float]:
        moving = self.env_mix is not None and self.env_mix.config.mode != "fixed"
        return self.env_mix.weights() if moving else {}

    @torch.no_grad()
    def _prepare(self, batch: TrainBatch, skip: Tensor | None = None) -> Prepared:
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

    def _update(
        self, batch: TrainBatch, prep: Prepared, index: Tensor, prox_from_pass: bool
    ) -> dict[str, float]:
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
        cfg = self.cfg.loss
        entropy_grad = cfg.entropy_coef > 0
        mb, out = self._forward(self.model, batch, micro, self.value_head, entropy_grad)
        L, m, micro = mb.tokens.shape[1], mb.loss_mask, micro.rows
        if prox_from_pass:  # kept for these rows' later epochs
            prep.prox_logp[micro, :L] = out.logp.detach()
        prox = _rows(prep.prox_logp, micro, L)
        pl = policy_loss(
            out.logp, prox, mb.behav_logp,
            _rows(prep.advantages, micro, L), m, self._policy_cfg, **counts,
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
        mb = self._select(batch, None if micro is None else micro.rows)
        with self._autocast():
            if micro is None or not self.packed:
                self._tokens_run += mb.tokens.numel()
                return mb, forward_tokens(model, mb, self.cfg.temperature, value_head, entropy_grad)
            self._tokens_run += packing.tokens_run(mb.attention_mask.sum(-1), micro)
            logp, entropy, values = packing.forward_packed(
                model, mb.tokens, mb.attention_mask.sum(-1), mb.loss_mask, micro,
                self.cfg.temperature, value_head, entropy_grad,
            )  # fmt: skip
        return mb, ForwardOut(logp, entropy, values)

    @staticmethod
    def _select(batch: TrainBatch, micro: Tensor | None) -> TrainBatch:
        """The rows ``micro``; for None the shortest row with generated tokens (a filler)."""
        if micro is not None:
            return batch.select(micro)
        lengths = batch.attention_mask.sum(-1).masked_fill(batch.loss_mask.sum(-1) == 0, 1 << 30)
        return batch.select(lengths.argmin().reshape(1))

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
        prep = self._prepare(batch)
        pl = policy_loss(
            out.logp, batch.behav_logp, batch.behav_logp, prep.advantages, batch.loss_mask,
            self._policy_cfg,
        )  # fmt: skip
        return float(pl.loss)

    # --- group assembly (in-process path) ---------------------------------------------------

    def ingest(self, trajectories: Sequence[Trajectory]) -> None:
        """Hand trajectories to the group buffer (staleness is checked when they are used)."""
        self.buffer.add(trajectories)

    def _say_blocked(self, since: float | None) -> float | None:
        """While complete groups wait for an earlier group of their actor's stream (start
        order), say so every ``BLOCKED_WARN_S``: which position, how many wait behind it.
        Returns when the wait was last said (None: nothing waits)."""
        blocked = self.buffer.blocked()
        if not blocked:
            return None
        now = time.monotonic()
        if since is None:
            return now
        if now - since < BLOCKED_WARN_S:
            return since
        for index, (position, behind) in sorted(blocked.items()):
            log.warning(
                "%d complete group(s) of actor %d wait for its group at stream position %d "
                "(learner.train_order: start); it is still running, or was lost without its "
                "actor saying so", behind, index, position,
            )  # fmt: skip
        return now

    def train_ready(self) -> dict[str, Any] | None:
        """One update if ``groups_per_step`` fresh complete groups are ready, else None."""
        self.buffer.drop_where(
            lambda g: self._strict(g[0].env) and g[0].horizon_cap != self._cap_now(g[0].env),
            "cap_mismatch",
        )
        groups = self.buffer.pop_groups(self.cfg.groups_per_step, self.version)
        if groups is None:
            return None
        metrics = self.ranks.lead(Command.STEP, [t for g in groups for t in g])
        s = self.buffer.stats
        metrics.update(
            dropped_stale_total=s.dropped_stale,
            dropped_duplicate_total=s.dropped_duplicate,
            dropped_superseded_total=s.dropped_superseded,
            dropped_incomplete_total=s.dropped_incomplete,
            dropped_cap_mismatch_total=s.dropped_cap_mismatch,
            received_total=s.received,
            **s.profile_metrics(),
        )
        return metrics

    # --- distributed path -------------------------------------------------------------------

    def run(
        self,
        channels: LearnerChannels | None,
        *,
        max_steps: int | None = None,
        poll_s: float = 0.05,
        should_stop: Callable[[], bool] | None = None,
        extra_metrics: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        """Train on trajectories from ``channels`` until ``max_steps`` updates or ``should_stop``.

        Publishes weights and control at start, after each update and (stop) at the end.
        ``extra_metrics(version)`` (periodic eval) runs after each update and adds to its
        metrics line.
        Under torchrun only rank 0 has channels; the other ranks (``channels`` None) follow
        its commands until it stops.
        """
        if not self.dist.is_main:
            return self.ranks.follow()
        max_steps = self.cfg.max_steps if max_steps is None else max_steps
        writer = MetricsWriter(self.cfg.metrics_path, self.cfg.tensorboard_dir, self._wandb())
        done = 0
        heartbeat_s = min(30.0, self.cfg.dist_timeout_s / 4)
        channels.actors.restore_launches(self._actor_launches)
        self._registry = channels.actors
        self.publish(channels, weights=True)
        refusals = _Refusals(channels, self.cfg.max_rejected_steps * self.cfg.groups_per_step)
        blocked_since: float | None = None
        try:
            while (max_steps is None or done < max_steps) and not (should_stop and should_stop()):
                self.ingest(channels.recv_trajectories(timeout_s=poll_s))
                for group_id in channels.take_lost():
                    self.buffer.note_lost(group_id)
                refusals.check()
                metrics = self.train_ready()
                if metrics is None:
                    blocked_since = self._say_blocked(blocked_since)
                    if self.buffer.changed:  # task streams moved, or groups were dropped
                        self.buffer.changed = False
                        channels.publish_control(self.control())
                    self.ranks.keep_alive(heartbeat_s)
                    continue
                done += 1
                blocked_since = None
                metrics["rejected_messages_total"] = channels.stats.rejected
                metrics["rejected_trajectories_total"] = channels.stats.rejected_trajectories
                metrics["refused_connections_total"] = channels.refused_connections
                metrics["shed_connections_total"] = channels.shed_connections
                metrics.update({f"actors/{k}": v for k, v in channels.actors.counts().items()})
                if extra_metrics is not None:
                    metrics.update(extra_metrics(self.version))
                writer.write(self.version, metrics)
                self._write_actors(channels)
                self.publish(channels, weights=self.version % self.cfg.publish_weights_every == 0)
                if self._checkpoint_due():
                    self.save_checkpoint()
            if self.cfg.checkpoint_dir is not None:  # a clean end; never after a failed update
                self.save_checkpoint()
            self.ranks.lead(Command.STOP)
        finally:
            writer.close()
            self._write_actors(channels)
            channels.publish_control(self.control(stop=True), wait_s=2.0)

    def _wandb(self) -> dict[str, Any] | None:
        """The Weights & Biases run of ``learner.wandb_project``: named and kept beside the
        metrics file (a resumed run continues the same wandb run)."""
        if self.cfg.wandb_project is None or self.cfg.metrics_path is None:
            return None
        run_dir = Path(self.cfg.metrics_path).resolve().parent
        run_id = "agentgym-" + hashlib.blake2b(str(run_dir).encode(), digest_size=6).hexdigest()
        return {"project": self.cfg.wandb_project, "name": run_dir.name, "dir": run_dir,
                "mode": self.cfg.wandb_mode, "id": run_id}  # fmt: skip

    def _write_actors(self, channels: LearnerChannels) -> None:
        """Per-actor counts (trajectories, last seen, connected) to ``actors.json`` beside the
        metrics file, replaced atomically. Informational: a write that fails (no descriptor
        left while a flood of connections holds them, a full disk) is logged and skipped, and
        the next step writes it again."""
        if self.cfg.metrics_path is None:
            return
        path = Path(self.cfg.metrics_path).with_name("actors.json")
        try:
            write_atomic(path, json.dumps(channels.actors.snapshot(), indent=1))
        except OSError as e:
            log.warning("could not write %s (%s); the next step tries again", path, e)

    def _step_and_trim(self, trajectories: Sequence[Trajectory]) -> dict[str, Any]:
        """``Command.STEP`` on every rank: ``step``, then its freed memory back to the OS."""
        metrics = self.step(trajectories)
        trim_heap()  # the update's activations, freed, back to the OS (transport/malloc.py)
        return metrics

    def publish(self, channels: LearnerChannels, *, weights: bool) -> None:
        """Broadcast the control (version, caps, ...); serve the current weights if
        ``weights``."""
        self.buffer.changed = False
        if weights:
            self.publisher.serve(channels, self.version, self.ranks)
        channels.publish_control(self.control())

    def _checkpoint_due(self) -> bool:
        every = self.cfg.checkpoint_every
        return self.cfg.checkpoint_dir is not None and every > 0 and self.version % every == 0

    # --- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(self, directory: str | Path | None = None) -> Path:
        """Write a checkpoint of the current state; returns its path (under torchrun rank 0
        calls this and every rank writes its shards)."""
        directory = directory or self.cfg.checkpoint_dir
        if directory is None:
            raise ValueError("no checkpoint directory given or configured")
        return self.ranks.lead(Command.CHECKPOINT, str(directory))

    def _save_checkpoint(self, directory: str) -> Path:
        if self._registry is not None:
            self._actor_launches = self._registry.launches()
        return save_learner(directory, self._parts(), self.dist, self.cfg.keep_checkpoints)

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from a checkpoint directory (or a checkpoint root holding ``latest``: its
        newest intact checkpoint, a damaged newer one passed over with a line saying so);
        every rank calls this. A sharded checkpoint resumes on any number of ranks."""
        self.version = load_learner(path, self._parts(), self.dist)

    def _parts(self) -> LearnerParts:
        """What a checkpoint saves and a resume restores (``checkpoint.LearnerParts``)."""
        return LearnerParts(
            version=self.version, tokenizer=self.tokenizer_id, model=self.model,
            value_head=self.value_head, optimizer=self.optimizer, generator=self.generator,
            optimizer_step=self.optimizer_step, horizon=self.horizon,
            env_horizons=self.horizons, curricula=self.curricula, env_mix=self.env_mix,
            buffer=self.buffer, counters=self.counters, actor_launches=self._actor_launches,
        )  # fmt: skip


class Stalled(RuntimeError):
    """Every trajectory message of a while was rejected: the run cannot make progress."""


class _Refusals:
    """Stops a learner whose last ``limit`` trajectory messages were all rejected, none
    accepted (``learner.max_rejected_steps`` steps' worth; 0: never)."""

    def __init__(self, channels: LearnerChannels, limit: int):
        self.stats, self.limit = channels.stats, limit
        self.accepted, self.rejected = self.stats.received, self.stats.rejected

    def check(self) -> None:
        if self.stats.received != self.accepted:
            self.accepted, self.rejected = self.stats.received, self.stats.rejected
        elif self.limit and self.stats.rejected - self.rejected >= self.limit:
            raise Stalled(
                f"the last {self.stats.rejected - self.rejected} trajectory messages were all "
                f"rejected and none accepted (the last: {self.stats.last_error}): the actors "
                "produce nothing this learner can train on (damaged weights?); stopping"
            )


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


def _caps_of(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """Episodes per horizon cap they ran under ("none": uncapped), in cap order: what an
    update trained, which near a stage boundary is not the cap its schedule gives it."""
    counts = Counter(t.horizon_cap for t in trajectories)
    order = sorted(counts, key=lambda c: (c is None, c or 0))
    return {"none" if c is None else str(c): counts[c] for c in order}


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


def _episode_metrics(
    trajectories: Sequence[Trajectory], task_group: TaskGroup | None = None
) -> dict[str, float]:
    """Per env (and ``all``): mean reward, success, truncation and turns; the share of replies
    without a usable action (``invalid``) and of those cut by the token budget before their
    action (``invalid_budget``, counted in ``invalid`` too); the share of groups with a
    learning signal (``signal``); success per task group (BabyAI's levels)."""
    by_env: defaultdict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_env[t.env].append(t)
    out: dict[str, float] = {}
    for env, ts in [("all", list(trajectories)), *sorted(by_env.items())]:
        n = len(ts)
        out[f"reward/{env}"] = sum(t.reward for t in ts) / n
        out[f"success/{env}"] = sum(t.success for t in ts) / n
        out[f"truncated/{env}"] = sum(t.truncated for t in ts) / n
        for cause in TRUNCATIONS[1:]:
            out[f"truncated_{cause}/{env}"] = sum(t.truncation == cause for t in ts) / n
        out[f"turns/{env}"] = sum(t.num_turns for t in ts) / n
        turns = max(sum(t.num_turns for t in ts), 1)
        out[f"invalid/{env}"] = sum(t.invalid_replies for t in ts) / turns
        out[f"invalid_budget/{env}"] = sum(t.budget_cut_replies for t in ts) / turns
        out[f"signal/{env}"] = signal_share(ts)
        if env != "all" and task_group is not None:
            out.update(_group_success(env, ts, task_group))
    return out


def signal_share(trajectories: Sequence[Trajectory]) -> float:
    """The share of groups whose episodes' rewards differ. A group of equal rewards (every
    episode failed, or every one succeeded alike) has zero advantage under the group-relative
    estimators (GRPO, Dr. GRPO, RLOO): it moves the policy by nothing but the KL and entropy
    terms. A step with no such group (and no KL, entropy or value term) skips its optimizer
    step, so its weights stay where they were (``skipped_flat_steps``)."""
    rewards: defaultdict[int, set[float]] = defaultdict(set)
    for t in trajectories:
        rewards[t.group_id].add(t.reward)
    return sum(len(r) > 1 for r in rewards.values()) / max(len(rewards), 1)


def _group_success(env: str, ts: Sequence[Trajectory], task_group: TaskGroup) -> dict[str, float]:
    """Success per group of the env's tasks (``success/babyai/level_3``), so a run shows which
    groups it learns; tasks without a group are left out."""
    by_group: defaultdict[str, list[bool]] = defaultdict(list)
    for t in ts:
        group = task_group(env, t.task_id)
        if group is not None:
            by_group[group.replace(" ", "_")].append(t.success)
    return {f"success/{env}/{g}": sum(v) / len(v) for g, v in sorted(by_group.items())}

"""The learner: trajectories in, updated weights, version and horizon cap out.

Two ways to drive it, differing only in transport:

- in process: ``learner.step(trajectories)`` runs one update on the given trajectories (tests,
  a serial debug loop); ``learner.ingest`` + ``learner.train_ready`` adds the group assembly
  and staleness filter in front of it;
- over ZeroMQ: ``learner.run(channels)`` pulls trajectories from actors, trains whenever
  ``groups_per_step`` complete groups are ready, and publishes weights and control.

The update itself (model, optimizer, pi_prox, advantages, micro-batches, backward, the
optimizer step) is ``agentgym.learner.update.PolicyUpdate``; what stays here is around it: the
rewards and loss weights of a multi-env run, the version, the horizon controllers and curricula
an update moves, the group buffer, the run loop, publishing and checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from agentgym.curriculum import Curriculum, CurriculumConfig, EnvMix
from agentgym.durable import write_atomic
from agentgym.horizon import HorizonController, HorizonStats
from agentgym.learner.batch import GroupBuffer
from agentgym.learner.checkpoint import LearnerParts, load_learner, save_learner
from agentgym.learner.config import EnvTraining, LearnerConfig
from agentgym.learner.distributed import Command, Dist, Ranks
from agentgym.learner.metrics import MetricsWriter
from agentgym.learner.publish import Publisher
from agentgym.learner.update import PolicyUpdate
from agentgym.transport.learner_channels import LearnerChannels
from agentgym.transport.malloc import trim_heap
from agentgym.transport.registry import ActorRegistry
from agentgym.transport.wire import ANY_ENV, TRUNCATIONS, Control, Trajectory

log = logging.getLogger(__name__)

BLOCKED_WARN_S = 60.0
"""How long complete groups may wait for an earlier group of their stream before the learner
says so (and again every as long while they wait)."""

TaskGroup = Callable[[str, int], "str | None"]
"""(env, task id) -> the group the task counts in (BabyAI: ``level 3``), or None."""


class Learner:
    """Owns the update (``self.update``: model, optimizer), version counter, horizon
    controllers, curricula and the group buffer."""

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
        """Per env of the run: its schedule and weights (empty: every env follows
        ``config.horizon`` with weight 1)."""
        self.dist = dist or Dist(device=config.device)
        self.update = PolicyUpdate(model, config, self.dist, ref_model=ref_model)
        self.version = 0
        self.horizons = {env: HorizonController(e.horizon) for env, e in self.envs.items()} or {
            ANY_ENV: HorizonController(config.horizon)
        }
        """Per env, its horizon controller (``ANY_ENV``: one for every env, when the learner
        is given no env list)."""
        self.curricula = {env: Curriculum(c) for env, c in (curricula or {}).items()}
        self.env_mix = env_mix
        """Moves the env weights of a multi-env run (None: the configured weights hold)."""
        self.buffer = GroupBuffer(config.max_staleness, order=config.train_order)
        self.counters: Counter[str] = Counter()
        self._actor_launches: dict[int, int] = {}
        self._registry: ActorRegistry | None = None  # the channels' actors, while running
        self.publisher = Publisher(self.model, self.dist, config.weights_via, config.weights_dir)
        self.ranks = Ranks(self.dist, {
            Command.STEP: self._step_and_trim,
            Command.WEIGHTS: self.publisher.gather,
            Command.CHECKPOINT: self._save_checkpoint,
        })  # fmt: skip

    @property
    def model(self) -> nn.Module:
        """The policy being trained (on the learner's device; sharded under FSDP2)."""
        return self.update.model

    # --- one update -------------------------------------------------------------------------

    def step(self, trajectories: Sequence[Trajectory]) -> dict[str, Any]:
        """One update on ``trajectories`` (whole groups); returns this update's metrics."""
        start = time.perf_counter()
        trajectories = self._scale_rewards(trajectories)
        done = self.update(trajectories, self._loss_weights(trajectories))
        batch = done.batch
        if done.flat:
            self.counters["skipped_flat_steps"] += 1
        lags = (self.version - batch.min_versions).tolist()
        trained = self._caps()  # the schedule's caps at this update
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
        metrics = dict(done.metrics)
        metrics.update(_episode_metrics(trajectories, self.task_group))
        metrics.update({f"staleness/{k}": v for k, v in sorted(Counter(lags).items())})
        metrics.update(
            version=self.version,
            **_per_env("horizon_cap", self._caps()),
            **_per_env("horizon_cap_trained", trained),
            **{f"horizon_cap_data/{c}": n for c, n in _caps_of(trajectories).items()},
            **{f"curriculum_stage/{env}": c.stage for env, c in self.curricula.items()},
            **{f"env_weight/{env}": w for env, w in self._env_weights().items()},
            step_time_s=elapsed,
            tokens=num_tokens,
            tokens_per_s=num_tokens / elapsed,
            tokens_run=done.tokens_run,
            generated_tokens=int(batch.loss_mask.sum()),
            skipped_steps=done.skipped,
            skipped_steps_total=self.update.optimizer_step.skipped,
            skipped_flat_steps=int(done.flat),
            skipped_flat_steps_total=self.counters["skipped_flat_steps"],
        )
        return metrics

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
        return torch.tensor(weights, dtype=torch.float32, device=self.update.device)

    def _observe_horizons(self, trajectories: Sequence[Trajectory]) -> None:
        """One update for every horizon controller, each on its env's episodes (``ANY_ENV``'s
        on all; every env counts the update, so step-driven schedules move together). Only a
        cut-off by the turn cap counts as truncated for them: a full context or the env's own
        limit is not lifted by a higher cap."""
        at_cap = [(t.env, t.horizon_cap, t.truncation == "cap", t.success) for t in trajectories]
        for env, h in self.horizons.items():
            mine = [e[1:] for e in at_cap if env in (ANY_ENV, e[0])]
            h.observe(HorizonStats.from_episodes(mine, h.cap))

    def _observe_curricula(self, trajectories: Sequence[Trajectory]) -> None:
        for env, c in self.curricula.items():
            if c.observe((t.task_id, t.success) for t in trajectories if t.env == env):
                log.info("curriculum: %s opens stage %d at version %d", env, c.stage, self.version)

    def control(self, *, stop: bool = False) -> Control:
        """What the actors are told now: version, each env's cap, each curriculum's open
        stage, stop."""
        stages = {env: c.stage for env, c in self.curricula.items()}
        return Control(self.version, self._caps(), stop=stop, env_stages=stages,
                       env_weights=self._env_weights(),
                       dropped_groups=dict(self.buffer.stats.dropped_groups),
                       task_streams=self.buffer.task_streams(),
                       cap_plans=self._cap_plans())  # fmt: skip

    def _caps(self) -> dict[str, int | None]:
        """Each env's cap now (``Control.caps``)."""
        return {env: h.cap for env, h in self.horizons.items()}

    def _cap_plans(self) -> dict[str, tuple[int | None, ...]]:
        """For strict schedules, the caps of the next updates an actor's new group may be
        trained at (``Control.cap_plans``): as many as the staleness bound lets it run ahead."""
        ahead = max(self.cfg.max_staleness, 1)
        return {env: h.upcoming(ahead) for env, h in self.horizons.items() if h.config.strict}

    def _horizon_of(self, env: str) -> HorizonController | None:
        """The controller that caps ``env`` (None: the learner caps no such env)."""
        return self.horizons.get(env, self.horizons.get(ANY_ENV))

    def _off_schedule(self, group: Sequence[Trajectory]) -> bool:
        """Whether a strict schedule trains ``group`` at another cap than it ran under."""
        h = self._horizon_of(group[0].env)
        return h is not None and h.config.strict and group[0].horizon_cap != h.cap

    def _env_weights(self) -> dict[str, float]:
        moving = self.env_mix is not None and self.env_mix.config.mode != "fixed"
        return self.env_mix.weights() if moving else {}

    def evaluate_loss(self, trajectories: Sequence[Trajectory]) -> float:
        """The policy loss of ``trajectories`` against their own behaviour log-probs
        (``PolicyUpdate.evaluate_loss``)."""
        return self.update.evaluate_loss(trajectories)

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
        self.buffer.drop_where(self._off_schedule, "cap_mismatch")
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
            version=self.version, tokenizer=self.tokenizer_id, model=self.update.model,
            value_head=self.update.value_head, optimizer=self.update.optimizer,
            generator=self.update.generator, optimizer_step=self.update.optimizer_step,
            horizons=self.horizons, curricula=self.curricula,
            env_mix=self.env_mix, buffer=self.buffer, counters=self.counters,
            actor_launches=self._actor_launches,
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


def _per_env(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as metrics: ``name`` alone for a learner of one env (or of ``ANY_ENV``),
    ``name/<env>`` for each env of several."""
    if len(values) == 1:
        return {name: next(iter(values.values()))}
    return {f"{name}/{env}": v for env, v in values.items()}


def _caps_of(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    """Episodes per horizon cap they ran under ("none": uncapped), in cap order: what an
    update trained, which near a stage boundary is not the cap its schedule gives it."""
    counts = Counter(t.horizon_cap for t in trajectories)
    order = sorted(counts, key=lambda c: (c is None, c or 0))
    return {"none" if c is None else str(c): counts[c] for c in order}


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

"""The run config: one frozen dataclass tree, overridden by a YAML file and ``--set`` options.

``load_config(path, overrides)`` reads a YAML file over the defaults (an unknown key is an error
naming the key and the file, see ``agentgym.configtools``), then applies ``key=value``
overrides (dotted keys, YAML-parsed values: ``--set learner.optim.lr=3e-4``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from agentgym.actor.config import ActorConfig
from agentgym.configtools import ConfigError, from_dict, merge
from agentgym.learner.config import LearnerConfig, OptimConfig
from agentgym.models import TinyModelSpec

BABYAI_LEVELS = 40


@dataclass(frozen=True)
class EnvConfig:
    """Which native environment the actors run."""

    name: str = "babyai"
    """A native env name (``agentgym.envs.env_names()``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Env options passed to ``EnvPool`` (e.g. ``recipes_dir`` for TextCraft)."""
    threads: int | None = 1
    """Worker threads of each actor's env pool (None: one per core)."""


@dataclass(frozen=True)
class TaskRange:
    """Task ids ``start <= id < stop``; for BabyAI optionally only some levels (id % 40)."""

    start: int = 0
    """First task id."""
    stop: int = 4000
    """One past the last task id."""
    levels: tuple[int, ...] = ()
    """BabyAI levels to keep (task_id % 40, AgentGym's order); empty: every id."""
    limit: int | None = None
    """Keep only the first ``limit`` ids after filtering (None: all)."""

    def ids(self) -> tuple[int, ...]:
        """The task ids, ascending."""
        out = [
            t
            for t in range(self.start, self.stop)
            if not self.levels or t % BABYAI_LEVELS in self.levels
        ]
        return tuple(out[: self.limit] if self.limit is not None else out)


@dataclass(frozen=True)
class TasksConfig:
    """Training and held-out evaluation tasks (the two ranges must not overlap)."""

    train: TaskRange = field(default_factory=TaskRange)
    """Tasks the actors sample from."""
    eval: TaskRange = field(default_factory=lambda: TaskRange(start=100_000, stop=100_400))
    """Held-out tasks ``agentgym eval`` runs."""

    def __post_init__(self) -> None:
        if self.train.start < self.eval.stop and self.eval.start < self.train.stop:
            raise ValueError(
                "tasks.train and tasks.eval ranges overlap: eval would not be held out"
            )


@dataclass(frozen=True)
class ModelConfig:
    """The policy: a local checkpoint directory, or a tiny model built on first use."""

    path: str | None = None
    """A Hugging Face checkpoint directory (None: build the tiny model into the run dir)."""
    tiny: TinyModelSpec = field(default_factory=TinyModelSpec)
    """Sizes of the tiny model and its tokenizer."""
    menu_policy: bool = False
    """Tiny model only: one token per action phrase and replies restricted to the listed
    actions (see ``agentgym.actor.menu``). Needs ``engine.max_new_tokens: 1`` and
    ``actor.reply_format: bare``."""
    corpus_episodes: int = 64
    """Random-action episodes whose text trains the tiny model's tokenizer."""
    init_from: str | None = None
    """Start from these weights: a learner-format checkpoint or checkpoints folder (e.g.
    ``RUN_DIR/sft/checkpoints``); the learner and every actor load them."""


@dataclass(frozen=True)
class EngineConfig:
    """Sampling and the inference backend of each actor."""

    backend: Literal["hf", "vllm"] = "hf"
    """hf: transformers (CPU or GPU); vllm: vLLM's async engine (GPU)."""
    device: str = "cpu"
    """Torch device of the hf engine."""
    max_batch_size: int = 64
    """Most prompts in one forward pass."""
    gather_s: float = 0.002
    """How long the batcher waits for more requests after the first."""
    max_new_tokens: int = 128
    """Token budget of one reply."""
    temperature: float = 1.0
    """Sampling temperature (the learner computes log-probs at the same one)."""
    top_k: int = 0
    """Top-k truncation (0: off; keep off for exact importance weights)."""
    top_p: float = 1.0
    """Top-p truncation (1.0: off)."""


@dataclass(frozen=True)
class TransportConfig:
    """Where the learner's sockets live."""

    kind: Literal["ipc", "tcp"] = "ipc"
    """ipc: Unix sockets inside the run dir (one machine); tcp: host and ports below."""
    host: str = "127.0.0.1"
    """tcp: the learner's address (it binds here; actors connect here)."""
    base_port: int = 5601
    """tcp: trajectories, control and weights use base_port, +1, +2."""


@dataclass(frozen=True)
class EvalConfig:
    """How ``agentgym eval`` measures a policy."""

    samples: int = 4
    """Episodes per task (k of Avg@k and Pass@k)."""
    horizon_cap: int | None = None
    """Turn cap of evaluation episodes (None: the last cap of the training schedule)."""
    temperature: float | None = None
    """Sampling temperature (None: engine.temperature)."""
    groups_in_flight: int = 16
    """Tasks evaluated at once."""
    seed: int = 0
    """Seed of the sampling: the same seed, checkpoint and tasks give the same episodes."""


@dataclass(frozen=True)
class SFTConfig:
    """``agentgym sft``: supervised fine-tuning on trajectory datasets (AgentTraj, demos)."""

    data: tuple[str, ...] = ()
    """JSONL files (``agentgym.learner.datasets`` lists the record forms)."""
    epochs: int = 1
    """Passes over the data."""
    batch_size: int = 16
    """Sequences per optimizer step (the loss is the token mean over all of them)."""
    micro_batch_size: int = 4
    """Sequences per forward pass; a step accumulates gradients over its micro-batches, which
    hold sequences of similar length (longest first)."""
    max_tokens: int = 2048
    """Longer sequences are cut to this many tokens (and counted)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4))
    """AdamW and gradient clipping."""
    checkpoint_every: int = 0
    """Optimizer steps between checkpoints (0: only at the end)."""
    strict: bool = False
    """Fail on the first malformed record instead of skipping and counting it."""
    seed: int = 0
    """Seeds the order of the examples."""

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.micro_batch_size < 1:
            raise ValueError("sft: epochs, batch_size and micro_batch_size must be >= 1")
        if self.max_tokens < 2:
            raise ValueError("sft: max_tokens must be >= 2")
        if self.optim.lr <= 0:
            raise ValueError("sft: optim.lr must be > 0")


@dataclass(frozen=True)
class DPOConfig:
    """``agentgym dpo``: offline preference optimisation on pairs of episodes of one task."""

    data: tuple[str, ...] = ()
    """JSONL files of pairs ``{"chosen": record, "rejected": record}`` (``agentgym pairs``)."""
    loss: Literal["sigmoid", "ipo"] = "sigmoid"
    """sigmoid: DPO; ipo: IPO (``agentgym.learner.losses.dpo_loss``)."""
    beta: float = 0.1
    """Strength of the pull towards the reference policy."""
    epochs: int = 1
    """Passes over the pairs."""
    batch_size: int = 8
    """Pairs per optimizer step (the loss is their mean)."""
    micro_batch_size: int = 2
    """Pairs per forward pass (each pass runs both sides)."""
    max_tokens: int = 2048
    """Longer sequences are cut to this many tokens (and counted)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    """AdamW and gradient clipping."""
    checkpoint_every: int = 0
    """Optimizer steps between checkpoints (0: only at the end)."""
    strict: bool = False
    """Fail on the first bad pair instead of skipping and counting it."""
    seed: int = 0
    """Seeds the order of the pairs."""

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.micro_batch_size < 1:
            raise ValueError("dpo: epochs, batch_size and micro_batch_size must be >= 1")
        if self.beta <= 0 or self.optim.lr <= 0:
            raise ValueError("dpo: beta and optim.lr must be > 0")


@dataclass(frozen=True)
class RunConfig:
    """The whole run; ``configs/*.yaml`` override these defaults."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment."""
    tasks: TasksConfig = field(default_factory=TasksConfig)
    """Training and held-out task ids."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Inference."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    """Actors."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """The learner (algorithm, optimiser, horizon schedule, staleness bound)."""
    transport: TransportConfig = field(default_factory=TransportConfig)
    """Actor <-> learner sockets."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised fine-tuning (``agentgym sft``)."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """Offline preference optimisation (``agentgym dpo``)."""
    run_dir: str = "runs/default"
    """Where the run writes its config, metrics, checkpoints, samples and model."""
    torch_threads: int = 1
    """Torch threads of the learner process."""

    def __post_init__(self) -> None:
        if self.model.menu_policy:
            if self.engine.max_new_tokens != 1 or self.actor.reply_format != "bare":
                raise ValueError(
                    "model.menu_policy needs engine.max_new_tokens: 1 and actor.reply_format: bare"
                )
            if self.model.path is not None:
                raise ValueError("model.menu_policy builds its own tiny model; drop model.path")
        if self.learner.temperature != self.engine.temperature:
            raise ValueError("learner.temperature must equal engine.temperature")
        if self.actor.num_actors > self.learner.groups_per_step:
            raise ValueError("actor.num_actors may not exceed learner.groups_per_step")


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> RunConfig:
    """The defaults, overridden by the YAML file at ``path`` and then by ``key=value`` items."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        with open(path) as f:
            loaded = yaml.safe_load(f)
        if loaded is not None and not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: top level must be a mapping")
        data = dict(loaded or {})
    config = from_dict(RunConfig, data, source)
    for item in overrides:
        config = merge(config, parse_override(item), f"--set {item}")
    return config


def parse_override(item: str) -> dict[str, Any]:
    """``"a.b.c=value"`` as the nested mapping ``{"a": {"b": {"c": value}}}``."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {item}: expected key=value")
    value: Any = yaml.safe_load(raw) if raw else None
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return value


def dump_config(config: RunConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (loadable with ``load_config``)."""
    Path(path).write_text(yaml.safe_dump(_plain(asdict(config)), sort_keys=False))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value

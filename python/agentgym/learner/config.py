"""The learner's config schema: frozen dataclasses with a docstring per field, for the online
learner (``LearnerConfig``) and the offline commands (``SFTConfig``, ``DPOConfig``).

YAML files override these defaults through ``agentgym.configtools.from_dict`` (an unknown key
is an error naming the key and the file).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Literal

from agentgym.configtools import check, none_or
from agentgym.horizon import HorizonConfig

Aggregation = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
EstimatorName = Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"]
"""The advantage estimators a config may name: the keys of
``agentgym.learner.advantages.ESTIMATORS``, listed here because the config is read without
torch (``tests/learner/test_advantages.py`` keeps the two the same)."""
KL_REWARD_ESTIMATORS = ("reinforce_pp", "reinforce_pp_baseline", "gae")
"""The estimators whose per-token rewards take ``kl_reward_coef``'s KL penalty (the group
estimators score an episode by its outcome reward alone)."""


@dataclass(frozen=True)
class AdvantageConfig:
    """How advantages are estimated (see ``agentgym.learner.advantages``)."""

    estimator: EstimatorName = "grpo"
    """grpo (group mean/std), dr_grpo (group mean only), rloo (leave-one-out),
    reinforce_pp (global whitening), reinforce_pp_baseline (group mean, then whitening),
    gae (PPO with a value head on the policy's last hidden state)."""
    gamma: float = 1.0
    """Discount over generated tokens (reinforce_pp*, gae)."""
    lam: float = 1.0
    """GAE lambda."""
    gae_whiten: bool = True
    """gae: whiten the advantages over the batch's generated tokens (mean 0, variance 1), as
    verl does; the value targets are the returns before whitening."""
    kl_reward_coef: float = 0.0
    """Per-token KL-to-reference penalty subtracted from the reward (reinforce_pp*, gae only;
    with grpo, dr_grpo and rloo, whose advantages come from the outcome reward alone, it is
    refused: use ``loss.kl_coef``, the KL term of the loss)."""
    eps: float = 1e-6
    """Added to the group std in grpo."""

    def __post_init__(self) -> None:
        check(
            self,
            ("gamma", 0 <= self.gamma <= 1, "must be in [0, 1]"),
            ("lam", 0 <= self.lam <= 1, "must be in [0, 1]"),
            ("kl_reward_coef", self.kl_reward_coef >= 0, "must be >= 0"),
            ("kl_reward_coef",
             self.kl_reward_coef == 0 or self.estimator in KL_REWARD_ESTIMATORS,
             f"applies to {', '.join(KL_REWARD_ESTIMATORS)} only: {self.estimator} advantages "
             "come from the outcome reward alone (for a KL penalty use learner.loss.kl_coef, "
             "the KL term of the loss)"),
            ("eps", self.eps > 0, "must be > 0"),
        )  # fmt: skip


@dataclass(frozen=True)
class LossConfig:
    """The decoupled PPO loss (see ``agentgym.learner.losses.policy_loss``)."""

    clip_eps: float = 0.2
    """Lower clip: the ratio pi_theta/pi_prox is kept above 1 - clip_eps."""
    clip_eps_high: float | None = None
    """Upper clip (1 + clip_eps_high); None: the same as clip_eps."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens; None: off."""
    behaviour_weight: Literal["token", "sequence", "mask", "none"] = "token"
    """How pi_prox/mu corrects for stale samples: truncated per token, sequence geometric
    mean, rejection mask, or not at all."""
    behaviour_cap: float = 5.0
    """Truncation cap (token/sequence) or rejection threshold (mask) of pi_prox/mu."""
    kl_coef: float = 0.0
    """Weight of the KL to the frozen reference in the loss (0: no reference model)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL estimator used in the loss."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (the loss subtracts entropy_coef * entropy)."""
    aggregation: (
        Literal[
            "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
        ]
        | None
    ) = None
    """How per-token losses are reduced (``agentgym.learner.losses.aggregate``): token-mean
    divides by the minibatch's generated tokens, so a row's step shrinks when long rows without
    signal share its batch; seq-mean-token-sum-norm divides a token sum by the constant
    ``norm_tokens`` (Dr. GRPO). None: seq-mean-token-sum-norm for dr_grpo, token-mean
    otherwise."""
    norm_tokens: int | None = None
    """The constant seq-mean-token-sum-norm divides by, fixed for the run. None: in a run
    config, the tokens a minibatch can generate at most (``engine.max_new_tokens`` x the
    schedule's largest cap x the minibatch's episodes), written into the run's config.yaml."""
    value_coef: float = 0.5
    """Weight of the value loss (gae only)."""
    value_clip: float | None = 0.2
    """Clip range of the value update (gae only); None: unclipped."""

    def __post_init__(self) -> None:
        check(
            self,
            ("clip_eps", self.clip_eps > 0, "must be > 0"),
            ("clip_eps_high", none_or(self.clip_eps_high, lambda v: v > 0), "must be > 0"),
            ("dual_clip", none_or(self.dual_clip, lambda v: v > 1), "must be > 1 (or null)"),
            ("behaviour_cap", self.behaviour_cap > 0, "must be > 0"),
            ("kl_coef", self.kl_coef >= 0, "must be >= 0"),
            ("entropy_coef", self.entropy_coef >= 0, "must be >= 0"),
            ("value_coef", self.value_coef >= 0, "must be >= 0"),
            ("value_clip", none_or(self.value_clip, lambda v: v > 0), "must be > 0 (or null)"),
            ("norm_tokens", none_or(self.norm_tokens, lambda v: v >= 1), "must be >= 1 (or null)"),
        )


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and gradient handling."""

    lr: float = 1e-6
    """Learning rate."""
    betas: tuple[float, ...] = (0.9, 0.999)
    """AdamW betas."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this; None: no clipping."""

    def __post_init__(self) -> None:
        check(
            self,
            ("lr", self.lr > 0, "must be > 0"),
            ("betas", len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
             "must be two numbers in [0, 1)"),
            ("eps", self.eps > 0, "must be > 0"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("grad_clip", none_or(self.grad_clip, lambda v: v > 0), "must be > 0 (or null)"),
        )  # fmt: skip


@dataclass(frozen=True)
class LearnerConfig:
    """Everything the learner loop needs besides the model."""

    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """Advantage estimation."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The loss."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The optimiser."""
    horizon: HorizonConfig = field(default_factory=HorizonConfig)
    """The horizon schedule the learner broadcasts."""
    groups_per_step: int = 4
    """Complete groups per update."""
    ppo_epochs: int = 1
    """Passes over each batch."""
    minibatches: int = 1
    """Optimizer steps per pass (the batch is split into this many minibatches)."""
    micro_batch_size: int = 8
    """Sets the default token budget of a micro-batch (``micro_batch_tokens``): this many rows
    of the minibatch's longest length."""
    micro_batch_tokens: int = 0
    """Tokens one forward/backward pass runs at most (a shared prefix counted once, padding
    counted where rows are padded); gradients accumulate over a minibatch's micro-batches, and
    a row longer than this runs alone. 0: ``micro_batch_size`` x the minibatch's longest row.
    The learner's memory peak follows it."""
    shared_prefix: bool = True
    """Run the opening that the rows of a group share once per micro-batch, their remainders
    attending to it (packed sequences, ``agentgym.learner.packing``); the loss and gradient
    equal running every row whole. Models whose attention cannot take packed sequences (the
    menu policy, flash attention) run padded rows either way."""
    max_staleness: int = 4
    """Drop trajectories whose oldest turn is more than this many versions behind."""
    train_order: Literal["start", "completion"] = "start"
    """Which complete groups an update takes: start, in the order they started (per actor, by
    task stream position; a group waits for those started before it); completion, the first
    to complete. A group lasts as long as its slowest episode, so completion order trains the
    short groups first and lets the ones with an episode run to the cap (those with a learning
    signal, mostly) go stale and be dropped: it biases what a run learns from."""
    temperature: float = 1.0
    """The actors' sampling temperature; log-probs are computed at it. In a run config it
    defaults to ``engine.temperature``."""
    bf16: bool = False
    """bf16 compute: forward passes under bf16 autocast in one process; under torchrun FSDP2's
    mixed precision (bf16 parameters for compute, float32 master weights and gradient
    reductions)."""
    activation_checkpointing: bool = False
    """Recompute each decoder block's activations in the backward pass instead of keeping them
    (less memory, about one more forward pass of compute)."""
    ranks: int = 1
    """Learner processes ``agentgym train`` starts on this machine (through torchrun's
    ``--nproc-per-node``); more than one shards the model, gradients and optimizer state over
    them with FSDP2. Multi-node: start ``agentgym-learner`` under torchrun yourself."""
    dist_timeout_s: float = 600.0
    """Under torchrun: the longest any collective may wait for the other ranks before the run
    ends with an error (a dead or hung rank)."""
    device: str = "cpu"
    """Torch device of the model."""
    seed: int = 0
    """Seeds minibatch shuffling."""
    pad_token_id: int = 0
    """Token used to pad sequences (masked out by attention)."""
    publish_weights_every: int = 1
    """Serve new weights every this many updates; at most ``max_staleness + 1`` (1 in a
    synchronous run): an actor samples only with weights at most ``max_staleness`` versions
    behind the learner, so it would wait forever for weights that are not published."""
    weights_via: Literal["stream", "file"] = "stream"
    """How actors get new weights: stream (chunks over the weight socket, bounded memory on
    both sides, works across machines) or file (rank 0 writes a safetensors file into
    ``weights_dir`` and actors read it tensor by tensor: a filesystem every actor sees, e.g.
    /dev/shm on one node or a shared mount)."""
    weights_dir: str | None = None
    """Directory of the weight files (file mode); None: ``<run_dir>/weights``. The newest two
    versions are kept (an actor may still be reading the older one)."""
    checkpoint_dir: str | None = None
    """Where checkpoints go; None: no checkpoints."""
    checkpoint_every: int = 0
    """Checkpoint every this many updates (0: only at the end)."""
    metrics_path: str | None = None
    """JSONL file for per-update metrics; None: no file."""
    tensorboard_dir: str | None = None
    """TensorBoard log directory (needs the tensorboard package); None: off."""
    wandb_project: str | None = None
    """Weights & Biases project the metrics also go to (needs the wandb package; the run is
    named after the run dir); None: off."""
    wandb_mode: Literal["online", "offline"] = "online"
    """offline: wandb writes the run under the run dir only (``wandb sync`` uploads it later)."""
    max_steps: int | None = None
    """Stop after this many updates; None: run until stopped."""
    keep_checkpoints: int | None = None
    """Keep only the newest this many checkpoints (older ones are deleted after each save);
    None: keep all."""
    max_rejected_steps: int = 3
    """Stop with an error once this many steps' worth of trajectory messages
    (``groups_per_step`` each) were rejected in a row with none accepted: actors whose every
    trajectory is refused (NaN log-probs from damaged weights) would otherwise keep the run
    busy and silent. 0: never."""

    @property
    def aggregation(self) -> str:
        """``loss.aggregation``, None resolved by the estimator (dr_grpo: the token sum over
        a constant; others: token-mean)."""
        if self.loss.aggregation is not None:
            return self.loss.aggregation
        return "seq-mean-token-sum-norm" if self.advantage.estimator == "dr_grpo" else "token-mean"

    def __post_init__(self) -> None:
        counts = ("groups_per_step", "ppo_epochs", "minibatches", "micro_batch_size", "ranks")
        check(
            self,
            *((name, getattr(self, name) >= 1, "must be >= 1") for name in counts),
            ("max_staleness", self.max_staleness >= 0, "must be >= 0"),
            ("micro_batch_tokens", self.micro_batch_tokens >= 0,
             "must be >= 0 (0: micro_batch_size x the longest row)"),
            ("temperature", self.temperature > 0, "must be > 0"),
            ("max_steps", none_or(self.max_steps, lambda v: v >= 1),
             "must be >= 1 (or null: no limit)"),
            ("dist_timeout_s", self.dist_timeout_s > 0, "must be > 0"),
            ("checkpoint_every", self.checkpoint_every >= 0, "must be >= 0 (0: only at the end)"),
            ("publish_weights_every", self.publish_weights_every >= 1, "must be >= 1"),
            ("publish_weights_every", self.publish_weights_every <= self.max_staleness + 1,
             f"must be <= max_staleness + 1 ({self.max_staleness + 1}): actors sample only "
             "with weights at most max_staleness versions old, and would wait for weights "
             "that are not published"),
            ("pad_token_id", self.pad_token_id >= 0, "must be >= 0"),
            ("keep_checkpoints", none_or(self.keep_checkpoints, lambda v: v >= 1),
             "must be >= 1 (or null: keep all)"),
            ("max_rejected_steps", self.max_rejected_steps >= 0, "must be >= 0 (0: never)"),
            ("tensorboard_dir", self.tensorboard_dir is None or _installed("tensorboard"),
             "needs the tensorboard package (pip install tensorboard), or null"),
            ("wandb_project", self.wandb_project is None or _installed("wandb"),
             "needs the wandb package (pip install 'agentgym-rs[wandb]'), or null"),
        )  # fmt: skip


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@dataclass(frozen=True)
class EnvTraining:
    """How one env of a multi-env run is trained (from its ``envs`` entry)."""

    horizon: HorizonConfig
    """Its horizon schedule (its own controller; the cap goes out per env)."""
    loss_weight: float = 1.0
    """Multiplies the advantages of its episodes."""
    reward_scale: float = 1.0
    """Multiplies its episodes' rewards before advantages."""


_OFFLINE_COUNTS = ("epochs", "batch_size", "micro_batch_size")


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
    copy_mix: float = 0.0
    """Weight of a copy loss added to every step: the next-token loss on 8 random spans and
    their repeats (the task of ``model.copy_warmup_steps``). A high SFT lr wipes a tiny
    model's copy warm-up within a few steps; the mix keeps the skill in training while the demos
    teach where to copy from. 0: none."""
    bf16: bool = False
    """Forward passes under bf16 autocast (weights and optimizer state stay float32), as
    ``learner.bf16`` does in one process; about 1.8x on CPUs with bf16 instructions."""

    def __post_init__(self) -> None:
        check(
            self,
            *((name, getattr(self, name) >= 1, "must be >= 1") for name in _OFFLINE_COUNTS),
            ("max_tokens", self.max_tokens >= 2, "must be >= 2"),
            ("checkpoint_every", self.checkpoint_every >= 0, "must be >= 0 (0: only at the end)"),
            ("copy_mix", self.copy_mix >= 0, "must be >= 0"),
        )


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
        check(
            self,
            *((name, getattr(self, name) >= 1, "must be >= 1") for name in _OFFLINE_COUNTS),
            ("beta", self.beta > 0, "must be > 0"),
            ("max_tokens", self.max_tokens >= 2, "must be >= 2"),
            ("checkpoint_every", self.checkpoint_every >= 0, "must be >= 0 (0: only at the end)"),
        )

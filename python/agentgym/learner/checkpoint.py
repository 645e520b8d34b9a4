"""Checkpoints that resume exactly: weights, optimizer, version, horizon state and RNG.

Layout of ``<dir>/step_<version>/``:
  model.safetensors   policy weights (shared tensors such as tied embeddings handled)
  extra.safetensors   other trainable modules (the value head), if any
  optimizer.pt        optimizer state (loaded with ``weights_only=True``: no arbitrary code)
  rng.pt              torch CPU RNG, the learner's shuffling generator, numpy and random states
  state.json          version, horizon controller state(s), counters, actor launch counts,
                      the tokenizer's id, the group buffer's totals and task stream positions
  manifest.json       every file's size and SHA-256 (``agentgym.durable``), written last
``<dir>/latest`` names the newest complete checkpoint; a checkpoint is written to a temporary
directory, fsynced, and renamed into place, and ``latest`` is replaced atomically and fsynced,
so a crash never leaves a half-written one. A checkpoint is checked against its manifest
before it is loaded (``CheckpointError`` naming the damaged file); resuming from a checkpoint
root takes the newest intact one (``agentgym.durable.newest_intact``). A write that fails for
want of space removes its temporary directory and is a one-line ``DiskFull``.

What a learner saves and a resume restores is gathered in ``LearnerParts`` (the tensors, the
shuffling generator and the bookkeeping of version, horizons, curricula, env weights, group
buffer, counters and actor launches); ``save_learner`` and ``load_learner`` pick the layout
and the checkpoint to resume from.

A learner under torchrun writes a sharded checkpoint instead, with the same ``state.json`` and
``rng.pt`` beside a ``dcp/`` directory written by ``torch.distributed.checkpoint`` (every
rank writes its own shards of the policy, value head and optimizer state). DCP reshards on
load, so it resumes on any number of ranks, in one process too, and ``load_weights`` reads the
policy out of it for eval, ``--init-from`` and ``agentgym export``. Multi-node runs need the
checkpoint directory on a filesystem every node sees.
"""

from __future__ import annotations

import errno
import json
import logging
import random
import shutil
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from agentgym.durable import (
    DISK_FULL,
    DiskFull,
    fsync_dir,
    manifest_problem,
    newest_intact,
    with_descriptors,
    write_atomic,
    write_manifest,
)

log = logging.getLogger(__name__)

DCP_DIR = "dcp"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded (damaged, cut short); the message is one line."""


def check_intact(path: str | Path) -> None:
    """``CheckpointError`` when ``path`` does not match its manifest."""
    why = manifest_problem(path)
    if why is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: {why}")


def _finish(tmp: Path, final: Path) -> None:
    """Seal ``tmp`` (manifest, fsync), rename it to ``final`` and point ``latest`` at it."""
    write_manifest(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    fsync_dir(final.parent)
    write_atomic(final.parent / "latest", final.name)


def _clear(tmp: Path) -> None:
    """Remove ``tmp``; errors go up (no descriptor left: ``with_descriptors`` waits)."""
    try:
        shutil.rmtree(tmp)
    except FileNotFoundError:
        pass


def _failed_write(tmp: Path, error: BaseException) -> BaseException:
    """The error to raise for a checkpoint whose writing failed, its temporary directory gone:
    a one-line ``DiskFull`` when the disk is full (torch and safetensors report it their own
    ways), else ``error``."""
    shutil.rmtree(tmp, ignore_errors=True)
    full = isinstance(error, OSError) and error.errno in DISK_FULL
    full = full or "No space left" in str(error)
    try:
        full = full or shutil.disk_usage(tmp.parent).free == 0
    except OSError:
        pass
    if full:
        return DiskFull(tmp.parent, OSError(DISK_FULL[0], "no space left on device"))
    if not isinstance(error, OSError) and "Too many open files" in str(error):
        return OSError(errno.EMFILE, str(error))  # as with_descriptors knows it
    return error


@dataclass
class TrainingState:
    """Everything besides tensors that a resumed learner must get back."""

    version: int
    horizons: dict[str, dict[str, Any]]
    """Per env, its horizon controller's state (``Learner.horizons``)."""
    counters: dict[str, Any]
    actor_launches: dict[str, int] = field(default_factory=dict)
    """Per actor index, how many actor processes the run has had (``ActorRegistry``)."""
    curricula: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per env with a level curriculum, its state (open stage, recent successes)."""
    env_mix: dict[str, list[bool]] = field(default_factory=dict)
    """Per env of a run whose env weights move, its recent successes."""
    tokenizer: str = ""
    """The tokenizer the weights were trained under (``agentgym.actor.policy.tokenizer_id``);
    empty where unknown."""
    buffer: dict[str, Any] = field(default_factory=dict)
    """The group buffer's totals and how far each actor index's task stream was used
    (``GroupBuffer.state_dict``): the actors of a resumed run go on from there, so a
    deterministic run resumed from a checkpoint trains on the groups an uninterrupted one
    would."""


def _state_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """A ``state.json``'s fields as ``TrainingState`` takes them; a checkpoint written before
    the horizons were one map per env holds the run's controller (``horizon``) and those of a
    multi-env run's envs (``env_horizons``)."""
    if "horizon" in meta:
        run, envs = meta.pop("horizon"), meta.pop("env_horizons", {})
        meta["horizons"] = envs or {"": run}
    return meta


class Stateful(Protocol):
    """An object whose state a checkpoint keeps as JSON (horizon controllers, curricula, the
    env mix, the group buffer)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class StepCounter(Protocol):
    """The optimizer step's count of skipped steps (``learner.update.OptimizerStep``)."""

    skipped: int


@dataclass
class LearnerParts:
    """What a learner checkpoint saves and a resume restores, by reference: ``save_learner``
    reads these objects, ``load_learner`` restores them in place (``version`` it returns)."""

    version: int
    tokenizer: str
    """The policy's tokenizer id (``agentgym.actor.policy.tokenizer_id``)."""
    model: nn.Module
    value_head: nn.Module | None
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    """The update's shuffling generator; saved with torch's, numpy's and random's states."""
    optimizer_step: StepCounter
    horizons: Mapping[str, Stateful]
    curricula: Mapping[str, Stateful]
    env_mix: Stateful | None
    buffer: Stateful
    counters: Counter[str]
    actor_launches: dict[int, int]
    """Per actor index, how many actor processes the run has had."""

    def modules(self) -> nn.ModuleDict:
        """The trained modules under the names sharded checkpoints use."""
        modules = {"policy": self.model}
        if self.value_head is not None:
            modules["value_head"] = self.value_head
        return nn.ModuleDict(modules)

    def training_state(self) -> TrainingState:
        """The non-tensor state of these parts."""
        return TrainingState(
            self.version,
            {env: h.state_dict() for env, h in self.horizons.items()},
            {**self.counters, "skipped_steps": self.optimizer_step.skipped},
            {str(k): v for k, v in self.actor_launches.items()},
            {env: c.state_dict() for env, c in self.curricula.items()},
            self.env_mix.state_dict() if self.env_mix is not None else {},
            tokenizer=self.tokenizer,
            buffer=self.buffer.state_dict(),
        )

    def restore(self, state: TrainingState, source: Path) -> None:
        """Put ``state`` (read from ``source``) back into these parts, in place."""
        saved = state.horizons
        for env, h in self.horizons.items():
            if env in saved:
                h.load_state_dict(saved[env])
            elif len(saved) == 1 and len(self.horizons) == 1:  # one env, under another key
                h.load_state_dict(next(iter(saved.values())))
            else:
                raise ValueError(
                    f"{source}: the checkpoint has no horizon state for env {env!r} (its envs: "
                    f"{sorted(saved)}); resume with the run's own envs"
                )
        for env, c in self.curricula.items():
            if env in state.curricula:  # a curriculum added on resume starts at its first stage
                c.load_state_dict(state.curricula[env])
        if self.env_mix is not None:
            self.env_mix.load_state_dict(state.env_mix)
        self.counters.clear()
        self.counters.update(state.counters)
        self.optimizer_step.skipped = self.counters.pop("skipped_steps", 0)
        self.buffer.load_state_dict(state.buffer)
        self.actor_launches.clear()
        self.actor_launches.update({int(k): int(v) for k, v in state.actor_launches.items()})


def save_learner(directory: str | Path, parts: LearnerParts, dist: Any, keep: int | None) -> Path:
    """Write a checkpoint of ``parts`` (sharded under torchrun, where every rank calls this);
    rank 0 then deletes all but the newest ``keep`` (None: keeps all). Returns its path."""
    state = parts.training_state()
    if dist.sharded:
        path = save_sharded_checkpoint(
            directory, state, parts.modules(), parts.optimizer, parts.generator, dist
        )
    else:
        path = save_checkpoint(
            directory, state, parts.model, parts.optimizer, parts.generator, parts.value_head
        )
    if keep is not None and dist.is_main:
        for old in prune_checkpoints(directory, keep):
            log.info("deleted %s (learner.keep_checkpoints: %d)", old, keep)
    return path


def load_learner(path: str | Path, parts: LearnerParts, dist: Any) -> int:
    """Restore ``parts`` from a checkpoint directory (or a checkpoint root holding ``latest``:
    its newest intact checkpoint, a damaged newer one passed over with a line saying so);
    returns the checkpoint's version. Every rank calls this; a sharded checkpoint resumes on
    any number of ranks, a one-process one only in one process."""
    path = Path(path)
    if (path / "latest").exists():
        path = newest_intact_checkpoint(path)
    if is_sharded(path):
        state = load_sharded_checkpoint(path, parts.modules(), parts.optimizer, parts.generator)
    elif dist.sharded:
        raise ValueError(
            f"{path}: a one-process checkpoint cannot be resumed under torchrun; start from "
            "its weights with model.init_from instead (optimizer state is not carried over)"
        )
    else:
        state = load_checkpoint(
            path, parts.model, parts.optimizer, parts.generator, parts.value_head
        )
    parts.restore(state, path)
    log.info("resumed from %s at version %d", path, state.version)
    return state.version


def newest_intact_checkpoint(root: Path) -> Path:
    """The newest checkpoint in ``root`` that matches its manifest (``CheckpointError``
    when none does)."""
    path, skipped = newest_intact(root)
    for damaged, why in skipped:
        log.warning("checkpoint %s is damaged (%s): passed over", damaged, why)
    if path is None:
        reasons = "; ".join(f"{p.name}: {why}" for p, why in skipped)
        raise CheckpointError(f"{root}: no intact checkpoint to resume from ({reasons})")
    if skipped:
        log.warning("resuming from %s, the newest intact checkpoint", path)
    return path


def save_checkpoint(
    directory: str | Path,
    state: TrainingState,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    extra: torch.nn.Module | None = None,
) -> Path:
    """Write a checkpoint for ``state.version``; returns its path."""
    root = Path(directory)
    final = root / f"step_{state.version:08d}"
    tmp = root / f".tmp_step_{state.version:08d}"

    def write() -> None:
        _clear(tmp)  # a try cut short by a descriptor shortage may have left it
        try:
            tmp.mkdir(parents=True)
            save_model(model, str(tmp / "model.safetensors"))
            if extra is not None:
                save_file(
                    {k: v.contiguous() for k, v in extra.state_dict().items()},
                    str(tmp / "extra.safetensors"),
                )
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(_rng_state(generator), tmp / "rng.pt")
            (tmp / "state.json").write_text(json.dumps(state.__dict__, indent=1))
            _finish(tmp, final)
        except Exception as e:  # noqa: BLE001 - the writers' errors, sorted by _failed_write
            raise _failed_write(tmp, e) from None

    # no descriptor left (a flood of connections holds them): wait for one and write again
    with_descriptors(write, f"writing checkpoint {final}")
    return final


def save_sharded_checkpoint(
    directory: str | Path,
    state: TrainingState,
    modules: nn.ModuleDict,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    dist: Any,
) -> Path:
    """Write a DCP checkpoint for ``state.version`` from every rank (a collective); returns its
    path. ``modules`` holds the policy as "policy" (and the value head as "value_head")."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(directory)
    final = root / f"step_{state.version:08d}"
    tmp = root / f".tmp_step_{state.version:08d}"
    if dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    model_sd, optim_sd = get_state_dict(modules, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / DCP_DIR))
    if dist.is_main:
        try:
            torch.save(_rng_state(generator), tmp / "rng.pt")
            meta = {**state.__dict__, "world_size": dist.world_size}
            (tmp / "state.json").write_text(json.dumps(meta, indent=1))
            _finish(tmp, final)
        except Exception as e:  # noqa: BLE001 - sorted by _failed_write
            raise _failed_write(tmp, e) from None
    dist.barrier()
    return final


def load_sharded_checkpoint(
    path: str | Path,
    modules: nn.ModuleDict,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
) -> TrainingState:
    """Restore a DCP checkpoint into the given objects (on any number of ranks, or in one
    process) and return its ``TrainingState``."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    check_intact(path)
    model_sd, optim_sd = get_state_dict(modules, optimizer)
    check_compatible(path, model_sd)
    _dcp_load({"model": model_sd, "optim": optim_sd}, path)
    set_state_dict(modules, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
    _set_rng_state(torch.load(path / "rng.pt", weights_only=True), generator)
    meta = _state_fields(json.loads((path / "state.json").read_text()))
    meta.pop("world_size", None)
    return TrainingState(**meta)


def is_sharded(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint written by ``torch.distributed.checkpoint``."""
    return (Path(path) / DCP_DIR / ".metadata").exists()


def check_compatible(path: str | Path, expected: dict[str, torch.Tensor]) -> None:
    """Refuse a checkpoint whose tensors do not fit ``expected`` (the model's state dict, under
    the names the checkpoint uses), naming the first differences: another model's tensors are
    missing, another vocabulary size changes the embedding's shape."""
    saved = _saved_shapes(Path(path))
    sharded = is_sharded(path)
    problems = []
    for name, t in expected.items():
        shape = saved.get(name)
        if shape is None:
            if sharded:  # a one-process file stores tied tensors once
                problems.append(f"{name} missing")
        elif shape != tuple(t.shape):
            problems.append(f"{name} is {shape} there, {tuple(t.shape)} here")
    if problems:
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        shown = "; ".join(problems[:5]) + more
        raise ValueError(f"{path}: checkpoint does not fit the model: {shown}")


def _saved_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes stored in a checkpoint, by name (the policy's and value head's names as
    the learner's state dicts give them; a sharded checkpoint's "model." prefix removed)."""
    if is_sharded(path):
        import torch.distributed.checkpoint as dcp

        meta = dcp.FileSystemReader(str(path / DCP_DIR)).read_metadata().state_dict_metadata
        return {
            k.removeprefix("model."): tuple(m.size)
            for k, m in meta.items()
            if k.startswith("model.") and hasattr(m, "size")
        }
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118


def load_sharded_policy(path: str | Path, model: nn.Module) -> None:
    """Only the policy's weights from a DCP checkpoint, into ``model`` in one process (eval,
    ``--init-from``, export): no optimizer, no value head."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    modules = nn.ModuleDict({"policy": model})
    sd = get_model_state_dict(modules)
    check_compatible(path, sd)
    _dcp_load({"model": sd}, path)
    set_model_state_dict(modules, sd)


def _dcp_load(state: dict[str, Any], path: Path) -> None:
    """``dcp.load`` into ``state`` in place; in one process without its warning that it is
    loading in one process (intended here: eval, export, a one-process resume)."""
    import warnings

    import torch.distributed.checkpoint as dcp

    single = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    with warnings.catch_warnings():
        if single:
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, checkpoint_id=str(path / DCP_DIR), no_dist=single)


def prune_checkpoints(directory: str | Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints in ``directory`` (by step; the
    one ``latest`` names is always kept); returns the deleted paths."""
    root = Path(directory)
    newest = latest_checkpoint(root)
    steps = sorted(
        (p for p in root.glob("step_*") if p.is_dir() and p.name[5:].isdigit()),
        key=lambda p: int(p.name[5:]),
    )
    old = [p for p in steps[: max(len(steps) - keep, 0)] if p != newest]
    for path in old:
        shutil.rmtree(path)
    return old


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory``, or None."""
    pointer = Path(directory) / "latest"
    return Path(directory) / pointer.read_text().strip() if pointer.exists() else None


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    extra: torch.nn.Module | None = None,
) -> TrainingState:
    """Restore a checkpoint into the given objects (in place) and return its ``TrainingState``;
    ``CheckpointError`` (one line) for one that is damaged or cannot be read."""
    path = Path(path)
    check_intact(path)
    try:
        return _load_checkpoint(path, model, optimizer, generator, extra)
    except CheckpointError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
        reason = " ".join(str(e).split())[:300]
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(e).__name__}: "
                              f"{reason})") from None  # fmt: skip


def _load_checkpoint(path, model, optimizer, generator, extra) -> TrainingState:
    device = next(model.parameters()).device
    check_compatible(path, model.state_dict())
    missing, unexpected = load_model(model, str(path / "model.safetensors"), device=str(device))
    if missing or unexpected:
        raise ValueError(f"{path}: checkpoint does not fit the model ({missing=}, {unexpected=})")
    if extra is not None:
        extra.load_state_dict(load_file(str(path / "extra.safetensors"), device=str(device)))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    _set_rng_state(torch.load(path / "rng.pt", weights_only=True), generator)
    return TrainingState(**_state_fields(json.loads((path / "state.json").read_text())))


def _rng_state(generator: torch.Generator) -> dict[str, Any]:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "generator": generator.get_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]],
        "random": list(random.getstate()),
    }


def _set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy(), *rest))
    version, internal, gauss = state["random"]
    random.setstate((version, tuple(internal), gauss))

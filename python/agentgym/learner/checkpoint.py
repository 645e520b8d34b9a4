"""Checkpoints that resume exactly: weights, optimizer, version, horizon state and RNG.

Layout of ``<dir>/step_<version>/``:
  model.safetensors   policy weights (shared tensors such as tied embeddings handled)
  extra.safetensors   other trainable modules (the value head), if any
  optimizer.pt        optimizer state (loaded with ``weights_only=True``: no arbitrary code)
  rng.pt              torch CPU RNG, the learner's shuffling generator, numpy and random states
  state.json          version, horizon controller state, counters
``<dir>/latest`` names the newest complete checkpoint; a checkpoint is written to a temporary
directory and renamed into place, so a crash never leaves a half-written ``latest``.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model


@dataclass
class TrainingState:
    """Everything besides tensors that a resumed learner must get back."""

    version: int
    horizon: dict[str, Any]
    counters: dict[str, Any]


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
    shutil.rmtree(tmp, ignore_errors=True)
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
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (root / "latest.tmp").write_text(final.name)
    (root / "latest.tmp").rename(root / "latest")
    return final


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
    """Restore a checkpoint into the given objects (in place) and return its ``TrainingState``."""
    path = Path(path)
    device = next(model.parameters()).device
    missing, unexpected = load_model(model, str(path / "model.safetensors"), device=str(device))
    if missing or unexpected:
        raise ValueError(f"{path}: checkpoint does not fit the model ({missing=}, {unexpected=})")
    if extra is not None:
        extra.load_state_dict(load_file(str(path / "extra.safetensors"), device=str(device)))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    _set_rng_state(torch.load(path / "rng.pt", weights_only=True), generator)
    return TrainingState(**json.loads((path / "state.json").read_text()))


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

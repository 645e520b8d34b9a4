"""Per-update metrics: one JSON object per line, mirrored to TensorBoard and Weights & Biases
when the config asks (the config check makes sure those packages are there)."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from agentgym.durable import DISK_FULL, DiskFull, with_descriptors

log = logging.getLogger(__name__)


class MetricsWriter:
    """Appends ``{"step": n, "time": unix seconds, ...}`` lines to a JSONL file (the time a
    step's metrics were written: time-to-first-update, curves over wall time); mirrors scalars to
    TensorBoard.

    TensorBoard needs the ``tensorboard`` package; when it is missing the writer says so once
    in the log and goes on with JSONL only. ``wandb`` (a dict: ``project``, ``name``, ``dir``,
    ``mode``, ``config``) starts a Weights & Biases run the scalars also go to.
    """

    def __init__(
        self,
        path: str | Path | None,
        tensorboard_dir: str | Path | None = None,
        wandb: dict[str, Any] | None = None,
    ):
        self._file = None
        self._path = path
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            _drop_torn_line(Path(path))
            # a flood of connections may hold every descriptor just now: wait for one
            opened = lambda: open(path, "a", buffering=1)  # noqa: E731, SIM115
            self._file = with_descriptors(opened, f"opening {path}")
        self._tb = _tensorboard(tensorboard_dir) if tensorboard_dir else None
        self._wandb = _wandb_run(wandb) if wandb else None

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        """Record the metrics of update ``step``."""
        if self._file is not None:
            metrics = {k: _finite_or_none(v) for k, v in metrics.items()}
            row = {"step": step, "time": round(time.time(), 3), **metrics}
            try:
                self._file.write(json.dumps(row, allow_nan=False, default=_jsonable) + "\n")
            except OSError as e:
                if e.errno in DISK_FULL:
                    raise DiskFull(self._path, e) from None
                raise
        scalars = {
            k: v for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(v)
        }
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        """Flush and close."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"metric of type {type(value).__name__} is not JSON")


def _tensorboard(directory: str | Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        log.warning("tensorboard is not installed: metrics go to the JSONL file only")
        return None
    return SummaryWriter(str(directory))


def _wandb_run(settings: dict[str, Any]) -> Any:
    import wandb

    Path(settings["dir"]).mkdir(parents=True, exist_ok=True)
    return wandb.init(
        project=settings["project"],
        name=settings.get("name"),
        dir=str(settings["dir"]),
        mode=settings.get("mode", "online"),
        config=settings.get("config"),
        resume="allow",
        id=settings.get("id"),
    )


def _drop_torn_line(path: Path) -> None:
    """Cut a last line without its newline (a learner killed while writing it), which the next
    record would be appended to and lost with."""
    try:
        with path.open("rb+") as f:
            size = f.seek(0, 2)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            start = max(size - (1 << 20), 0)
            f.seek(start)
            tail = f.read()
            keep = start + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
            f.truncate(keep)
            log.warning("%s: dropped a torn last line (%d bytes)", path, size - keep)
    except FileNotFoundError:
        return

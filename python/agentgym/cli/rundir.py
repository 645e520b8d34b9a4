"""What a training run leaves in its run directory, and the checks before a run starts in one.

A run directory holds one training run: ``agentgym train`` refuses a directory that already
holds one (``--resume`` continues it, ``--overwrite`` deletes its files first), so two runs'
metrics, trajectories and checkpoints never mix. Inputs that other commands put there (the
tiny model in ``model/``, ``sft/``, demos) are not the run's and stay. ``agentgym sft`` and
``agentgym dpo`` keep their own run in ``RUN_DIR/sft/`` and ``RUN_DIR/dpo/`` under the same
rules (``offline_files``).

A run holds its directory locked (``lock_run_dir``: ``RUN_DIR/.lock``, ``flock``) from its
start until its last process exits: the launcher takes it and its children inherit it, so a
second ``agentgym train`` (a ``--resume`` included) is refused while any process of the first
is alive, naming who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from agentgym.cli.common import RESOLVED_CONFIG

# files and folders a training run writes; any of them means the directory holds a run
RUN_FILES = (
    RESOLVED_CONFIG, "metrics.jsonl", "checkpoints", "trajectories.jsonl", "summary.json",
    "logs", "actors", "actors.json", "weights", "endpoints.json", "transport_keys.json",
)  # fmt: skip
EVAL_DIR = "eval"
LOCK_FILE = ".lock"
"""Held (``flock``) by the processes of the run using the run dir; says who took it."""
LOCK_ENV = "AGENTGYM_RUN_LOCK"
"""Set in the children of a launcher holding the lock: the descriptor they inherited."""
_STEP = re.compile(r"step_(\d+)$")


class RunDirBusy(RuntimeError):
    """The run dir is locked by another run's processes; the message names the holder."""


def lock_run_dir(run_dir: Path, what: str) -> int:
    """Lock ``run_dir`` for this process and the children that inherit the returned descriptor
    (it stays locked until the last of them exits: ``kill -9`` of the launcher leaves it
    locked while its children live). ``RunDirBusy`` when another run holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(run_dir / LOCK_FILE, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunDirBusy(
            f"{run_dir} is in use by {holder}: wait for that run to end, or stop it (its "
            "processes hold the run dir until the last one exits)"
        ) from None
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{what} (pid {os.getpid()}, since {since}: {' '.join(sys.argv)[:300]})\n"
              .encode(), 0)  # fmt: skip
    return fd


def run_files(run_dir: Path) -> list[str]:
    """The names in ``run_dir`` that a training run wrote (a folder with a trailing ``/``),
    and its checkpoints' eval results (``eval/step_*.json`` and their episodes)."""
    found = [n + "/" * (run_dir / n).is_dir() for n in RUN_FILES if (run_dir / n).exists()]
    evals = sorted([*(run_dir / EVAL_DIR).glob("step_*.json"),
                    *(run_dir / EVAL_DIR).glob("step_*.episodes.jsonl")])  # fmt: skip
    return found + [f"{EVAL_DIR}/{p.name}" for p in evals]


OFFLINE_FILES = (RESOLVED_CONFIG, "metrics.jsonl", "checkpoints")
"""What ``agentgym sft`` / ``dpo`` write in ``RUN_DIR/<section>/``."""


def offline_files(run_dir: Path, section: str) -> list[str]:
    """What an ``agentgym sft`` (``section`` "sft") or ``dpo`` run wrote, as paths relative
    to ``run_dir``: its files in ``RUN_DIR/<section>/`` and its checkpoints' eval results
    (``eval/<section>_step_*``)."""
    out = run_dir / section
    found = [f"{section}/{n}" + "/" * (out / n).is_dir() for n in OFFLINE_FILES
             if (out / n).exists()]  # fmt: skip
    evals = sorted([*(run_dir / EVAL_DIR).glob(f"{section}_step_*.json"),
                    *(run_dir / EVAL_DIR).glob(f"{section}_step_*.episodes.jsonl")])  # fmt: skip
    return found + [f"{EVAL_DIR}/{p.name}" for p in evals]


def clear_run(run_dir: Path) -> list[str]:
    """Delete what ``run_files`` lists; returns those names."""
    return delete(run_dir, run_files(run_dir))


def delete(run_dir: Path, names: list[str]) -> list[str]:
    """Delete ``names`` (files, or folders with a trailing ``/``) in ``run_dir``; returns them."""
    for name in names:
        path = run_dir / name.rstrip("/")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return names


def checkpoint_step(run_dir: Path) -> int | None:
    """The step (learner version) of the run's newest checkpoint, or None without one."""
    pointer = run_dir / "checkpoints" / "latest"
    return step_of(Path(pointer.read_text().strip())) if pointer.exists() else None


def step_of(checkpoint: Path) -> int | None:
    """The step of a learner checkpoint directory (``step_00000036``: 36), else None."""
    match = _STEP.search(checkpoint.name)
    return int(match.group(1)) if match else None


def trim_metrics(run_dir: Path, step: int) -> list[int]:
    """Drop the lines of ``metrics.jsonl`` for steps after ``step``: updates made after the
    newest checkpoint (a learner that was killed), which a resumed run makes again, so each
    step appears once; and a torn last line (no newline: the learner died writing it), which
    the next line would otherwise be appended to. Returns the dropped steps."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    kept, dropped = [], []
    text = path.read_text(errors="replace")
    torn = not text.endswith("\n") and bool(text)
    lines = text.splitlines(keepends=True)
    if torn:
        lines.pop()
    for line in lines:
        try:
            record_step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            kept.append(line)  # not a metrics record: not ours to judge
            continue
        (dropped.append(record_step) if record_step > step else kept.append(line))
    if dropped or torn:
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(kept))
        tmp.replace(path)
    return dropped


def refuse_existing(run_dir: Path) -> str | None:
    """The message refusing a fresh run in ``run_dir`` when it holds a run, else None."""
    return refusal(run_dir, "a training run", run_files(run_dir), checkpoint_step(run_dir),
                   f"agentgym train --resume {run_dir}")  # fmt: skip


def refusal(where: Path, what: str, names: list[str], step: int | None, resume: str) -> str | None:
    """The message refusing a fresh run in ``where``, which holds ``what`` (its files
    ``names``, its newest checkpoint at ``step``), with the ways on; None without files."""
    if not names:
        return None
    state = f"its newest checkpoint is step {step}" if step is not None else "no checkpoint"
    return (
        f"{where} already holds {what} ({', '.join(names)}; {state}).\n"
        f"  continue it:  {resume}\n"
        "  start over:   the same command with --overwrite (deletes those files first)\n"
        "  or give the new run another run_dir (--set run_dir=...)"
    )


def eval_out(run_dir: Path, checkpoint: Path, step: int | None) -> Path:
    """Where ``agentgym eval`` writes its result in the run dir: ``eval/step_N.json`` for the
    run's checkpoints, ``eval/<folder>_step_N.json`` for another folder's checkpoints in the
    run dir (``sft``), ``eval/<name>.json`` for a model directory (``model``: untrained)."""
    if step is None:
        return run_dir / EVAL_DIR / f"{checkpoint.name}.json"
    try:
        parts = checkpoint.resolve().relative_to(run_dir.resolve()).parts[:-2]
    except ValueError:  # checkpoints of another run dir
        parts = (checkpoint.resolve().parent.parent.name,)
    prefix = "".join(f"{p}_" for p in parts)
    return run_dir / EVAL_DIR / f"{prefix}step_{step}.json"

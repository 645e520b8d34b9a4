"""What a training run leaves in its run directory, and the checks before a run starts in one.

A run directory holds one training run: ``agentgym train`` refuses a directory that already
holds one (``--resume`` continues it, ``--overwrite`` deletes its files first), so two runs'
metrics, trajectories and checkpoints never mix. Inputs that other commands put there (the
tiny model in ``model/``, ``sft/``, demos) are not the run's and stay. ``agentgym sft`` and
``agentgym dpo`` keep their own run in ``RUN_DIR/sft/`` and ``RUN_DIR/dpo/`` under the same
rules (``offline_files``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from agentgym.cli.common import RESOLVED_CONFIG

# files and folders a training run writes; any of them means the directory holds a run
RUN_FILES = (
    RESOLVED_CONFIG, "metrics.jsonl", "checkpoints", "trajectories.jsonl", "summary.json",
    "logs", "actors", "actors.json", "weights", "endpoints.json", "transport_keys.json",
)  # fmt: skip
EVAL_DIR = "eval"
_STEP = re.compile(r"step_(\d+)$")


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
    step appears once. Returns the dropped steps."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    kept, dropped = [], []
    for line in path.read_text().splitlines(keepends=True):
        try:
            record_step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            kept.append(line)  # not a metrics record: not ours to judge
            continue
        (dropped.append(record_step) if record_step > step else kept.append(line))
    if dropped:
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

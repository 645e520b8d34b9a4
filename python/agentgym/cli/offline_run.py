"""The run an ``agentgym sft`` or ``agentgym dpo`` keeps in ``RUN_DIR/sft/`` (``dpo/``): one run
per folder, resumable, stopped at a checkpoint.

As with ``agentgym train``: a folder that holds a run is refused (``--resume RUN_DIR`` continues
it from its newest checkpoint with its own saved ``config.yaml``, ``--overwrite`` deletes its
files first), so two runs' metrics never mix; Ctrl-C or SIGTERM ends the step under way,
writes a checkpoint and exits with code 130 and the resume command.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from agentgym.cli.common import RESOLVED_CONFIG, on_terminate
from agentgym.cli.rundir import checkpoint_step, delete, offline_files, refusal

NAMES = {"sft": "an SFT run", "dpo": "a DPO run"}


def claim(run_dir: Path, section: str, *, overwrite: bool) -> None:
    """Make ``RUN_DIR/<section>`` free for a new run: refuse one that holds a run, or with
    ``overwrite`` delete that run's files (saying which)."""
    names = offline_files(run_dir, section)
    if overwrite:
        if names:
            delete(run_dir, names)
            print(f"agentgym {section}: --overwrite: deleted {', '.join(names)} in {run_dir}")
        return
    out = run_dir / section
    message = refusal(out, NAMES[section], names, checkpoint_step(out),
                      f"agentgym {section} --resume {run_dir}")  # fmt: skip
    if message is not None:
        raise SystemExit(f"agentgym {section}: {message}")


def resume_point(run_dir: Path, section: str, cfg: Any) -> Path:
    """The checkpoint a resumed run continues from, given the run's ``sft``/``dpo`` section
    ``cfg``. Refuses (SystemExit) a folder without a checkpoint, a change of the settings the
    order of steps depends on, and a finished run (exit code 1, with what to raise)."""
    out = run_dir / section
    step = checkpoint_step(out)
    if step is None:
        raise SystemExit(
            f"agentgym {section}: --resume: {out} has no checkpoint to resume from (the run "
            f"stopped before its first one); start it over with: agentgym {section} "
            f"{out / RESOLVED_CONFIG} --overwrite"
        )
    checkpoint = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    plan = json.loads((checkpoint / "state.json").read_text())["counters"]
    for key in ("batch_size", "seed"):
        if key in plan and plan[key] != getattr(cfg, key):
            raise SystemExit(
                f"agentgym {section}: --resume: {section}.{key} is {getattr(cfg, key)}, the run "
                f"used {plan[key]}: the order of its steps depends on it; resume with "
                f"--set {section}.{key}={plan[key]}"
            )
    total = cfg.epochs * math.ceil(plan.get("items", 0) / cfg.batch_size)
    if "items" in plan and step >= total:
        raise SystemExit(
            f"agentgym {section}: {out} is finished: its checkpoint is at step {step} of "
            f"{total} ({cfg.epochs} epochs). To train further: agentgym {section} --resume "
            f"{run_dir} --set {section}.epochs={2 * cfg.epochs}"
        )
    return checkpoint


class StopRequest:
    """Set by Ctrl-C or SIGTERM: the loop checkpoints after the step under way and returns. A
    second one stops at once (exit code 130, no checkpoint)."""

    def __init__(self, section: str):
        self.section = section
        self.requested = False

    def install(self) -> StopRequest:
        on_terminate(self._request)
        return self

    def _request(self) -> None:
        if self.requested:
            raise SystemExit(130)
        self.requested = True
        print(
            f"\nagentgym {self.section}: stopping after this step (a checkpoint is written "
            "first; Ctrl-C again stops at once)",
            file=sys.stderr,
            flush=True,
        )

    def __call__(self) -> bool:
        return self.requested

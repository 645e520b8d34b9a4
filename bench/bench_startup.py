"""Start-up of `agentgym train`: time to the first update, and where the time before it goes.

Runs `agentgym train CONFIG` (a fresh run dir each time, so the tiny model is built too) and
reads the time of each phase from the run's own files: the learner's "serving at" log line, the
first actor's "engine ready" log line, the first and last metrics rows (each carries the wall
time it was written). `--pythonpath DIR` runs another checkout's Python package (with the
extension copied in) for a before/after in one run:

    python bench/bench_startup.py --runs 3
    python bench/bench_startup.py --runs 3 --pythonpath /tmp/before/python
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _log_time(path: Path, needle: str) -> float | None:
    """Unix time of the first log line containing ``needle``."""
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        m = _STAMP.match(line)
        if m and needle in line:
            return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def one_run(config: str, steps: int, pythonpath: str | None, base: Path, k: int) -> dict:
    """One `agentgym train` run; seconds from launch to each phase."""
    run_dir = base / f"run{k}"
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "agentgym.cli.main", "train", config, "--quiet",
           "--set", f"run_dir={run_dir}", "--set", f"learner.max_steps={steps}"]  # fmt: skip
    start = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    end = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"agentgym train failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    out = {
        "learner serving": _log_time(run_dir / "logs" / "learner.log", "serving at"),
        "actor engine ready": _log_time(
            run_dir / "logs" / "actor0.log", "engine and env pool ready"
        ),
        "first update": rows[0].get("time"),
        f"update {len(rows)} (last)": rows[-1].get("time"),
        "exit": end,
    }
    return {k: (v - start if v is not None else None) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=36, help="learner.max_steps of each run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pythonpath", default=None, help="run another checkout's python/ dir")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="agentgym-bench-startup-"))
    results = [one_run(args.config, args.steps, args.pythonpath, base, k) for k in range(args.runs)]
    code = args.pythonpath or "installed"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; {args.config}, ", end="")
    print(f"{args.steps} steps, {args.runs} runs; code: {code}\n")
    print("| seconds from `agentgym train` | median | runs |\n|---|---:|---|")
    for phase in results[0]:
        values = [r[phase] for r in results if r[phase] is not None]
        if values:
            runs = ", ".join(f"{v:.1f}" for v in values)
            print(f"| {phase} | {statistics.median(values):.1f} | {runs} |")


if __name__ == "__main__":
    main()

"""``agentgym compare BASE.json NEW.json``: two eval results of the same tasks, paired by task.

Held-out success rates of two checkpoints differ by more than their own noise only when the
difference is large against its standard error. Both results evaluate the same task ids (the
config's ``tasks.eval``), so the difference is taken per task (NEW's mean success over its
samples minus BASE's) and its standard error is the spread of those per-task differences over
the square root of the number of tasks: the paired standard error, much smaller than the two
unpaired ones because easy and hard tasks are easy and hard for both. Rows follow ``agentgym
eval``'s: each env, each env's levels, and for several envs ``macro`` (the mean of the env
differences; its error combines theirs). Only tasks present in both results are compared, and
the counts say so; results taken under other settings (turn cap, samples, temperature) are
compared with a note naming what differs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentgym.cli.eval import MACRO


class CompareError(Exception):
    """A result file that cannot be compared; the message names the file and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", help="eval result JSON (RUN_DIR/eval/...json): the baseline")
    parser.add_argument("new", help="eval result JSON of the same tasks: the one compared")
    parser.add_argument("--out", default=None, help="also write the comparison as JSON here")


def run(args: argparse.Namespace) -> int:
    try:
        base, new = load_result(Path(args.base)), load_result(Path(args.new))
        result = compare(base, new)
    except CompareError as e:
        print(f"agentgym compare: {e}", file=sys.stderr)
        return 2
    for note in result["notes"]:
        print(f"note: {note}")
    print(format_table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


def load_result(path: Path) -> dict[str, Any]:
    """An ``agentgym eval`` result with its per-episode list."""
    try:
        result = json.loads(path.read_text())
    except OSError as e:
        raise CompareError(f"{path}: cannot read it: {e.strerror}") from None
    except ValueError as e:
        raise CompareError(f"{path}: not JSON ({e})") from None
    episodes = result.get("episodes") if isinstance(result, dict) else None
    if not isinstance(episodes, list) or not all(
        isinstance(e, dict) and "task_id" in e and "level" in e for e in episodes
    ):
        raise CompareError(f"{path}: not an agentgym eval result (no per-episode list)")
    return result


def _per_task(result: dict[str, Any]) -> dict[tuple[str, int], tuple[str, float]]:
    """(env, task id) -> (level, mean success over the task's samples)."""
    env = result.get("env", "")
    success: dict[tuple[str, int], list[float]] = defaultdict(list)
    level: dict[tuple[str, int], str] = {}
    for e in result["episodes"]:
        key = (e.get("env", env), int(e["task_id"]))
        success[key].append(1.0 if e.get("success") else 0.0)
        level[key] = str(e["level"])
    return {key: (level[key], sum(s) / len(s)) for key, s in success.items()}


def _paired(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    n = len(pairs)
    diffs = [b - a for a, b in pairs]
    mean = sum(diffs) / n
    se = None
    if n > 1:
        var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
        se = math.sqrt(var / n)
    return {
        "tasks": n,
        "base": sum(a for a, _ in pairs) / n,
        "new": sum(b for _, b in pairs) / n,
        "diff": mean,
        "se": se,
    }


def compare(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Per-row means of both results over their common tasks, the paired difference and its
    standard error (``None`` for a row of one task)."""
    a, b = _per_task(base), _per_task(new)
    common = sorted(a.keys() & b.keys())
    if not common:
        raise CompareError("the two results have no task in common (other eval tasks or envs?)")
    notes = []
    only_a, only_b = len(a.keys() - b.keys()), len(b.keys() - a.keys())
    if only_a or only_b:
        notes.append(
            f"compared on the {len(common)} tasks in both; {only_a} only in BASE, {only_b} only "
            "in NEW"
        )
    for key, what in (("horizon_cap", "turn cap"), ("k", "samples"), ("temperature", "temp")):
        if base.get(key) != new.get(key):
            notes.append(f"{what} differs: BASE {base.get(key)}, NEW {new.get(key)}")
    envs = list(dict.fromkeys(env for env, _ in common))
    multi = len(envs) > 1 or "envs" in base
    groups: dict[str, list[tuple[float, float]]] = {}
    for env in envs:
        groups[env] = [(a[k][1], b[k][1]) for k in common if k[0] == env]
        levels = sorted({a[k][0] for k in common if k[0] == env})
        for level in levels:
            name = f"{env}: {level}" if multi else level
            groups[name] = [(a[k][1], b[k][1]) for k in common if k[0] == env and a[k][0] == level]
    rows = {name: _paired(pairs) for name, pairs in groups.items()}
    if len(envs) > 1:
        env_rows = [rows[env] for env in envs]
        ses = [r["se"] for r in env_rows]
        rows[MACRO] = {
            "tasks": sum(r["tasks"] for r in env_rows),
            "base": sum(r["base"] for r in env_rows) / len(envs),
            "new": sum(r["new"] for r in env_rows) / len(envs),
            "diff": sum(r["diff"] for r in env_rows) / len(envs),
            "se": None if None in ses else math.sqrt(sum(s * s for s in ses)) / len(envs),  # type: ignore[operator]
        }
    return {"rows": rows, "notes": notes, "envs": envs}


def format_table(result: dict[str, Any]) -> str:
    """The comparison as a fixed-width text table."""
    w = max(14, *(len(name) + 2 for name in result["rows"]))
    head = f"{'':<{w}}{'tasks':>7}{'base':>8}{'new':>8}{'new-base':>10}{'(SE)':>9}"
    lines = [head, "-" * len(head)]
    for name, r in result["rows"].items():
        se = f"({r['se']:.3f})" if r["se"] is not None else "(-)"
        lines.append(
            f"{name:<{w}}{r['tasks']:>7}{r['base']:>8.3f}{r['new']:>8.3f}{r['diff']:>+10.3f}{se:>9}"
        )
    lines.append(
        "base, new: mean success over the tasks both evaluated (each task's samples averaged); "
        "new-base: their paired difference; SE: its standard error over tasks (a difference "
        "within ~2 SE of 0 is noise)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="agentgym compare")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))

"""``agentgym compare BASE.json NEW.json``: two eval results of the same tasks, paired by task.

Besides success, the mean episode score and the share of invalid replies (no usable action) are
paired the same way, since in AgentGym's reply format these often move before success does.

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


METRICS = ("success", "score", "invalid")
"""What is compared per task: mean success and score over its samples, and its share of
replies without a usable action (None where the result does not record it)."""


def _per_task(result: dict[str, Any]) -> dict[tuple[str, int], tuple[str, dict[str, float]]]:
    """(env, task id) -> (level, {metric: the task's value}) for ``METRICS``."""
    env = result.get("env", "")
    episodes: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    level: dict[tuple[str, int], str] = {}
    for e in result["episodes"]:
        key = (e.get("env", env), int(e["task_id"]))
        episodes[key].append(e)
        level[key] = str(e["level"])
    return {key: (level[key], _task_values(eps)) for key, eps in episodes.items()}


def _task_values(episodes: list[dict[str, Any]]) -> dict[str, float]:
    n = len(episodes)
    values = {
        "success": sum(1.0 if e.get("success") else 0.0 for e in episodes) / n,
        "score": sum(float(e.get("score", 0.0)) for e in episodes) / n,
    }
    turns = sum(int(e.get("turns", 0)) for e in episodes)
    if turns and all("invalid_replies" in e for e in episodes):
        values["invalid"] = sum(int(e["invalid_replies"]) for e in episodes) / turns
    if turns and all("budget_cut_replies" in e for e in episodes):
        values["invalid_budget"] = sum(int(e["budget_cut_replies"]) for e in episodes) / turns
    return values


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
    notes += setting_notes(base.get("settings"), new.get("settings"))
    envs = list(dict.fromkeys(env for env, _ in common))
    multi = len(envs) > 1 or "envs" in base
    groups: dict[str, list[tuple[str, int]]] = {}
    for env in envs:
        groups[env] = [k for k in common if k[0] == env]
        for level in sorted({a[k][0] for k in common if k[0] == env}):
            name = f"{env}: {level}" if multi else level
            groups[name] = [k for k in common if k[0] == env and a[k][0] == level]
    rows = {name: _row(a, b, keys) for name, keys in groups.items()}
    if len(envs) > 1:
        rows[MACRO] = _macro([rows[env] for env in envs])
    return {"rows": rows, "notes": notes, "envs": envs}


COMPARED_SETTINGS = (
    ("eval_seed", "eval.seed"), ("tasks", "eval tasks"), ("limit", "--limit"),
    ("top_k", "top_k"), ("top_p", "top_p"), ("max_new_tokens", "engine.max_new_tokens"),
    ("groups_in_flight", "eval.groups_in_flight"), ("max_batch_size", "engine batch size"),
    ("bf16", "bf16"), ("model", "base model"), ("tokenizer", "tokenizer"),
)  # fmt: skip
"""Recorded eval settings (``agentgym.cli.eval.eval_settings``) that decide the episodes
besides the weights: a difference is named in the comparison's notes. Sampled tokens depend
on batching too (rows sampled together see other bf16 roundings): docs/training.md gives the
eval's own noise floor."""


def setting_notes(base: dict | None, new: dict | None) -> list[str]:
    """A note per recorded setting in which the two results differ (or one saying a result
    records none: an eval from before results kept their settings)."""
    if base is None or new is None:
        missing = " and ".join(n for n, r in (("BASE", base), ("NEW", new)) if r is None)
        return [f"{missing} records no eval settings (seed, batching): they may differ"]
    return [
        f"{what} differs: BASE {base.get(key)}, NEW {new.get(key)}"
        for key, what in COMPARED_SETTINGS
        if base.get(key) != new.get(key)
    ]


def _row(a: dict, b: dict, keys: list[tuple[str, int]]) -> dict[str, Any]:
    """Success paired over ``keys`` (the row's own fields), and each other metric paired over
    the tasks both results record it for (None where none)."""
    out = _paired([(a[k][1]["success"], b[k][1]["success"]) for k in keys])
    for metric in METRICS[1:]:
        pairs = [(a[k][1][metric], b[k][1][metric]) for k in keys
                 if metric in a[k][1] and metric in b[k][1]]  # fmt: skip
        out[metric] = _paired(pairs) if pairs else None
    return out


def _macro(env_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of the env rows; its standard error combines theirs."""

    def mean_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
        n, ses = len(rows), [r["se"] for r in rows]
        return {
            "tasks": sum(r["tasks"] for r in rows),
            "base": sum(r["base"] for r in rows) / n,
            "new": sum(r["new"] for r in rows) / n,
            "diff": sum(r["diff"] for r in rows) / n,
            "se": None if None in ses else math.sqrt(sum(s * s for s in ses)) / n,  # type: ignore[operator]
        }

    out = mean_of(env_rows)
    for metric in METRICS[1:]:
        parts = [r[metric] for r in env_rows]
        out[metric] = None if None in parts else mean_of(parts)
    return out


def format_table(result: dict[str, Any]) -> str:
    """The comparison as a fixed-width text table: success side by side, then the paired
    change of the score and of the invalid-reply share."""
    w = max(14, *(len(name) + 2 for name in result["rows"]))
    head = (
        f"{'':<{w}}{'tasks':>7}{'base':>8}{'new':>8}{'new-base':>10}{'(SE)':>9}"
        f"{'score':>10}{'(SE)':>9}{'invalid':>10}{'(SE)':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in result["rows"].items():
        lines.append(
            f"{name:<{w}}{r['tasks']:>7}{r['base']:>8.3f}{r['new']:>8.3f}{r['diff']:>+10.3f}"
            f"{_se(r['se']):>9}{_change(r.get('score'))}{_change(r.get('invalid'))}"
        )
    lines.append(
        "base, new: mean success over the tasks both evaluated (each task's samples averaged); "
        "new-base: their paired difference; score, invalid: the paired change (new-base) of "
        "the mean episode score and of the share of replies without a usable action; SE: "
        "standard error over tasks (a difference within ~2 SE of 0 is noise)"
    )
    return "\n".join(lines)


def _se(se: float | None) -> str:
    return f"({se:.3f})" if se is not None else "(-)"


def _change(paired: dict[str, Any] | None) -> str:
    if paired is None:
        return f"{'-':>10}{'':>9}"
    return f"{paired['diff']:>+10.3f}{_se(paired['se']):>9}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="agentgym compare")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))

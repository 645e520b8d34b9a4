"""Export BabyAI worlds from minigrid 2.3.1 as AgentGym's BabyAI server builds them.

AgentGym's server (``agentenv-babyai``, which pins ``minigrid<2.5`` and ``gymnasium<1.0``)
answers ``/reset {data_idx}`` with a new ``BabyAI`` object for level ``data_idx % 40`` and seed
``data_idx // 40``: its constructor calls ``gymnasium.make(level)`` and resets the env with the
seed, and the server then resets it once more with the same seed. This script does the same
two resets and writes, per task id, the world the second one leaves as agentgym's layout JSON
(``python/agentgym/envs/reference/minigrid_layout.py``), with the versions it ran under. A reset
that does not finish within ``--timeout`` seconds is written as such, with the call it was
stuck in and the contents of the room it was placing the agent in.

The golden files beside this script were written by it, in a virtual environment holding the
versions AgentGym's server runs::

    python3 -m venv /tmp/minigrid231
    /tmp/minigrid231/bin/pip install minigrid==2.3.1 gymnasium==0.29.1
    /tmp/minigrid231/bin/python tests/envs/minigrid231/export_layouts.py \\
        155 156 2994 4394 10594 16394 36394 69674 --out tests/envs/minigrid231

``--jsonl FILE --tasks A:B`` writes a range of tasks to one JSON-lines file instead (for wider
comparisons; nothing is committed from it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import platform
import signal
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

_REFERENCE = Path(__file__).resolve().parents[3] / "python" / "agentgym" / "envs" / "reference"
BUILT_AS = (
    "AgentGym's agentenv-babyai server: gymnasium.make(level), then reset(seed=data_idx // 40) "
    "twice on that env (BabyAI.__init__, then BabyAIEnv.reset); the world after the second reset"
)


def _load(name: str) -> ModuleType:
    """A module of agentgym's reference folder, loaded by path (no agentgym install needed)."""
    spec = importlib.util.spec_from_file_location(f"_reference_{name}", _REFERENCE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class _Stuck(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Stuck


def provenance() -> dict[str, str]:
    """The versions this export ran under and how the world was built."""
    from importlib.metadata import version

    return {
        "minigrid": version("minigrid"),
        "gymnasium": version("gymnasium"),
        "numpy": version("numpy"),
        "python": platform.python_version(),
        "built_as": BUILT_AS,
        "script": "tests/envs/minigrid231/export_layouts.py",
    }


def _room_rows(env: Any) -> list[str]:
    """The room the agent was being placed in, one string a row (minigrid's object letters)."""
    letters = {"wall": "W", "door": "D", "key": "K", "ball": "A", "box": "B", "goal": "G"}
    room = None
    for f, _ in traceback.walk_tb(sys.exc_info()[2]):
        if f.f_code.co_name == "place_agent" and "room" in f.f_locals:
            room = f.f_locals["room"]
    if room is None:
        return []
    (x0, y0), (w, h) = room.top, room.size
    rows = []
    for y in range(y0, y0 + h):
        cells = (env.grid.get(x, y) for x in range(x0, x0 + w))
        rows.append("".join("." if o is None else letters.get(o.type, "?") for o in cells))
    return rows


def export_task(task_id: int, timeout_s: float, layouts: ModuleType, levels: tuple[str, ...]):
    """The record of one task: its layout, or where its reset got stuck."""
    import gymnasium as gym

    level, seed = levels[task_id % len(levels)], task_id // len(levels)
    env = gym.make(level)
    record: dict[str, Any] = {"task_id": task_id, "level": level, "seed": seed}
    signal.signal(signal.SIGALRM, _on_alarm)
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            env.reset(seed=seed)
            env.reset(seed=seed)
    except _Stuck:
        stack = [f.f_code.co_name for f, _ in traceback.walk_tb(sys.exc_info()[2])]
        record["finishes"] = False
        record["stuck_after_s"] = round(time.perf_counter() - start, 1)
        record["stuck_in"] = " > ".join(dict.fromkeys(n for n in stack if n in _CALLS))
        record["room"] = _room_rows(env.unwrapped)
        return record
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    record["finishes"] = True
    record["layout"] = layouts.export_layout(env)
    return record


_CALLS = ("reset", "_gen_grid", "gen_mission", "place_agent", "place_obj")


def _dumps(record: dict[str, Any]) -> str:
    """JSON with one line per key, and per cell of the layout."""
    layout = record.get("layout")
    if layout is None:
        return json.dumps(record, indent=1) + "\n"
    cells = ",\n".join("   " + json.dumps(c) for c in layout["cells"])
    head = json.dumps({k: v for k, v in layout.items() if k != "cells"}, indent=1)
    layout_text = head[:-2] + ',\n  "cells": [\n' + cells + "\n  ]\n }"
    rest = {k: v for k, v in record.items() if k != "layout"}
    text = json.dumps(rest, indent=1)
    return text[:-2] + ',\n "layout": ' + layout_text.replace("\n", "\n ") + "\n}\n"


def _tasks(spec: str) -> list[int]:
    start, _, stop = spec.partition(":")
    return list(range(int(start), int(stop))) if stop else [int(start)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task_ids", nargs="*", type=int, help="tasks to write one file each")
    parser.add_argument("--out", type=Path, help="folder for task_<id>.json files")
    parser.add_argument("--tasks", help="a range A:B of task ids for --jsonl")
    parser.add_argument("--jsonl", type=Path, help="write the --tasks range to this file")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per reset pair")
    args = parser.parse_args(argv)
    layouts, levels = _load("minigrid_layout"), _load("babyai_text").LEVELS
    about = provenance()
    if args.jsonl is not None:
        with args.jsonl.open("w") as out:
            for task_id in _tasks(args.tasks or "0:40"):
                record = export_task(task_id, args.timeout, layouts, levels)
                out.write(json.dumps(record) + "\n")
        print(f"wrote {args.jsonl}")
        return 0
    if args.out is None or not args.task_ids:
        parser.error("give task ids and --out, or --tasks and --jsonl")
    args.out.mkdir(parents=True, exist_ok=True)
    for task_id in args.task_ids:
        record = {**export_task(task_id, args.timeout, layouts, levels), "provenance": about}
        path = args.out / f"task_{task_id}.json"
        path.write_text(_dumps(record))
        print(f"task {task_id}: {'layout' if record['finishes'] else 'stuck'} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

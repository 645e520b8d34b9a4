"""bench/proof_table.py's evals table on a result file written here: the share solved within
each turn count, overall and per level (hop count)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("proof_table", ROOT / "bench" / "proof_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_within_turns_and_group_rows(tmp_path):
    def ep(level, success, turns):
        return {"task_id": 0, "level": level, "success": success, "turns": turns}

    episodes = [ep("chain1", True, 2), ep("chain1", False, 5),
                ep("chain3", True, 4), ep("chain3", True, 5)]  # fmt: skip
    row = {"tasks": 1, "avg@2": 0.5, "pass@2": 0.5, "invalid": 0.0}
    result = {"env": "search", "k": 2, "horizon_cap": 5, "episodes": episodes,
              "rows": {"search": {**row, "tasks": 2, "avg@2": 0.75}, "chain1": row,
                       "chain3": {**row, "avg@2": 1.0, "pass@2": 1.0}}}  # fmt: skip
    path = tmp_path / "rl.json"
    path.write_text(json.dumps([result]))
    lines = _module().evals([path], (2, 4, 5), groups=True).splitlines()
    assert lines[0].endswith("within 2 / 4 / 5 turns |")
    assert lines[2] == "| rl | 5 | 2 | 0.750 | 0.500 | 0.0% | 0.250 / 0.500 / 0.750 |"
    assert lines[3] == "| rl chain1 | 5 | 1 | 0.500 | 0.500 | 0.0% | 0.500 / 0.500 / 0.500 |"
    assert lines[4] == "| rl chain3 | 5 | 1 | 1.000 | 1.000 | 0.0% | 0.000 / 0.500 / 1.000 |"
    assert len(_module().evals([path]).splitlines()) == 3  # the env's row only by default

"""Per-template rows of webnav eval results: ``python bench/webnav_by_template.py A.json B.json``.

``agentgym eval`` groups webnav's held-out episodes by site/kind; this reads the episodes its
JSON results hold (``RUN_DIR/eval/*.json``) and prints, for each result, Avg@k and the share of
invalid replies per template (``task_id % 46``, named by ``info()["template"]``), then over all.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from agentgym.envs.families import TASK_FILTERS

TEMPLATES = TASK_FILTERS["templates"].modulus


def template_names(templates: list[int]) -> dict[int, str]:
    """The name of each template, read from a reset session of seed 0."""
    from agentgym.envs import EnvPool

    pool = EnvPool("webnav")
    ids = pool.create(len(templates))
    pool.reset(ids, templates)
    names = {t: info["template"] for t, info in zip(templates, pool.info(ids), strict=True)}
    pool.close(ids)
    return names


def by_template(episodes: list[dict]) -> dict[int, tuple[float, float, int]]:
    """template -> (Avg@k, invalid share of replies, episodes)."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for e in episodes:
        groups[e["task_id"] % TEMPLATES].append(e)
    return {t: _row(eps) for t, eps in sorted(groups.items())}


def _row(episodes: list[dict]) -> tuple[float, float, int]:
    success = sum(bool(e.get("success")) for e in episodes) / max(len(episodes), 1)
    turns = max(sum(e.get("turns", 0) for e in episodes), 1)
    invalid = sum(e.get("invalid_replies", 0) for e in episodes) / turns
    return success, invalid, len(episodes)


def _line(label: str, row: tuple[float, float, int]) -> str:
    success, invalid, n = row
    return f"  {label:<25} avg {success:.3f}  invalid {invalid:.3f}  ({n} episodes)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="eval result JSON files")
    args = parser.parse_args()
    results = {p: json.loads(Path(p).read_text())["episodes"] for p in args.results}
    rows = {p: by_template(eps) for p, eps in results.items()}
    templates = sorted({t for r in rows.values() for t in r})
    names = template_names(templates)
    for path, row in rows.items():
        print(path)
        for t in templates:
            print(_line(f"{t:>2} {names[t]}", row.get(t, (0.0, 0.0, 0))))
        print(_line("all", _row(results[path])))


if __name__ == "__main__":
    main()

"""The eval's own noise floor: two eval results of one checkpoint under settings that should not
matter (``eval.groups_in_flight`` 4 and 1: which rows share the engine's batches, so other bf16
roundings), compared episode by episode.

Episodes pair by (task, sample): an eval numbers them by task and sample whatever order the
groups run in. Printed: the episodes whose tokens differ (from each result's
``*.episodes.jsonl``), whose success differs, and each result's Avg@k with the difference; a
figure that moves less than this between two checkpoints is within the eval's noise.

    python bench/eval_noise.py runs/proof/noise/groups_in_flight_4.json \\
        runs/proof/noise/groups_in_flight_1.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(path: Path) -> tuple[dict, list[dict]]:
    result = json.loads(path.read_text())
    records_path = path.with_name(path.stem + ".episodes.jsonl")
    records = (
        [json.loads(line) for line in records_path.read_text().splitlines()]
        if records_path.exists()
        else []
    )
    return result, records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    (ra, ea), (rb, eb) = load(args.a), load(args.b)
    if ra.get("k") != rb.get("k") or len(ra["episodes"]) != len(rb["episodes"]):
        raise SystemExit("the two results do not hold the same tasks and samples")
    pairs = list(zip(ra["episodes"], rb["episodes"], strict=True))
    if any(x["task_id"] != y["task_id"] for x, y in pairs):
        raise SystemExit("the two results list their episodes in different task orders")
    success = sum(bool(x.get("success")) != bool(y.get("success")) for x, y in pairs)
    turns = sum(x.get("turns") != y.get("turns") for x, y in pairs)
    tokens = (
        sum(x["tokens"] != y["tokens"] for x, y in zip(ea, eb, strict=True))
        if ea and len(ea) == len(eb)
        else None
    )
    k = ra["k"]
    avg_a, avg_b = (r["rows"][r["env"]][f"avg@{k}"] for r in (ra, rb))
    n = len(pairs)
    print(f"{n} episodes ({len(ra['episodes']) // k} tasks x {k})")
    if tokens is not None:
        print(f"  tokens differ:  {tokens} ({tokens / n:.1%})")
    print(f"  success differs: {success} ({success / n:.1%}); turns differ: {turns}")
    print(f"  avg@{k}: {avg_a:.3f} ({args.a.name}) vs {avg_b:.3f} ({args.b.name}), "
          f"difference {avg_a - avg_b:+.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

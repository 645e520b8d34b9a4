"""Markdown tables of ``bench/real_model_proof.sh``'s results.

``baselines``: a row per eval set and policy, the env's success (Avg@1) under each cap of the
matrix. ``evals``: a row per result file (an eval or a matrix), Avg@k, Pass@k, invalid replies
and the share solved within each turn count, per cap.

    python bench/proof_table.py baselines runs/proof/baselines
    python bench/proof_table.py evals runs/proof/pass8/*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def results_of(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [data]


def cap_name(cap) -> str:
    return "none" if cap is None else str(cap)


def baselines(folder: Path) -> str:
    files = sorted(folder.glob("*.json"))
    sets: dict[str, dict[str, dict[str, float]]] = {}
    caps: dict[str, list[str]] = {}
    for f in files:
        name, _, _ = f.stem.partition("_")
        for r in results_of(f):
            row = r["rows"][r["env"]]
            sets.setdefault(name, {}).setdefault(r.get("policy", "?"), {})[
                cap_name(r["horizon_cap"])
            ] = row["avg@1"]
            caps.setdefault(name, [])
            if cap_name(r["horizon_cap"]) not in caps[name]:
                caps[name].append(cap_name(r["horizon_cap"]))
    out = []
    for name, policies in sets.items():
        cs = caps[name]
        out.append(f"| {name} | " + " | ".join(f"cap {c}" for c in cs) + " |")
        out.append("|---|" + "---:|" * len(cs))
        for policy, by_cap in policies.items():
            out.append(f"| `{policy}` | " + " | ".join(f"{by_cap.get(c, float('nan')):.3f}"
                                                      for c in cs) + " |")  # fmt: skip
        out.append("")
    return "\n".join(out)


def evals(
    files: list[Path], within_turns: tuple[int, ...] = (2, 4, 6), groups: bool = False
) -> str:
    """A row per result (and with ``groups`` one more per level or hop count of it): Avg@k,
    Pass@k, invalid replies and the share of episodes solved within each of ``within_turns``."""
    head = " / ".join(str(t) for t in within_turns)
    out = [f"| result | cap | tasks | Avg@k | Pass@k | invalid | within {head} turns |",
           "|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for f in files:
        for r in results_of(f):
            k = r["k"]
            names = list(r["rows"]) if groups else [r["env"]]
            for name in names:
                row = r["rows"][name]
                episodes = [e for e in r["episodes"] if "error" not in e
                            and (name == r["env"] or e.get("level") == name)]  # fmt: skip
                within = [sum(1 for e in episodes if e.get("success") and e.get("turns", 0) <= t)
                          / max(len(episodes), 1) for t in within_turns]  # fmt: skip
                label = f.stem if name == r["env"] else f"{f.stem} {name}"
                out.append(
                    f"| {label} | {cap_name(r['horizon_cap'])} | {row['tasks']} | "
                    f"{row[f'avg@{k}']:.3f} | {row[f'pass@{k}']:.3f} | {row['invalid']:.1%} | "
                    + " / ".join(f"{w:.3f}" for w in within)
                    + " |"
                )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("baselines", "evals"))
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument(
        "--within",
        default="2,4,6",
        help="evals: the turn counts of the 'solved within' column (default 2,4,6)",
    )
    ap.add_argument("--groups", action="store_true",
                    help="evals: a row per level or hop count of each result as well")  # fmt: skip
    args = ap.parse_args(argv)
    if args.kind == "baselines":
        print(baselines(args.paths[0]))
    else:
        within = tuple(int(t) for t in args.within.split(","))
        print(evals(args.paths, within, args.groups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

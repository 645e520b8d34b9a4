"""``agentgym dpo CONFIG`` and ``agentgym pairs FILE ... --out PAIRS``: preference data and
offline preference optimisation.

``pairs`` groups the records of the given JSONL files (demos, a run's ``trajectories.jsonl``,
any form ``agentgym.learner.datasets`` reads) by task and pairs each task's best episode (success
first, then reward) with every episode of that task whose reward is lower, as AgentGym's
AgentEvol/ETO-style exploration does. ``dpo`` trains the run's policy on such pairs against a
frozen copy of itself and writes ``RUN_DIR/dpo/`` (``metrics.jsonl``, ``checkpoints/``).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentgym.cli.common import set_torch_threads
from agentgym.config import load_config


def add_dpo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config of the run (model, dpo section)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config field (repeatable)",
    )  # fmt: skip
    parser.add_argument("--data", nargs="+", default=None, help="pairs JSONL (replace dpo.data)")
    parser.add_argument(
        "--init-from",
        default=None,
        help="start from this checkpoint (e.g. RUN_DIR/sft/checkpoints)",
    )


def add_pairs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="JSONL records with task_id and reward")
    parser.add_argument("--out", required=True, help="pairs JSONL to write")


def run_pairs(args: argparse.Namespace) -> int:
    """``agentgym pairs``: returns the exit code (1 when no pair could be built)."""
    by_task: dict[Any, list[dict]] = defaultdict(list)
    skipped = 0
    for path in args.files:
        if not Path(path).is_file():
            raise SystemExit(f"agentgym pairs: no such file: {path}")
        for line in Path(path).read_text().splitlines():
            try:
                record = json.loads(line)
                by_task[record["task_id"]].append(record)
            except (json.JSONDecodeError, KeyError, TypeError):
                skipped += line.strip() != ""
    pairs = [pair for records in by_task.values() for pair in task_pairs(records)]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for chosen, rejected in pairs:
            f.write(json.dumps({"chosen": chosen, "rejected": rejected}) + "\n")
    print(
        f"agentgym pairs: {len(pairs)} pairs over {len(by_task)} tasks written to {args.out}"
        + (f"; {skipped} lines without task_id/reward skipped" if skipped else "")
    )
    return 0 if pairs else 1


def task_pairs(records: list[dict]) -> list[tuple[dict, dict]]:
    """(best, worse) for every record of one task whose reward is below the best's."""
    key = lambda r: (bool(r.get("success")), float(r.get("reward", 0.0)))  # noqa: E731
    best = max(records, key=key)
    return [(best, r) for r in records if key(r) < key(best)]


def run_dpo(args: argparse.Namespace) -> int:
    """``agentgym dpo``: returns the exit code."""
    config = load_config(args.config, args.overrides)
    if args.data:
        config = replace(config, dpo=replace(config.dpo, data=tuple(args.data)))
    cfg = config.dpo
    if not cfg.data:
        raise SystemExit("agentgym dpo: no data (set dpo.data in the config or pass --data)")
    missing = [d for d in cfg.data if not Path(d).is_file()]
    if missing:
        raise SystemExit(f"agentgym dpo: no such data file: {', '.join(missing)}")
    if config.model.menu_policy:
        raise SystemExit("agentgym dpo: the menu policy replies with one token; use a text policy")
    set_torch_threads(config.torch_threads)
    from agentgym.actor.policy import load_policy, pad_token_id, prepare_model
    from agentgym.agent.turns import ChatCodec
    from agentgym.learner.datasets import read_pairs
    from agentgym.learner.dpo import train_dpo

    if args.init_from:
        config = replace(config, model=replace(config.model, init_from=args.init_from))
    prepare_model(config)
    model, tokenizer = load_policy(config)
    pairs, report = read_pairs(
        cfg.data, ChatCodec(tokenizer), max_tokens=cfg.max_tokens, strict=cfg.strict
    )
    print(f"agentgym dpo: pairs: {report.summary()}", flush=True)
    out = Path(config.run_dir) / "dpo"
    result = train_dpo(
        model, pairs, cfg, pad_token_id=pad_token_id(tokenizer), out_dir=out,
        progress=lambda line: print(line, flush=True),
    )  # fmt: skip
    print(
        f"agentgym dpo: {result.steps} steps, final loss {result.final_loss:.4f}, accuracy "
        f"{result.final_accuracy:.2f}; checkpoint {result.checkpoint}"
    )
    print(f"evaluate: agentgym eval {args.config} --checkpoint {out / 'checkpoints'}")
    return 0

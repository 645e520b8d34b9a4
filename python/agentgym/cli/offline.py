"""The offline commands: ``agentgym sft``, ``agentgym pairs`` and ``agentgym dpo``.

``sft CONFIG`` fine-tunes the run's policy on trajectory datasets (``sft.data`` or ``--data``):
AgentGym's AgentTraj conversations, ``agentgym demos`` files or actors' token records, tokenized
with the policy's chat template as the actors build episodes, token-mean NLL on assistant
tokens; it writes ``RUN_DIR/sft/`` (``metrics.jsonl``, ``checkpoints/``).

``pairs FILE ... --out PAIRS`` groups the records of the given JSONL files (demos, a run's
``trajectories.jsonl``) by task and pairs each task's best episode (success first, then
reward) with every episode of that task whose reward is lower, as AgentGym's AgentEvol/ETO-style
exploration does. ``dpo CONFIG`` trains the run's policy on such pairs against a frozen copy of
itself and writes ``RUN_DIR/dpo/``.

Evaluate either with ``agentgym eval CONFIG --checkpoint RUN_DIR/{sft,dpo}/checkpoints``, or
start RL from it with ``agentgym train CONFIG --init-from ...``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentgym.cli.common import add_config_args, set_torch_threads
from agentgym.config import RunConfig, load_config


def add_sft_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--data", nargs="+", default=None, help="JSONL files (replace sft.data)")


def add_dpo_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--data", nargs="+", default=None, help="pairs JSONL (replace dpo.data)")
    parser.add_argument(
        "--init-from",
        default=None,
        help="start from this checkpoint (e.g. RUN_DIR/sft/checkpoints)",
    )


def add_pairs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="JSONL records with task_id and reward")
    parser.add_argument("--out", required=True, help="pairs JSONL to write")


def offline_config(args: argparse.Namespace, section: str) -> RunConfig:
    """The run config with ``--data`` (and ``--init-from``) applied, its data files checked:
    every refusal happens before a model is built."""
    init_from = getattr(args, "init_from", None)
    init = [f"model.init_from={init_from}"] if init_from else []
    config = load_config(args.config, [*args.overrides, *init])
    part = getattr(config, section)
    if args.data:
        part = replace(part, data=tuple(args.data))
        config = replace(config, **{section: part})
    if not part.data:
        raise SystemExit(f"agentgym {section}: no data (set {section}.data or pass --data)")
    missing = [d for d in part.data if not Path(d).is_file()]
    if missing:
        raise SystemExit(f"agentgym {section}: no such data file: {', '.join(missing)}")
    if config.model.menu_policy:
        raise SystemExit(f"agentgym {section}: the menu policy replies with one token")
    return config


def _policy(config: RunConfig) -> tuple[Any, Any, Any]:
    """(model, tokenizer, chat codec) of the run's policy."""
    set_torch_threads(config.torch_threads, deterministic=config.deterministic)
    from agentgym.actor.policy import load_policy, prepare_model
    from agentgym.agent.turns import ChatCodec

    prepare_model(config)
    model, tokenizer = load_policy(config)
    return model, tokenizer, ChatCodec(tokenizer)


def _progress(line: str) -> None:
    print(line, flush=True)


def run_sft(args: argparse.Namespace) -> int:
    """``agentgym sft``: returns the exit code."""
    return _train_offline(args, "sft")


def run_dpo(args: argparse.Namespace) -> int:
    """``agentgym dpo``: returns the exit code."""
    return _train_offline(args, "dpo")


def _train_offline(args: argparse.Namespace, section: str) -> int:
    config = offline_config(args, section)
    cfg = getattr(config, section)
    from agentgym.actor.policy import model_dir, pad_token_id, tokenizer_id
    from agentgym.learner.datasets import read_dataset, read_pairs
    from agentgym.learner.dpo import train_dpo
    from agentgym.learner.sft import train_sft

    read, train, noun = {
        "sft": (read_dataset, train_sft, "data"),
        "dpo": (read_pairs, train_dpo, "pairs"),
    }[section]
    model, tokenizer, codec = _policy(config)
    items, report = read(cfg.data, codec, max_tokens=cfg.max_tokens, strict=cfg.strict)
    print(f"agentgym {section}: {noun}: {report.summary()}", flush=True)
    out = Path(config.run_dir) / section
    extra = {}
    if section == "sft" and cfg.copy_mix:
        from agentgym.models import copy_token_ids

        extra["copy_ids"] = copy_token_ids(tokenizer)
    result = train(
        model,
        items,
        cfg,
        pad_token_id=pad_token_id(tokenizer),
        out_dir=out,
        progress=_progress,
        tokenizer_id=tokenizer_id(model_dir(config)),
        **extra,
    )
    print(
        f"agentgym {section}: {result.steps} steps, final loss {result.final_loss:.4f}; "
        f"checkpoint {result.checkpoint}; metrics {out / 'metrics.jsonl'}"
    )
    print(f"evaluate: agentgym eval {args.config} --checkpoint {out / 'checkpoints'}")
    return 0


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

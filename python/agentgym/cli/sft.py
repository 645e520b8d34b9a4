"""``agentgym sft CONFIG``: supervised fine-tuning of the run's policy on trajectory datasets.

Reads ``sft.data`` (or ``--data FILE ...``): AgentGym's AgentTraj conversations, ``agentgym
demos`` files or actors' token records, tokenized with the policy's chat template as the actors
build episodes; trains with token-mean NLL on assistant tokens; writes ``RUN_DIR/sft/``
(``metrics.jsonl``, ``checkpoints/``). Evaluate with ``agentgym eval CONFIG --checkpoint
RUN_DIR/sft/checkpoints``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from agentgym.cli.common import set_torch_threads
from agentgym.config import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config of the run (model, sft section)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field (repeatable)",
    )
    parser.add_argument("--data", nargs="+", default=None, help="JSONL files (replace sft.data)")


def run(args: argparse.Namespace) -> int:
    """``agentgym sft``: returns the exit code."""
    config = load_config(args.config, args.overrides)
    if args.data:
        config = replace(config, sft=replace(config.sft, data=tuple(args.data)))
    cfg = config.sft
    if not cfg.data:
        raise SystemExit("agentgym sft: no data (set sft.data in the config or pass --data)")
    missing = [d for d in cfg.data if not Path(d).is_file()]
    if missing:
        raise SystemExit(f"agentgym sft: no such data file: {', '.join(missing)}")
    if config.model.menu_policy:
        raise SystemExit("agentgym sft: the menu policy replies with one token; use a text policy")
    set_torch_threads(config.torch_threads)
    from agentgym.actor.policy import load_policy, pad_token_id, prepare_model
    from agentgym.agent.turns import ChatCodec
    from agentgym.learner.datasets import read_dataset
    from agentgym.learner.sft import train_sft

    prepare_model(config)
    model, tokenizer = load_policy(config)
    examples, report = read_dataset(
        cfg.data, ChatCodec(tokenizer), max_tokens=cfg.max_tokens, strict=cfg.strict
    )
    print(f"agentgym sft: data: {report.summary()}", flush=True)
    out = Path(config.run_dir) / "sft"
    result = train_sft(
        model, examples, cfg, pad_token_id=pad_token_id(tokenizer), out_dir=out,
        progress=lambda line: print(line, flush=True),
    )  # fmt: skip
    print(
        f"agentgym sft: {result.steps} steps, {result.tokens:,} assistant tokens, final loss "
        f"{result.final_loss:.4f}; checkpoint {result.checkpoint}; metrics {out / 'metrics.jsonl'}"
    )
    print(f"evaluate: agentgym eval {args.config} --checkpoint {out / 'checkpoints'}")
    return 0

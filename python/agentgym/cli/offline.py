"""The offline commands: ``agentgym sft``, ``agentgym pairs`` and ``agentgym dpo``.

``sft CONFIG`` fine-tunes the run's policy on trajectory datasets (``sft.data`` or ``--data``):
AgentGym's AgentTraj conversations, ``agentgym demos`` files or actors' token records, tokenized
with the policy's chat template as the actors build episodes, token-mean NLL on assistant
tokens; it writes ``RUN_DIR/sft/`` (``config.yaml``, ``metrics.jsonl``, ``checkpoints/``).
One run per folder, as with ``agentgym train``: a folder holding a run is refused,
``--resume RUN_DIR`` continues it from its newest checkpoint with its saved config,
``--overwrite`` starts over, and Ctrl-C (or SIGTERM) writes a checkpoint before it stops.

``pairs FILE ... --out PAIRS`` groups the records of the given JSONL files (demos, a run's
``trajectories.jsonl``) by task, an ``(env, task_id)`` pair (task ids are per env), and pairs
each task's best episode (success first, then reward) with every episode of that task whose
reward is lower, as AgentGym's AgentEvol/ETO-style exploration does. ``dpo CONFIG`` trains
the run's policy on such pairs against a frozen copy of itself and writes ``RUN_DIR/dpo/``,
under the same rules. Both need a policy that writes replies (AgentGym's ``Thought: ...
Action: ...``): the menu policy's one-token replies leave nothing to learn.

Evaluate either with ``agentgym eval CONFIG --checkpoint RUN_DIR/{sft,dpo}/checkpoints``, or
start RL from it with ``agentgym train CONFIG --init-from ...``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentgym.cli.common import (
    RESOLVED_CONFIG,
    add_config_args,
    resume_config,
    set_torch_threads,
    warn_slow_bf16,
)
from agentgym.cli.offline_run import StopRequest, claim, resume_point
from agentgym.cli.rundir import checkpoint_step, trim_metrics
from agentgym.config import RunConfig, absolute_paths, dump_config, load_config


def add_sft_arguments(parser: argparse.ArgumentParser) -> None:
    _add_run_arguments(parser, "sft")
    parser.add_argument("--data", nargs="+", default=None, help="JSONL files (replace sft.data)")


def add_dpo_arguments(parser: argparse.ArgumentParser) -> None:
    _add_run_arguments(parser, "dpo")
    parser.add_argument("--data", nargs="+", default=None, help="pairs JSONL (replace dpo.data)")
    parser.add_argument(
        "--init-from",
        default=None,
        help="start from this checkpoint (e.g. RUN_DIR/sft/checkpoints)",
    )


def _add_run_arguments(parser: argparse.ArgumentParser, section: str) -> None:
    add_config_args(parser, required=False)
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help=f"continue the run in RUN_DIR/{section} from its newest checkpoint, with its own "
        f"saved config (RUN_DIR/{section}/config.yaml; --set still applies)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"RUN_DIR/{section} holds an earlier run: delete its files and start over",
    )


def add_pairs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="JSONL records with task_id and reward")
    parser.add_argument("--out", required=True, help="pairs JSONL to write")


def offline_config(args: argparse.Namespace, section: str) -> RunConfig:
    """The run config with ``--data`` (and ``--init-from``) applied, or the saved config of the
    run ``--resume`` continues, its data files checked: every refusal happens before a model
    is built."""
    init_from = getattr(args, "init_from", None)
    if args.resume is not None:
        given = (("CONFIG", args.config), ("--data", args.data), ("--init-from", init_from),
                 ("--overwrite", args.overwrite))  # fmt: skip
        for flag, value in given:
            if value:
                raise SystemExit(
                    f"agentgym {section}: --resume continues {args.resume} with its own "
                    f"{section}/config.yaml; drop {flag} (change fields with --set KEY=VALUE)"
                )
        config = resume_config(args.resume, args.overrides, folder=section)
    elif args.config is None:
        raise SystemExit(f"agentgym {section}: CONFIG is required (or --resume RUN_DIR)")
    else:
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
        raise SystemExit(f"agentgym {section}: {MENU_POLICY_NOTE}")
    warn_slow_bf16(config, f"agentgym {section}", (section,))
    return config


MENU_POLICY_NOTE = (
    "this config's policy is the menu policy (model.menu_policy), whose replies are one token "
    "chosen from the listed actions, so demos and preference pairs have nothing for it to "
    "learn; SFT and DPO need a config whose policy writes AgentGym's 'Thought: ... Action: ...' "
    "replies, e.g. configs/babyai-thought-action.yaml (or configs/textcraft-sft.yaml)"
)


def _policy(config: RunConfig, section: str) -> tuple[Any, Any, Any]:
    """(model, tokenizer, chat codec) of the run's policy; says what it does meanwhile (building
    the tiny model takes a while the first time)."""
    _say(section, "importing torch and transformers")
    set_torch_threads(config.torch_threads, deterministic=config.deterministic)
    from agentgym.actor.policy import load_policy, model_dir, prepare_model
    from agentgym.agent.turns import ChatCodec

    directory = model_dir(config)
    if config.model.path is None and not _built(directory):
        warmup = config.model.copy_warmup_steps
        _say(section, f"building the tiny model into {directory} (a tokenizer trained on "
             f"{config.model.corpus_episodes} episodes of env text, then the weights"
             + (f", then {warmup} copy warm-up steps" if warmup else "")
             + "); built once, reused by every later command of the run")  # fmt: skip
    prepare_model(config)
    init = config.model.init_from
    _say(
        section,
        f"loading the policy from {directory}" + (f" with {init}'s weights" if init else ""),
    )
    model, tokenizer = load_policy(config)
    return model, tokenizer, ChatCodec(tokenizer)


def _built(directory: Path) -> bool:
    from agentgym.models import MANIFEST, MENU_MANIFEST

    return (directory / MANIFEST).exists() or (directory / MENU_MANIFEST).exists()


def _say(section: str, what: str) -> None:
    print(f"agentgym {section}: {what}", flush=True)


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
    run_dir = Path(config.run_dir)
    out, cfg = run_dir / section, getattr(config, section)
    resume = None
    if args.resume is None:
        claim(run_dir, section, overwrite=args.overwrite)
    else:
        resume = resume_point(run_dir, section, cfg)
    _say(section, f"{'resuming' if resume else 'starting'} the run in {out}")
    from agentgym.actor.policy import model_dir, pad_token_id, tokenizer_id
    from agentgym.learner.datasets import read_dataset, read_pairs
    from agentgym.learner.dpo import train_dpo
    from agentgym.learner.sft import train_sft

    read, train, noun = {
        "sft": (read_dataset, train_sft, "data"),
        "dpo": (read_pairs, train_dpo, "pairs"),
    }[section]
    model, tokenizer, codec = _policy(config, section)
    _say(section, f"reading and tokenizing {', '.join(cfg.data)}")
    items, report = read(cfg.data, codec, max_tokens=cfg.max_tokens, strict=cfg.strict)
    _say(section, f"{noun}: {report.summary()}")
    out.mkdir(parents=True, exist_ok=True)
    dump_config(absolute_paths(config), out / RESOLVED_CONFIG)  # with --resume's --set items
    if resume is not None:
        step = checkpoint_step(out)
        dropped = trim_metrics(out, step)
        after = (
            f"; metrics of steps {dropped[0]}-{dropped[-1]}, made after it, removed"
            if dropped
            else ""
        )
        _say(section, f"resuming from the checkpoint at step {step}{after}")
    extra = {}
    if section == "sft" and cfg.copy_mix:
        from agentgym.models import copy_token_ids

        extra["copy_ids"] = copy_token_ids(tokenizer)
    stop = StopRequest(section).install()
    result = train(
        model,
        items,
        cfg,
        pad_token_id=pad_token_id(tokenizer),
        out_dir=out,
        progress=_progress,
        tokenizer_id=tokenizer_id(model_dir(config)),
        resume=resume,
        should_stop=stop,
        **extra,
    )
    config_path = args.config if args.resume is None else out / RESOLVED_CONFIG
    if result.stopped:
        print(
            f"agentgym {section}: stopped at step {result.done}/{result.steps}; checkpoint "
            f"{result.checkpoint}\n  resume  agentgym {section} --resume {run_dir}\n"
            f"  evaluate  agentgym eval {config_path} --checkpoint {out / 'checkpoints'}",
            flush=True,
        )
        return 130
    print(
        f"agentgym {section}: {result.steps} steps, final loss {result.final_loss:.4f}; "
        f"checkpoint {result.checkpoint}; metrics {out / 'metrics.jsonl'}"
    )
    print(f"evaluate: agentgym eval {config_path} --checkpoint {out / 'checkpoints'}")
    return 0


def run_pairs(args: argparse.Namespace) -> int:
    """``agentgym pairs``: returns the exit code (1 when no pair could be built)."""
    by_task: dict[tuple[Any, Any], list[dict]] = defaultdict(list)
    skipped = 0
    for path in args.files:
        if not Path(path).is_file():
            raise SystemExit(f"agentgym pairs: no such file: {path}")
        for line in Path(path).read_text().splitlines():
            try:
                record = json.loads(line)
                by_task[(record.get("env"), record["task_id"])].append(record)
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
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
    if menu_policy_episodes(r for records in by_task.values() for r in records):
        print(f"agentgym pairs: note: every reply of these episodes is one token: {MENU_PAIRS}")
    return 0 if pairs else 1


MENU_PAIRS = (
    "they come from the menu policy, which agentgym dpo cannot train (its pairs differ in "
    "single action tokens); DPO needs episodes and a config whose policy writes AgentGym's "
    "'Thought: ... Action: ...' replies, e.g. configs/babyai-thought-action.yaml"
)


def menu_policy_episodes(records: Iterable[dict]) -> bool:
    """Whether ``records`` are token records (a run's ``trajectories.jsonl``) whose every reply
    is one token, the menu policy's, and there is at least one."""
    seen = False
    for r in records:
        mask, turns = r.get("loss_mask"), r.get("num_turns")
        if not isinstance(mask, list) or not isinstance(turns, int) or sum(mask) > turns:
            return False
        seen = True
    return seen


def task_pairs(records: list[dict]) -> list[tuple[dict, dict]]:
    """(best, worse) for every record of one task whose reward is below the best's."""
    key = lambda r: (bool(r.get("success")), float(r.get("reward", 0.0)))  # noqa: E731
    best = max(records, key=key)
    return [(best, r) for r in records if key(r) < key(best)]

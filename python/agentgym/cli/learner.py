"""``agentgym-learner CONFIG``: the learner process (binds the sockets actors connect to).

``agentgym-learner --resume RUN_DIR`` continues the run in RUN_DIR from its newest checkpoint
with its saved ``config.yaml`` (the form ``agentgym train --resume RUN_DIR`` takes).

Under ``torchrun --nproc-per-node N -m agentgym.cli.learner CONFIG`` it runs as N ranks that
shard the model with FSDP2; rank 0 binds the sockets, writes metrics and leads the others.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentgym.cli.common import (
    add_config_args,
    config_from_args,
    learner_channels,
    on_terminate,
    plain_text,
    report_config_error,
    resume_config,
    set_torch_threads,
    write_endpoints,
)
from agentgym.cli.rundir import LOCK_ENV, RunDirBusy, lock_run_dir
from agentgym.config import RunConfig
from agentgym.configtools import ConfigError
from agentgym.durable import DiskFull
from agentgym.transport.endpoints import Endpoints
from agentgym.transport.malloc import tune_malloc

log = logging.getLogger("agentgym.learner")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym-learner",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_args(parser, required=False)
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run in RUN_DIR from its newest checkpoint, with its config.yaml",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this many updates (default: learner.max_steps)",
    )
    return parser


def main(
    argv: list[str] | None = None,
    *,
    stop_on: Callable[[Callable[[], None]], None] = on_terminate,
    endpoints: Endpoints | None = None,
    locked: bool = False,
) -> int:
    """Entry point of ``agentgym-learner``; the keywords are ``run_learner``'s."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s learner %(message)s")
    tune_malloc()  # before the first message buffer is allocated
    args = build_parser().parse_args(argv)
    if (args.config is None) == (args.resume is None):
        raise SystemExit(
            "agentgym-learner: give CONFIG for a new run or --resume RUN_DIR (its config.yaml "
            "is used; change fields with --set KEY=VALUE), not both"
        )
    if args.resume is not None:
        try:
            config = resume_config(args.resume, args.overrides)
        except ConfigError as e:
            return report_config_error("agentgym-learner", e)
    else:
        config = config_from_args(args, "agentgym-learner")
    from agentgym.learner.checkpoint import CheckpointError
    from agentgym.learner.learner import Stalled

    try:
        run_learner(
            config, resume=args.resume is not None, max_steps=args.max_steps, stop_on=stop_on,
            endpoints=endpoints, locked=locked,
        )  # fmt: skip
    except (CheckpointError, DiskFull, Stalled) as e:  # the run's state, said in one line
        log.error("%s", " ".join(str(e).split()))
        print(f"agentgym-learner: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 1
    return 0


def env_training(config: RunConfig) -> dict:
    """Per env of the run (one for a single-env run), its ``EnvTraining``."""
    from agentgym.learner import EnvTraining

    return {
        e.env.name: EnvTraining(config.horizon_of(e), e.loss_weight, e.reward_scale)
        for e in config.entries
    }


def task_groups(config: RunConfig) -> Callable[[str, int], str | None]:
    """(env, task id) -> the task's eval group for the run's envs whose families group tasks by
    id alone (BabyAI's levels), else None: the learner logs success per group."""
    from agentgym.envs.families import family

    rules = {e.env.name: family(e.env.name) for e in config.entries}
    return lambda env, task_id: rules[env].id_group(task_id) if env in rules else None


def vocab_size(model: Any) -> int | None:
    """Token ids the model can embed (its embedding rows; the config's ``vocab_size`` for a
    wrapper without ``get_input_embeddings``, as the menu policy); None when neither says."""
    embeddings = getattr(model, "get_input_embeddings", None)
    if embeddings is not None and hasattr(embeddings(), "num_embeddings"):
        return int(embeddings().num_embeddings)
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return size if isinstance(size, int) else None


def run_learner(
    config: RunConfig,
    *,
    resume: bool = False,
    max_steps: int | None = None,
    stop_on: Callable[[Callable[[], None]], None] = on_terminate,
    endpoints: Endpoints | None = None,
    locked: bool = False,
) -> None:
    """Build the model and learner, bind the channels and train until done or asked to stop.
    ``stop_on`` is handed the function that asks it to stop (by default a signal calls it);
    ``endpoints``: where to bind (default: the configured transport's); ``locked``: the caller
    holds the run dir's lock (a launcher running this in one of its threads)."""
    set_torch_threads(config.torch_threads, deterministic=config.deterministic)
    from agentgym.actor.policy import (
        load_policy,
        model_dir,
        pad_token_id,
        prepare_model,
        tokenizer_id,
    )
    from agentgym.learner import Learner
    from agentgym.learner.distributed import from_environment

    run_dir = Path(config.run_dir)
    if resume and not (run_dir / "checkpoints" / "latest").exists():
        raise SystemExit(f"--resume {run_dir}: no checkpoint in {run_dir / 'checkpoints'}")
    dist = from_environment(config.learner.device, config.learner.dist_timeout_s)
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not locked and LOCK_ENV not in os.environ:  # else a launcher holds it already
            try:
                lock_run_dir(run_dir, "agentgym-learner")
            except RunDirBusy as e:
                raise SystemExit(f"agentgym-learner: {e}") from None
        prepare_model(config)
    dist.barrier()  # the other ranks load the model rank 0 built
    model, tokenizer = load_policy(config, device=config.learner.device)
    lcfg = replace(
        config.learner,
        pad_token_id=pad_token_id(tokenizer),
        checkpoint_dir=str(run_dir / "checkpoints"),
        metrics_path=str(run_dir / "metrics.jsonl"),
        weights_dir=config.learner.weights_dir or str(run_dir / "weights"),
    )
    curricula = {e.env.name: e.tasks.curriculum for e in config.entries if e.tasks.curriculum}
    mix = None
    if config.multi_env:
        from agentgym.curriculum import EnvMix

        mix = EnvMix(config.env_mix, {e.env.name: e.weight for e in config.entries})
    learner = Learner(
        model,
        lcfg,
        dist=dist,
        envs=env_training(config),
        curricula=curricula,
        env_mix=mix,
        tokenizer_id=tokenizer_id(model_dir(config)),
        task_group=task_groups(config),
    )
    if resume:
        learner.load_checkpoint(run_dir / "checkpoints")
    if max_steps is None and lcfg.max_steps is not None:
        max_steps = max(lcfg.max_steps - learner.version, 0)  # max_steps counts from version 0
        if max_steps == 0:
            log.info("the run is finished (version %d of max_steps %d)", learner.version,
                     lcfg.max_steps)  # fmt: skip
    stop = {"now": False}
    stop_on(lambda: stop.update(now=True))
    if not dist.is_main:  # follows rank 0's commands until it stops
        learner.run(None)
        dist.close()
        dist.exit(0)
        return
    with learner_channels(config, vocab_size(model), endpoints) as channels:
        write_endpoints(run_dir, channels.endpoints)
        log.info("serving at %s (version %d)", channels.endpoints, learner.version)
        evals = None
        if config.eval.every > 0:
            from agentgym.cli.eval import periodic_eval

            evals = periodic_eval(config, model, tokenizer)
        learner.run(
            channels, max_steps=max_steps, should_stop=lambda: stop["now"], extra_metrics=evals
        )
    dist.close()
    log.info("done at version %d", learner.version)
    dist.exit(0)


if __name__ == "__main__":
    sys.exit(main())

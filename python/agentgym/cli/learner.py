"""``agentgym-learner CONFIG``: the learner process (binds the sockets actors connect to).

Under ``torchrun --nproc-per-node N -m agentgym.cli.learner CONFIG`` it runs as N ranks that
shard the model with FSDP2; rank 0 binds the sockets, writes metrics and leads the others.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

from agentgym.cli.common import (
    add_config_args,
    config_from_args,
    learner_endpoints,
    on_terminate,
    set_torch_threads,
    write_endpoints,
)
from agentgym.config import RunConfig
from agentgym.transport.malloc import tune_malloc

log = logging.getLogger("agentgym.learner")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym-learner", description=__doc__)
    add_config_args(parser)
    parser.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint in the run dir"
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this many updates (default: learner.max_steps)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``agentgym-learner``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s learner %(message)s")
    tune_malloc()  # before the first message buffer is allocated
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    run_learner(config, resume=args.resume, max_steps=args.max_steps)
    return 0


def run_learner(config: RunConfig, *, resume: bool = False, max_steps: int | None = None) -> None:
    """Build the model and learner, bind the channels and train until done or signalled."""
    set_torch_threads(config.torch_threads)
    from agentgym.actor.policy import load_policy, pad_token_id, prepare_model
    from agentgym.learner import Learner
    from agentgym.learner.distributed import from_environment
    from agentgym.transport.channels import LearnerChannels

    dist = from_environment(config.learner.device, config.learner.dist_timeout_s)
    run_dir = Path(config.run_dir)
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
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
    learner = Learner(model, lcfg, dist=dist)
    if resume:
        if not (run_dir / "checkpoints" / "latest").exists():
            raise SystemExit(f"--resume: no checkpoint in {run_dir / 'checkpoints'}")
        learner.load_checkpoint(run_dir / "checkpoints")
    if max_steps is None and lcfg.max_steps is not None:
        max_steps = max(lcfg.max_steps - learner.version, 0)  # max_steps counts from version 0
    stop = {"now": False}
    on_terminate(lambda: stop.update(now=True))
    if not dist.is_main:  # follows rank 0's commands until it stops
        learner.run(None)
        dist.close()
        dist.exit(0)
        return
    with LearnerChannels(learner_endpoints(config)) as channels:
        write_endpoints(run_dir, channels.endpoints)
        log.info("serving at %s (version %d)", channels.endpoints, learner.version)
        learner.run(channels, max_steps=max_steps, should_stop=lambda: stop["now"])
    dist.close()
    log.info("done at version %d", learner.version)
    dist.exit(0)


if __name__ == "__main__":
    sys.exit(main())

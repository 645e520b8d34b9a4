"""``agentgym-actor CONFIG``: one actor process (engine + env pool) feeding a learner."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from agentgym.actor.actor import GroupFailed
from agentgym.cli.common import (
    ENDPOINTS_FILE,
    actor_keys,
    add_config_args,
    config_from_args,
    learner_endpoints,
    on_terminate,
    plain_text,
    read_endpoints,
    report_config_error,
    set_torch_threads,
    wait_for_endpoints,
)
from agentgym.config import RunConfig, sync_problem
from agentgym.configtools import ConfigError
from agentgym.transport.auth import KeysError
from agentgym.transport.endpoints import Endpoints
from agentgym.transport.malloc import tune_malloc

log = logging.getLogger("agentgym.actor")

ENDPOINTS_TIMEOUT_S = 600.0
"""How long an actor started beside its learner waits for the learner's endpoints file."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym-actor", description=plain_text(__doc__))
    add_config_args(parser)
    parser.add_argument("--index", type=int, default=0, help="this actor's index (0-based)")
    parser.add_argument(
        "--endpoints",
        default=None,
        help="JSON file with the learner's endpoints (default: the run dir's "
        "endpoints.json, else the configured transport)",
    )
    parser.add_argument(
        "--learner",
        default=None,
        metavar="tcp://HOST:PORT",
        help="join the learner at this address (its transport.base_port: trajectories there, "
        "control and weights on the next two ports), e.g. from another machine",
    )
    parser.add_argument(
        "--keys",
        default=None,
        metavar="PATH",
        help="the run's transport keys, which a learner reached over TCP asks of its actors "
        "(default: RUN_DIR/transport_keys.json, written by the learner; copy it here when "
        "this machine does not share the run dir)",
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="wait for every update before sampling again (no staleness)",
    )
    parser.add_argument(
        "--wait-model",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for another process (the learner) to build the tiny model in "
        "the run dir before building it here (agentgym train passes it)",
    )
    return parser


def main(
    argv: list[str] | None = None,
    *,
    stop_on: Callable[[Callable[[], None]], None] = on_terminate,
) -> int:
    """Entry point of ``agentgym-actor``; ``stop_on`` is ``run_actor``'s."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s actor{args.index} %(message)s")
    tune_malloc()  # before the first message buffer is allocated
    config = config_from_args(args, "agentgym-actor")
    if args.sync and (problem := sync_problem(config)) is not None:
        raise SystemExit(report_config_error("agentgym-actor", ConfigError(problem)))
    if args.learner:
        endpoints = _learner_address(args.learner)
    else:
        endpoints = _endpoints(config, args.endpoints)
    try:
        stats = run_actor(
            config,
            endpoints,
            index=args.index,
            sync=args.sync,
            wait_model_s=args.wait_model,
            keys_path=args.keys,
            stop_on=stop_on,
        )
    except KeysError as e:
        print(f"agentgym-actor: {e}", file=sys.stderr, flush=True)
        return 2
    except GroupFailed as e:  # its traceback is in the log above
        print(f"agentgym-actor: {e}", file=sys.stderr, flush=True)
        return 1
    log.info(
        "done: %d groups pushed, %d episodes dropped", stats.groups_pushed, stats.dropped_env_errors
    )
    return 0


def _endpoints(config: RunConfig, path: str | None) -> Endpoints | Callable[[], Endpoints]:
    if path is not None:  # the learner may still be starting: read it once the engine is built
        return lambda: wait_for_endpoints(path, ENDPOINTS_TIMEOUT_S)
    recorded = Path(config.run_dir) / ENDPOINTS_FILE
    if config.transport.kind == "ipc" and recorded.exists():
        return read_endpoints(recorded)
    return learner_endpoints(config)


def _learner_address(address: str) -> Endpoints:
    """``tcp://HOST:PORT`` -> the learner's three tcp endpoints."""
    host, sep, port = address.removeprefix("tcp://").rpartition(":")
    if not address.startswith("tcp://") or not sep or not host or not port.isdigit():
        raise SystemExit(f"--learner: expected tcp://HOST:PORT, got {address!r}")
    return Endpoints.tcp(host, int(port))


def actor_share(config: RunConfig, index: int) -> int:
    """Groups actor ``index`` contributes to each learner step (the shares sum to the step)."""
    g, n = config.learner.groups_per_step, config.actor.num_actors
    return g // n + (index < g % n)


def run_actor(
    config: RunConfig,
    endpoints: Endpoints | Callable[[], Endpoints],
    *,
    index: int = 0,
    sync: bool = False,
    wait_model_s: float = 0.0,
    keys_path: str | None = None,
    stop_on: Callable[[Callable[[], None]], None] = on_terminate,
):
    """Build the engine and env pool and run one actor until the learner stops. ``endpoints``
    may be a function, called once the engine and pool are built (the learner's endpoints
    file may appear only then). Over TCP the actor joins with the run's transport keys
    (``keys_path``, else the run dir's). ``stop_on`` is handed the function that stops the
    actor, callable from any thread (by default a signal calls it)."""
    a = config.actor
    set_torch_threads(a.torch_threads, deterministic=config.deterministic)
    from agentgym.actor.actor import Actor, ActorSettings
    from agentgym.actor.policy import (
        load_policy,
        make_engine,
        prepare_model,
        sampling_params,
        wait_for_model,
    )
    from agentgym.agent.turns import ChatCodec

    if wait_model_s > 0 and not wait_for_model(config, wait_model_s):
        log.warning("no model appeared within %.0f s; building it here", wait_model_s)
    prepare_model(config)
    model, tokenizer = load_policy(config, device=config.engine.device)
    staleness = 0 if sync or config.deterministic else config.learner.max_staleness
    engine = make_engine(
        config, model, tokenizer, seed=a.seed + 1000 * index, owns_model=True,
        max_staleness=staleness,
    )  # fmt: skip
    pools = {e.env.name: e.env.pool(seed=a.seed + index) for e in config.entries}
    for e in config.entries:
        where = f"sessions on {', '.join(e.env.remote)}" if e.env.remote else "in-process"
        log.info("env pool %s ready (%s)", e.env.name, where)
    log.info("engine ready (%s, under %s)", config.engine.backend, sys.executable)
    if callable(endpoints):
        endpoints = endpoints()
    keys = actor_keys(config, endpoints, keys_path, ENDPOINTS_TIMEOUT_S)
    run_dir = Path(config.run_dir)
    (run_dir / "actors").mkdir(parents=True, exist_ok=True)
    settings = ActorSettings(
        draws=env_draws(config),
        group_size=a.group_size,
        groups_in_flight=a.groups_in_flight,
        max_staleness=staleness,
        share=actor_share(config, index),
        index=index,
        rules=a.rules,
        seed=a.seed + index,
        push_timeout_s=a.push_timeout_s,
        sample_every=a.sample_every if index == 0 else 0,
        sample_path=str(run_dir / "trajectories.jsonl"),
        stats_path=str(run_dir / "actors" / f"actor_{index}.json"),
    )
    actor = Actor(
        settings,
        engine,
        pools,
        ChatCodec(tokenizer),
        sampling_params(config),
        endpoints,
        keys=keys,
    )
    stop_on(actor.stop)
    return _run_loop(actor)


def env_draws(config: RunConfig) -> tuple:
    """The ``EnvDraw`` of each env of the run (one for a single-env run): its train tasks,
    weight, share of ``actor.groups_in_flight`` and level curriculum."""
    from agentgym.actor.actor import EnvDraw, in_flight_shares

    entries = config.entries
    shares = in_flight_shares([e.weight for e in entries], config.actor.groups_in_flight)
    return tuple(
        EnvDraw(e.env.name, e.tasks.train.ids(), e.weight, n, e.tasks.curriculum)
        for e, n in zip(entries, shares, strict=True)
    )


def _run_loop(actor):
    try:
        import uvloop
    except ImportError:  # uvloop is optional on platforms without it
        return asyncio.run(actor.run())
    return uvloop.run(actor.run())


if __name__ == "__main__":
    sys.exit(main())

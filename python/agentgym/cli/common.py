"""Pieces the agentgym commands share: config arguments, endpoints, signals, torch threads."""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from agentgym.config import RunConfig, load_config
from agentgym.configtools import ConfigError
from agentgym.transport.auth import (
    KEYS_FILE,
    TransportKeys,
    curve_available,
    private_directory,
    run_keys,
    uses_tcp,
    wait_for_keys,
)
from agentgym.transport.endpoints import Endpoints
from agentgym.transport.learner_channels import LearnerChannels
from agentgym.transport.limits import TrajectoryLimits

ENDPOINTS_FILE = "endpoints.json"
RESOLVED_CONFIG = "config.yaml"


def plain_text(doc: str | None) -> str:
    """A docstring as the plain text ``--help`` shows: reStructuredText's ``literals`` and
    :role:`targets` lose their markup, and the indentation of continuation lines goes."""
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", inspect.cleandoc(doc or ""))
    return text.replace("``", "")


def help_parser(
    sub: argparse._SubParsersAction, name: str, summary: str, doc: str | None
) -> argparse.ArgumentParser:
    """A subcommand's parser: ``summary`` in the command list, the module docstring ``doc`` as
    its ``--help`` text, in plain text."""
    return sub.add_parser(
        name,
        help=summary,
        description=plain_text(doc),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_config_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """CONFIG (optional unless ``required``) and repeated ``--set key=value``."""
    parser.add_argument(
        "config",
        nargs=None if required else "?",
        default=None,
        help="YAML config file (overrides the built-in defaults)",
    )
    add_set_arg(parser)


def add_set_arg(parser: argparse.ArgumentParser, example: str = "learner.optim.lr=1e-4") -> None:
    """Repeated ``--set KEY=VALUE`` into ``args.overrides``: the config overrides every command
    that reads a config takes (``config_from_args`` applies them)."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override one config field, e.g. --set {example} (repeatable)",
    )


def config_from_args(args: argparse.Namespace, prog: str = "agentgym") -> RunConfig:
    """The config named by ``args.config`` with ``args.overrides`` applied; an invalid one
    exits (code 2) listing every problem (``report_config_error``)."""
    try:
        return load_config(args.config, args.overrides)
    except ConfigError as e:
        raise SystemExit(report_config_error(prog, e)) from None


def resume_config(run_dir: str | Path, overrides: list[str], folder: str = "") -> RunConfig:
    """The config saved in ``run_dir`` (``config.yaml``; ``RUN_DIR/<folder>/config.yaml`` for
    an sft or dpo run) with ``overrides`` applied, for ``--resume RUN_DIR``; exits with a
    message when the run dir has none."""
    saved = Path(run_dir) / folder / RESOLVED_CONFIG
    if not saved.is_file():
        what = f"{folder} run" if folder else "run dir"
        raise SystemExit(f"--resume {run_dir}: no {saved} (not a {what})")
    config = load_config(saved, overrides)
    return replace(config, run_dir=str(Path(run_dir).resolve()))


BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""The /proc/cpuinfo flags of CPUs with bf16 arithmetic. Without them torch computes bf16 on
the CPU through float32 conversions, several times slower than float32 itself."""


def cpu_bf16_native(cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Whether this machine's CPU has bf16 instructions (``BF16_CPU_FLAGS``); None where
    ``cpuinfo`` cannot be read (not Linux)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    flags = {f for line in text.splitlines() if line.startswith("flags") for f in
             line.partition(":")[2].split()}  # fmt: skip
    return bool(flags & BF16_CPU_FLAGS)


def slow_bf16(config: RunConfig, parts: tuple[str, ...], native: bool | None) -> list[str]:
    """The bf16 fields among ``parts`` (``engine``, ``learner``, ``sft``; another part has no
    bf16 field) that are on and compute on a CPU, where ``native`` (``cpu_bf16_native``) is
    False; [] otherwise."""
    if native is not False:
        return []
    where = {
        "engine": (config.engine.bf16, config.engine.device),
        "learner": (config.learner.bf16, config.learner.device),
        "sft": (config.sft.bf16, "cpu"),  # SFT runs where the policy loads: the CPU
    }
    on = [(p, *where[p]) for p in parts if p in where]
    return [f"{p}.bf16" for p, bf16, device in on if bf16 and device.startswith("cpu")]


def warn_slow_bf16(config: RunConfig, prog: str, parts: tuple[str, ...]) -> None:
    """One line on stderr when ``config`` computes in bf16 on a CPU without bf16 instructions
    (``slow_bf16``): the run works, at a fraction of float32's speed."""
    slow = slow_bf16(config, parts, cpu_bf16_native())
    if slow:
        fix = " ".join(f"--set {name}=false" for name in slow)
        print(
            f"{prog}: warning: {', '.join(slow)} on a CPU without bf16 instructions (no "
            f"{' or '.join(sorted(BF16_CPU_FLAGS))} in /proc/cpuinfo): bf16 runs there several "
            f"times slower than float32 (bench/bench_bf16_cpu.py measures it; {fix} for "
            "float32)",
            file=sys.stderr,
        )


def report_config_error(prog: str, error: ConfigError) -> int:
    """Print a config's problems, one line each, under a line saying nothing was started;
    returns the exit code (2)."""
    n = len(error.problems)
    head = f"{prog}: the config has {n} problem{'s' * (n != 1)} (nothing was started):"
    print("\n  ".join([head, *error.problems]), file=sys.stderr, flush=True)
    return 2


def learner_endpoints(config: RunConfig) -> Endpoints:
    """Where the learner binds: Unix sockets for the run (ipc) or the configured tcp ports."""
    t = config.transport
    if t.kind == "tcp":
        return Endpoints.tcp(t.host, t.base_port or None)
    # socket paths are limited to ~100 bytes: keep them short, one directory per run dir and
    # user, which only that user may enter (another user's could hold sockets of theirs)
    key = hashlib.sha256(str(Path(config.run_dir).resolve()).encode()).hexdigest()[:12]
    directory = Path(tempfile.gettempdir()) / f"agentgym-{os.geteuid()}-{key}"
    try:
        return Endpoints.ipc(private_directory(directory))
    except OSError as e:
        raise SystemExit(f"agentgym: the learner's socket directory: {e}") from None


def learner_channels(
    config: RunConfig, vocab_size: int | None = None, endpoints: Endpoints | None = None
) -> LearnerChannels:
    """The learner's bound channels, at ``endpoints`` (default: ``learner_endpoints``): over
    TCP, admitting only peers with the run's keys (created in the run dir on first use);
    trajectories checked against ``trajectory_limits``; messages capped at what the largest
    legal group needs, at most ``transport.max_message_mb``."""
    endpoints = endpoints or learner_endpoints(config)
    t = config.transport
    keys = None
    if uses_tcp(*endpoints.__dict__.values()):
        keys = run_keys(config.run_dir, "curve" if t.encrypt and curve_available() else "plain")
    return LearnerChannels(
        endpoints,
        keys=keys,
        limits=trajectory_limits(config, vocab_size),
        max_message_bytes=t.max_message_mb << 20,
        max_actors=t.max_actors,
    )


def trajectory_limits(config: RunConfig, vocab_size: int | None = None) -> TrajectoryLimits:
    """What the learner accepts of a trajectory in this run: groups no larger than
    ``actor.group_size``, the run's env names, token ids below ``vocab_size``, and at most
    four contexts' worth of tokens (an episode ends once it passes ``actor.max_context_tokens``,
    after the reply and observation that took it there)."""
    a = config.actor
    return TrajectoryLimits(
        max_group_size=a.group_size,
        max_batch=a.group_size,  # an actor sends one group per message
        max_tokens=4 * a.max_context_tokens + config.engine.max_new_tokens,
        vocab_size=vocab_size,
        envs=frozenset(e.env.name for e in config.entries),
    )


def actor_keys(
    config: RunConfig, endpoints: Endpoints, path: str | None, timeout_s: float
) -> TransportKeys | None:
    """The run's transport keys when the learner is reached over TCP (``path``, else the run
    dir's ``KEYS_FILE``, waited for up to ``timeout_s``: the learner writes it as it starts);
    None over Unix sockets."""
    if not uses_tcp(*endpoints.__dict__.values()):
        return None
    return wait_for_keys(path or Path(config.run_dir) / KEYS_FILE, timeout_s)


def write_endpoints(run_dir: str | Path, endpoints: Endpoints) -> None:
    """Record the bound endpoints for actors started later (atomically)."""
    path = Path(run_dir) / ENDPOINTS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(endpoints.__dict__))
    tmp.replace(path)


def read_endpoints(path: str | Path) -> Endpoints:
    """Endpoints written by ``write_endpoints``."""
    return Endpoints(**json.loads(Path(path).read_text()))


def wait_for_endpoints(path: str | Path, timeout_s: float, poll_s: float = 0.05) -> Endpoints:
    """The endpoints in ``path`` once the learner has written them (an actor started beside
    its learner builds its engine meanwhile); ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no learner endpoints in {path} after {timeout_s:.0f} s")
        time.sleep(poll_s)
    return read_endpoints(path)


def on_terminate(callback: Callable[[], None]) -> None:
    """Call ``callback`` on SIGINT, SIGTERM or SIGHUP (a closed terminal; main thread only, a
    no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)):
        signal.signal(sig, lambda *_: callback())


def set_torch_threads(n: int, *, deterministic: bool = False) -> None:
    """Limit torch's CPU threads (a small machine runs several processes); with
    ``deterministic``, make torch use deterministic algorithms (an op without one is an error)."""
    import torch

    torch.use_deterministic_algorithms(deterministic)
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass

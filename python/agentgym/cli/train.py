"""``agentgym train CONFIG``: the learner and N actors on one machine, with live progress.

The run directory gets the resolved config (``config.yaml``), the learner's ``metrics.jsonl``,
``checkpoints/``, a trajectory sample (``trajectories.jsonl``), per-actor counters
(``actors/``), each child's log (``logs/``) and ``summary.json``. Ctrl-C (or SIGTERM) asks the
learner to checkpoint and stop; a child that dies stops the run, and its log tail is printed.
``--resume RUN_DIR`` continues a run from its newest checkpoint with its saved config.
``--ray [ADDRESS]`` places the same processes on a Ray cluster (``agentgym.cli.ray_launch``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol

from agentgym.cli.common import ENDPOINTS_FILE, RESOLVED_CONFIG, on_terminate
from agentgym.config import RunConfig, dump_config, load_config

START_TIMEOUT_S = 600.0
LEARNER_GRACE_S = 60.0  # the learner checkpoints before it exits
ACTOR_GRACE_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        default=None,
        help="YAML config (with --resume: optional, the run's own is used)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field (repeatable)",
    )
    parser.add_argument(
        "--sync", action="store_true", help="synchronous baseline: actors wait for every update"
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run in RUN_DIR from its newest checkpoint",
    )
    parser.add_argument(
        "--init-from",
        default=None,
        metavar="CHECKPOINT",
        help="start from these weights (e.g. RUN_DIR/sft/checkpoints); sets model.init_from",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        default=None,
        metavar="ADDRESS",
        help="place the learner ranks and actors on an existing Ray cluster (default address: "
        "RAY_ADDRESS or the cluster started on this machine); needs agentgym-rs[ray]",
    )
    parser.add_argument("--quiet", action="store_true", help="no live progress line")


def run(args: argparse.Namespace) -> int:
    """``agentgym train``: returns the exit code."""
    config = _resolve(args)
    run_dir = Path(config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / RESOLVED_CONFIG)
    print(
        f"agentgym train: run dir {run_dir} ({'sync' if args.sync else 'async'}, "
        f"{config.actor.num_actors} actor(s))",
        flush=True,
    )
    from agentgym.actor.policy import prepare_model

    prepare_model(config)
    processes: Processes = LocalProcesses(config)
    if args.ray is not None:
        from agentgym.cli.ray_launch import RayProcesses

        processes = RayProcesses(config, address=args.ray)
    launcher = Launcher(
        config, sync=args.sync, resume=args.resume is not None, quiet=args.quiet,
        processes=processes,
    )  # fmt: skip
    return launcher.run()


def _resolve(args: argparse.Namespace) -> RunConfig:
    if args.resume is None:
        if args.config is None:
            raise SystemExit("agentgym train: CONFIG is required (or --resume RUN_DIR)")
        config = load_config(args.config, args.overrides)
        if args.init_from is not None:
            config = replace(config, model=replace(config.model, init_from=args.init_from))
        return config
    if args.init_from is not None:
        raise SystemExit(
            "agentgym train: --resume continues from the run's checkpoint; drop --init-from"
        )
    saved = Path(args.resume) / RESOLVED_CONFIG
    if not saved.exists():
        raise SystemExit(f"--resume: {saved} not found")
    config = load_config(saved, args.overrides)
    return replace(config, run_dir=str(Path(args.resume)))


class Child(Protocol):
    """One process of the run, wherever it runs: its name, exit code and log."""

    name: str
    log_path: Path

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM: the learner checkpoints first); returns at once."""

    def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for it to exit, then kill it; release its log."""

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of its log."""


class Processes(Protocol):
    """Where the run's processes start: this machine (``LocalProcesses``) or a Ray cluster
    (``agentgym.cli.ray_launch.RayProcesses``). ``stopping`` says the launcher was asked to
    stop, for starts that wait on the cluster."""

    def start_learner(self, extra: list[str], stopping: Callable[[], bool]) -> list[Child]:
        """The learner (rank 0 first, then any other ranks), running ``agentgym.cli.learner``."""

    def start_actors(self, extras: list[list[str]], stopping: Callable[[], bool]) -> list[Child]:
        """One actor per item of ``extras`` (its arguments), running ``agentgym.cli.actor``."""

    def close(self) -> None:
        """Release what the starts held (called once every child has stopped)."""


@dataclass
class LocalChild:
    """A child process on this machine and its log file."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    log: IO[bytes]

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def wait(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def tail(self, lines: int = 15) -> str:
        if not self.log.closed:
            self.log.flush()
        return log_tail(self.log_path, lines)


class LocalProcesses:
    """The learner (through torchrun when ``learner.ranks`` > 1) and the actors as local
    subprocesses, each in its own session and logging to ``RUN_DIR/logs/<name>.log``."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.run_dir = Path(config.run_dir)

    def start_learner(self, extra: list[str], stopping: Callable[[], bool]) -> list[Child]:
        module = "agentgym.cli.learner"
        cmd = self._command(module, extra)
        if self.config.learner.ranks > 1:
            ranks = self.config.learner.ranks
            cmd[1:3] = ["-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={ranks}", "--module", module]  # fmt: skip
        return [self._spawn("learner", cmd)]

    def start_actors(self, extras: list[list[str]], stopping: Callable[[], bool]) -> list[Child]:
        return [
            self._spawn(f"actor{i}", self._command("agentgym.cli.actor", extra))
            for i, extra in enumerate(extras)
        ]

    def close(self) -> None:
        pass

    def _command(self, module: str, extra: list[str]) -> list[str]:
        return [sys.executable, "-m", module, str(self.run_dir / RESOLVED_CONFIG), *extra]

    def _spawn(self, name: str, cmd: list[str]) -> LocalChild:
        logs = self.run_dir / "logs"
        logs.mkdir(exist_ok=True)
        log_path = logs / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed in LocalChild.wait
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # own process group: a terminal's Ctrl-C reaches only the launcher, which stops the
        # children in order (learner checkpoints first)
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        return LocalChild(name, proc, log_path, log)


@dataclass
class Progress:
    """What the live line shows, read from metrics.jsonl and the actors' counters."""

    started: float = field(default_factory=time.monotonic)
    metrics_offset: int = 0
    last: dict[str, Any] = field(default_factory=dict)
    steps: int = 0


class Launcher:
    """Starts, watches and stops the learner and the actors of one run (on this machine
    unless ``processes`` places them elsewhere)."""

    def __init__(
        self,
        config: RunConfig,
        *,
        sync: bool,
        resume: bool,
        quiet: bool,
        processes: Processes | None = None,
    ):
        self.config, self.sync, self.resume, self.quiet = config, sync, resume, quiet
        self.run_dir = Path(config.run_dir)
        self.processes = processes or LocalProcesses(config)
        self.learners: list[Child] = []
        self.children: list[Child] = []
        self.progress = Progress()
        self.stopping = False

    def run(self) -> int:
        on_terminate(self._request_stop)
        (self.run_dir / ENDPOINTS_FILE).unlink(missing_ok=True)
        for old in (self.run_dir / "actors").glob("actor_*.json"):  # a previous run's counters
            old.unlink()
        code = 1
        stopping = self._is_stopping
        try:
            extra = ["--resume"] if self.resume else []
            self.learners = self.processes.start_learner(extra, stopping)
            self.children += self.learners
            self._wait_endpoints()
            endpoints = str(self.run_dir / ENDPOINTS_FILE)
            extras = [
                ["--index", str(i), "--endpoints", endpoints, *["--sync"] * self.sync]
                for i in range(self.config.actor.num_actors)
            ]
            self.children += self.processes.start_actors(extras, stopping)
            code = self._watch()
        except ChildDied as e:
            print(f"\nagentgym train: {e}", file=sys.stderr, flush=True)
        finally:
            self._shutdown()
            self._summary(code)
        return code

    def _wait_endpoints(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self.run_dir / ENDPOINTS_FILE).exists():
            for learner in self.learners:
                self._check(learner)
            if self.stopping or time.monotonic() > deadline:
                raise ChildDied("the learner did not start (see logs/learner.log)")
            time.sleep(0.2)

    def _watch(self) -> int:
        while True:
            for child in self.children:
                self._check(child)
            if self.learners[0].poll() == 0:
                self._show(final=True)
                return 0
            if self.stopping:
                self._show(final=True)
                return 130
            self._show()
            time.sleep(1.0)

    def _check(self, child: Child) -> None:
        code = child.poll()
        if code is None or code == 0 or self.stopping:
            return
        raise ChildDied(
            f"{child.name} exited with code {code}; last lines of {child.log_path}:\n{child.tail()}"
        )

    def _request_stop(self) -> None:
        self.stopping = True

    def _is_stopping(self) -> bool:
        return self.stopping

    def _shutdown(self) -> None:
        actors = [c for c in self.children if c not in self.learners]
        try:  # learner first: it checkpoints and broadcasts stop; then the actors
            stop_all(self.learners, grace_s=LEARNER_GRACE_S)
            stop_all(actors, grace_s=ACTOR_GRACE_S)
        finally:
            self.processes.close()

    # --- progress ---------------------------------------------------------------------------

    def _show(self, final: bool = False) -> None:
        self._read_metrics()
        line = self._line()
        if self.quiet:
            return
        end = "\n" if final or not sys.stdout.isatty() else ""
        if sys.stdout.isatty():
            print("\r" + line.ljust(120), end=end, flush=True)
        elif final or self.progress.steps != self.progress.last.get("_shown"):
            print(line, flush=True)
            self.progress.last["_shown"] = self.progress.steps

    def _read_metrics(self) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        with open(path) as f:
            f.seek(self.progress.metrics_offset)
            for raw in f:
                if not raw.endswith("\n"):
                    break
                self.progress.metrics_offset += len(raw.encode())
                record = json.loads(raw)
                self.progress.last.update(record)
                self.progress.steps = record.get("step", self.progress.steps)

    def _line(self) -> str:
        m, actors = self.progress.last, actor_totals(self.run_dir)
        wall = max(actors.get("wall_s", 0.0), 1e-9)
        lags = {int(k.split("/")[1]): v for k, v in m.items() if k.startswith("staleness/")}
        mean_lag = sum(k * v for k, v in lags.items()) / max(sum(lags.values()), 1)
        samples_s = actors.get("trajectories_pushed", 0) / wall
        return (
            f"step {m.get('step', 0):>4}  reward {m.get('reward/all', 0.0):.3f}  "
            f"success {m.get('success/all', 0.0):.2f}  cap {m.get('horizon_cap')}  "
            f"staleness {mean_lag:.2f}  samples/s {samples_s:.1f}  "
            f"tokens/s {actors.get('pushed_tokens', 0) / wall:.0f}  "
            f"dropped {actors.get('dropped_env_errors', 0)}  "
            f"{time.monotonic() - self.progress.started:.0f}s"
        )

    def _summary(self, code: int) -> None:
        summary = {
            "exit_code": code,
            "mode": "sync" if self.sync else "async",
            "wall_s": time.monotonic() - self.progress.started,
            "steps": self.progress.steps,
            "last_metrics": {k: v for k, v in self.progress.last.items() if k != "_shown"},
            "actors": actor_totals(self.run_dir),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))


class ChildDied(RuntimeError):
    """A child process failed; the message says which and why."""


def actor_totals(run_dir: Path) -> dict[str, float]:
    """Counters summed over the actors' stats files (wall_s: the longest)."""
    totals: dict[str, float] = {}
    for path in sorted((run_dir / "actors").glob("actor_*.json")):
        try:
            stats = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        for k, v in stats.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                totals[k] = max(totals.get(k, 0), v) if k == "wall_s" else totals.get(k, 0) + v
    return totals


def stop_all(children: list[Child], grace_s: float) -> None:
    """Ask every child to stop, then give them ``grace_s`` together before killing the rest."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.wait(max(deadline - time.monotonic(), 0.0))


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of the log at ``path`` ("" when it is not there)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])

"""``agentgym train CONFIG``: the learner and N actors on one machine, with live progress.

The run directory gets the resolved config (``config.yaml``), the learner's ``metrics.jsonl``,
``checkpoints/``, a trajectory sample (``trajectories.jsonl``), per-actor counters
(``actors/``), each child's log (``logs/``) and ``summary.json``. Ctrl-C (or SIGTERM) asks the
learner to checkpoint and stop; a child that dies stops the run, and its log tail is printed.
``--resume RUN_DIR`` continues a run from its newest checkpoint with its saved config.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from agentgym.cli.common import ENDPOINTS_FILE, RESOLVED_CONFIG, on_terminate
from agentgym.config import RunConfig, dump_config, load_config

START_TIMEOUT_S = 600.0


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
    launcher = Launcher(config, sync=args.sync, resume=args.resume is not None, quiet=args.quiet)
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


@dataclass
class Child:
    """A child process and its log file."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    log: IO[bytes]

    def tail(self, lines: int = 15) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


@dataclass
class Progress:
    """What the live line shows, read from metrics.jsonl and the actors' counters."""

    started: float = field(default_factory=time.monotonic)
    metrics_offset: int = 0
    last: dict[str, Any] = field(default_factory=dict)
    steps: int = 0


class Launcher:
    """Starts, watches and stops the learner and the actors of one run."""

    def __init__(self, config: RunConfig, *, sync: bool, resume: bool, quiet: bool):
        self.config, self.sync, self.resume, self.quiet = config, sync, resume, quiet
        self.run_dir = Path(config.run_dir)
        self.children: list[Child] = []
        self.progress = Progress()
        self.stopping = False

    def run(self) -> int:
        on_terminate(self._request_stop)
        (self.run_dir / ENDPOINTS_FILE).unlink(missing_ok=True)
        for old in (self.run_dir / "actors").glob("actor_*.json"):  # a previous run's counters
            old.unlink()
        code = 1
        try:
            learner = self._spawn("learner", "agentgym.cli.learner", self.resume and ["--resume"])
            self._wait_endpoints(learner)
            for i in range(self.config.actor.num_actors):
                extra = ["--index", str(i), "--endpoints", str(self.run_dir / ENDPOINTS_FILE)]
                self._spawn(f"actor{i}", "agentgym.cli.actor", extra + (["--sync"] * self.sync))
            code = self._watch(learner)
        except ChildDied as e:
            print(f"\nagentgym train: {e}", file=sys.stderr, flush=True)
        finally:
            self._shutdown()
            self._summary(code)
        return code

    def _spawn(self, name: str, module: str, extra: Any) -> Child:
        logs = self.run_dir / "logs"
        logs.mkdir(exist_ok=True)
        log_path = logs / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed in _shutdown
        cmd = [sys.executable, "-m", module, str(self.run_dir / RESOLVED_CONFIG), *(extra or [])]
        if name == "learner" and self.config.learner.ranks > 1:
            ranks = self.config.learner.ranks
            cmd[1:3] = ["-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={ranks}", "--module", module]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # own process group: a terminal's Ctrl-C reaches only the launcher, which stops the
        # children in order (learner checkpoints first)
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        child = Child(name, proc, log_path, log)
        self.children.append(child)
        return child

    def _wait_endpoints(self, learner: Child) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self.run_dir / ENDPOINTS_FILE).exists():
            self._check(learner)
            if self.stopping or time.monotonic() > deadline:
                raise ChildDied("the learner did not start (see logs/learner.log)")
            time.sleep(0.2)

    def _watch(self, learner: Child) -> int:
        while True:
            for child in self.children:
                self._check(child)
            if learner.proc.poll() == 0:
                self._show(final=True)
                return 0
            if self.stopping:
                self._show(final=True)
                return 130
            self._show()
            time.sleep(1.0)

    def _check(self, child: Child) -> None:
        code = child.proc.poll()
        if code is None or code == 0 or self.stopping:
            return
        raise ChildDied(
            f"{child.name} exited with code {code}; last lines of {child.log_path}:\n{child.tail()}"
        )

    def _request_stop(self) -> None:
        self.stopping = True

    def _shutdown(self) -> None:
        learners = [c for c in self.children if c.name == "learner"]
        actors = [c for c in self.children if c.name != "learner"]
        for child in learners + actors:  # learner first: it checkpoints and broadcasts stop
            _terminate(child.proc, grace_s=60.0 if child in learners else 10.0)
            child.log.close()

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


def _terminate(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

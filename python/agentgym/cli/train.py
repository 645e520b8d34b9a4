"""``agentgym train CONFIG``: the learner and N actors on one machine, with live progress.

The run directory gets the resolved config (``config.yaml``), the learner's ``metrics.jsonl``,
``checkpoints/``, a trajectory sample (``trajectories.jsonl``), per-actor counters
(``actors/``), each child's log (``logs/``) and ``summary.json``. A run dir that already holds
a run is refused (``--overwrite`` deletes its files first; ``agentgym.cli.rundir``). Ctrl-C
(or SIGTERM) asks the learner to checkpoint and stop, and the command to resume is printed; a
child that dies stops the run, and its log tail is printed. ``--resume RUN_DIR`` continues a
run from its newest checkpoint with its saved config (``agentgym-learner --resume RUN_DIR``
takes the same form). The run holds its run dir locked until its last process exits (a second
``agentgym train`` there is refused, saying who holds it), and the children die with the
launcher, however it ends (``agentgym.cli.processes``).
``--ray [ADDRESS]`` places the same processes on a Ray cluster (``agentgym.cli.ray_launch``);
``--inline`` runs them as threads of this process (``agentgym.cli.inline``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.cli.common import (
    ENDPOINTS_FILE,
    RESOLVED_CONFIG,
    add_set_arg,
    on_terminate,
    resume_config,
    warn_slow_bf16,
)
from agentgym.cli.inline import InlineProcesses, inline_problem
from agentgym.cli.processes import (
    START_TIMEOUT_S,
    Child,
    ChildDied,
    LocalChild,
    Processes,
    exit_description,
    spawn,
    stop_all,
)
from agentgym.cli.progress import duration
from agentgym.cli.rundir import (
    LOCK_ENV,
    RunDirBusy,
    checkpoint_step,
    clear_run,
    lock_run_dir,
    refuse_existing,
    step_of,
    trim_metrics,
)
from agentgym.cli.servers import ServerFailed, served
from agentgym.cli.stepline import LEGEND, SignalWatch, StepLine
from agentgym.config import RunConfig, absolute_paths, dump_config, load_config, sync_problem
from agentgym.configtools import ConfigError
from agentgym.durable import newest_intact, write_atomic

MODEL_WAIT_S = START_TIMEOUT_S  # actors wait this long for the learner's tiny-model build
# A stopping learner finishes the update under way, then checkpoints: it is given twice the
# slowest step seen so far (an update on a CPU takes minutes), within these bounds.
LEARNER_GRACE_S = 60.0
LEARNER_GRACE_MAX_S = 900.0
ACTOR_GRACE_S = 10.0
WATCH_POLL_S = 0.25  # how often the launcher looks at its children and the metrics


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        default=None,
        help="YAML config (with --resume: optional, the run's own is used)",
    )
    add_set_arg(parser)
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
        "--overwrite",
        action="store_true",
        help="the run dir holds an earlier run: delete its files and start over",
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
    parser.add_argument(
        "--inline",
        action="store_true",
        help="run the learner and the actors as threads of this process, over in-process "
        "channels (one process to debug or profile; agentgym.cli.inline)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no per-step progress lines (the closing summary is still printed)",
    )


def run(args: argparse.Namespace) -> int:
    """``agentgym train``: returns the exit code."""
    config = _resolve(args)
    warn_slow_bf16(config, "agentgym train", ("learner", "engine"))
    if args.sync and (problem := sync_problem(config)) is not None:
        raise ConfigError(problem)  # reported like every config problem (exit code 2)
    run_dir = Path(config.run_dir)
    step = 0
    # what only reads the run dir first; what changes it once the run holds its lock
    if args.resume is None and not args.overwrite:
        _claim(run_dir, args)
    elif args.resume is not None:
        done = _resumable(config)
        if done is not None:  # nothing to do is not success: a script must not read it so
            raise SystemExit(done)
    if args.ray is not None and config.env.serve:
        raise SystemExit(
            "agentgym train: env.serve starts env servers on this machine, which actors on "
            "other Ray nodes may not reach; with --ray set env.remote to servers they can reach"
        )
    if args.inline and (problem := inline_problem(config, ray=args.ray is not None)):
        raise SystemExit(f"agentgym train: {problem}")
    actors = _actor_python(config) if args.ray is None else sys.executable
    _prepare_model(config, build=args.ray is not None)  # a refusal here leaves no run files
    try:
        lock = lock_run_dir(run_dir, "agentgym train")
    except RunDirBusy as e:
        raise SystemExit(f"agentgym train: {e}") from None
    if args.resume is None:
        _claim(run_dir, args)
    else:
        step = _resume_step(run_dir)
        _trim(run_dir, step)
    start = f", resuming from the checkpoint at step {step}" if args.resume else ""
    print(
        f"agentgym train: run dir {run_dir} ({_mode(args.sync, config)}"
        f"{', inline' if args.inline else ''}, "
        f"{config.actor.num_actors} actor(s){start})",
        flush=True,
    )
    try:
        with served(config, run_dir / "logs") as (config, servers):
            dump_config(config, run_dir / RESOLVED_CONFIG)  # with the servers' URLs
            processes: Processes = LocalProcesses(config, lock, actor_python=actors)
            if args.inline:
                processes = InlineProcesses(config)
            elif args.ray is not None:
                from agentgym.cli.ray_launch import RayProcesses

                processes = RayProcesses(config, address=args.ray)
            launcher = Launcher(
                config, sync=args.sync or config.deterministic, resume=args.resume is not None,
                quiet=args.quiet,
                processes=processes, servers=servers,
            )  # fmt: skip
            return launcher.run()
    except ServerFailed as e:
        print(f"agentgym train: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        # This process's hold ends here (children still alive keep theirs): a caller that
        # runs train again in the same process, a --resume say, is not refused by its own lock.
        os.close(lock)


def _resume_step(run_dir: Path) -> int:
    """The step the learner resumes from: its newest intact checkpoint's (a damaged newer one
    is passed over, saying so, as the learner does)."""
    path, skipped = newest_intact(run_dir / "checkpoints")
    for damaged, why in skipped:
        print(f"agentgym train: checkpoint {damaged.name} is damaged ({why}); passed over",
              flush=True)  # fmt: skip
    if path is None:
        raise SystemExit(f"agentgym train: --resume: {run_dir} has no intact checkpoint")
    return step_of(path) or 0


def _trim(run_dir: Path, step: int) -> None:
    """Drop the metrics lines a resumed run makes again (and a torn last one), saying so."""
    dropped = trim_metrics(run_dir, step)
    if dropped:
        print(
            f"agentgym train: metrics.jsonl: removed steps {dropped[0]}-{dropped[-1]}, made "
            f"after the checkpoint at step {step}; they are trained again",
            flush=True,
        )


def _mode(sync: bool, config: RunConfig) -> str:
    if config.deterministic:
        return "deterministic: sync, one request per engine batch"
    return "sync" if sync else "async"


def _resolve(args: argparse.Namespace) -> RunConfig:
    if args.resume is None:
        if args.config is None:
            raise SystemExit("agentgym train: CONFIG is required (or --resume RUN_DIR)")
        init = [f"model.init_from={args.init_from}"] if args.init_from is not None else []
        return absolute_paths(load_config(args.config, [*args.overrides, *init]))
    for flag, given in (("CONFIG", args.config), ("--init-from", args.init_from),
                        ("--overwrite", args.overwrite)):  # fmt: skip
        if given:
            raise SystemExit(
                f"agentgym train: --resume continues {args.resume} with its own config.yaml and "
                f"checkpoint; drop {flag} (change fields with --set KEY=VALUE)"
            )
    return resume_config(args.resume, args.overrides)


def _actor_python(config: RunConfig) -> str:
    """The Python the actors run under (``engine.python``), checked before anything starts:
    a missing one, or one without vLLM for the vLLM engine, is refused in one line."""
    from agentgym.cli.engine import ActorPythonError, actor_python

    try:
        return actor_python(config.engine.backend, config.engine.python)
    except ActorPythonError as e:
        raise SystemExit(f"agentgym train: {e}") from None


def _prepare_model(config: RunConfig, *, build: bool) -> None:
    """Refuse a run dir whose tiny model was built with other settings, with what to do (it is
    the untrained policy other commands share, never replaced silently). The learner builds a
    missing one while the actors start (they wait for it: ``--wait-model``), so the launcher
    imports no torch; with ``build`` (Ray: actors on other nodes) it is built here first."""
    from agentgym.actor.policy import model_conflict, model_dir, prepare_model

    problem = model_conflict(config)
    if problem is None and build:
        try:
            prepare_model(config)
        except ValueError as e:
            problem = str(e)
    if problem is not None:
        raise SystemExit(
            f"agentgym train: {problem}\n  delete {model_dir(config)} to build the configured "
            "model there, or set another run_dir"
        )


def _claim(run_dir: Path, args: argparse.Namespace) -> None:
    """Make ``run_dir`` free for a new run: refuse one holding a run, or with ``--overwrite``
    delete that run's files (saying which)."""
    if not args.overwrite:
        refusal = refuse_existing(run_dir)
        if refusal is not None:
            raise SystemExit(f"agentgym train: {refusal}")
        return
    removed = clear_run(run_dir)
    if removed:
        print(f"agentgym train: --overwrite: deleted {', '.join(removed)} in {run_dir}")


def _resumable(config: RunConfig) -> str | None:
    """None when the run can go on; the message saying it is finished (the command then exits
    with code 1, having trained nothing) otherwise. A run dir without a checkpoint is refused
    (SystemExit)."""
    run_dir = Path(config.run_dir)
    step = checkpoint_step(run_dir)
    if step is None:
        raise SystemExit(
            f"agentgym train: --resume: {run_dir} has no checkpoint to resume from (the run "
            "stopped before its first one); start it over with: agentgym train "
            f"{run_dir / RESOLVED_CONFIG} --overwrite"
        )
    total = config.learner.max_steps
    if total is None or step < total:
        return None
    return (
        f"agentgym train: {run_dir} is finished: its checkpoint is at step {step} of "
        f"learner.max_steps {total}. To train further: agentgym train --resume {run_dir} "
        f"--set learner.max_steps={total + step}"
    )


class LocalProcesses:
    """The learner (through torchrun when ``learner.ranks`` > 1) and the actors as local
    subprocesses, each in its own session and logging to ``RUN_DIR/logs/<name>.log``; they
    inherit ``lock`` (the run dir's, ``lock_run_dir``), which they hold while they live. The
    actors run under ``actor_python`` (``engine.python``: the vLLM engine's own environment),
    the learner under this Python."""

    def __init__(
        self, config: RunConfig, lock: int | None = None, actor_python: str = sys.executable
    ):
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.lock = lock
        self.actor_python = actor_python

    def start_learner(self, args: list[str], stopping: Callable[[], bool]) -> list[Child]:
        module = "agentgym.cli.learner"
        cmd = [sys.executable, "-m", module, *args]
        if self.config.learner.ranks > 1:
            ranks = self.config.learner.ranks
            cmd[1:3] = ["-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={ranks}", "--module", module]  # fmt: skip
        return [self._spawn("learner", cmd)]

    def start_actors(self, extras: list[list[str]], stopping: Callable[[], bool]) -> list[Child]:
        return [
            self._spawn(f"actor{i}", [self.actor_python, "-m", "agentgym.cli.actor", *args])
            for i, args in enumerate(self._actor_args(extras))
        ]

    def close(self) -> None:
        pass

    def _actor_args(self, extras: list[list[str]]) -> list[list[str]]:
        return [[str(self.run_dir / RESOLVED_CONFIG), *extra] for extra in extras]

    def _spawn(self, name: str, cmd: list[str]) -> LocalChild:
        log = self.run_dir / "logs" / f"{name}.log"
        if self.lock is None:
            return spawn(name, cmd, log)
        return spawn(name, cmd, log, env={LOCK_ENV: str(self.lock)}, pass_fds=(self.lock,))


@dataclass
class Progress:
    """What the progress lines show, read from metrics.jsonl and the actors' counters.
    ``first_step`` is where this launch began (a resumed run's checkpoint) and ``sampling``
    when the actors were started, from which the ETA's pace is measured."""

    started: float = field(default_factory=time.monotonic)
    metrics_offset: int = 0
    last: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    first_step: int = 0
    sampling: float | None = None
    # Seconds between the launch and the first metrics record, then between records: the
    # longest is what a stopping learner's update in flight may still need.
    last_record: float = field(default_factory=time.time)
    slowest_step_s: float = 0.0


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
        servers: Sequence[Child] = (),
    ):
        self.config, self.sync, self.resume, self.quiet = config, sync, resume, quiet
        self.servers = list(servers)  # watched like the children, stopped by their owner
        self.run_dir = Path(config.run_dir)
        self.processes = processes or LocalProcesses(config)
        self.learners: list[Child] = []
        self.children: list[Child] = []
        self.progress = Progress()
        self.step_line = StepLine(config.learner.max_steps)
        self.signal = SignalWatch(config.learner.advantage.estimator)
        if resume:  # earlier steps are in metrics.jsonl already; show only this launch's
            metrics = self.run_dir / "metrics.jsonl"
            step = checkpoint_step(self.run_dir) or 0
            offset = metrics.stat().st_size if metrics.exists() else 0
            self.progress = Progress(metrics_offset=offset, steps=step, first_step=step)
        self.stopping = False

    def run(self) -> int:
        on_terminate(self._request_stop)
        (self.run_dir / ENDPOINTS_FILE).unlink(missing_ok=True)
        for old in (self.run_dir / "actors").glob("actor_*.json"):  # a previous run's counters
            old.unlink()
        code = 1
        stopping = self._is_stopping
        try:
            config_arg = str(self.run_dir / RESOLVED_CONFIG)
            args = ["--resume", str(self.run_dir)] if self.resume else [config_arg]
            self.learners = self.processes.start_learner(args, stopping)
            self.children += self.learners
            # Actors start now and build their engines while the learner starts; they read
            # the endpoints file once the learner has written it.
            endpoints = str(self.run_dir / ENDPOINTS_FILE)
            extras = [
                ["--index", str(i), "--endpoints", endpoints, "--wait-model", str(MODEL_WAIT_S),
                 *["--sync"] * self.sync]
                for i in range(self.config.actor.num_actors)
            ]  # fmt: skip
            self.children += self.processes.start_actors(extras, stopping)
            self._wait_endpoints()
            self.progress.sampling = time.monotonic()
            if not self.quiet:
                print("agentgym train: actors started; waiting for the first update", flush=True)
                print(f"agentgym train: {LEGEND}", flush=True)
            code = self._watch()
        except ChildDied as e:
            print(f"\nagentgym train: {e}", file=sys.stderr, flush=True)
        finally:
            self._shutdown()
            self._show()  # updates the learner made while it was being stopped
            self._summary(code)
            print(self._closing(code), flush=True)
        return code

    def _wait_endpoints(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self.run_dir / ENDPOINTS_FILE).exists():
            for child in [*self.children, *self.servers]:
                self._check(child)
            if self.stopping or time.monotonic() > deadline:
                raise ChildDied("the learner did not start (see logs/learner.log)")
            time.sleep(0.2)

    def _watch(self) -> int:
        while True:
            for child in [*self.children, *self.servers]:
                self._check(child)
            if self.learners[0].poll() == 0:
                self._show()
                return 0
            if self.stopping:
                self._show()
                print(
                    "\nagentgym train: stopping; the learner finishes the update under way and "
                    f"writes a checkpoint (given up to {self._learner_grace_s():.0f} s)",
                    flush=True,
                )
                return 130
            self._show()
            # The run's end (the learner's exit) is seen within a poll; a pass (child polls,
            # new metrics lines) costs well under a millisecond.
            time.sleep(WATCH_POLL_S)

    def _check(self, child: Child) -> None:
        code = child.poll()
        if code is None or code == 0 or self.stopping:
            return
        raise ChildDied(
            f"{child.name} {exit_description(code)}; last lines of {child.log_path}:\n"
            f"{child.tail()}"
        )

    def _request_stop(self) -> None:
        self.stopping = True

    def _is_stopping(self) -> bool:
        return self.stopping

    def _shutdown(self) -> None:
        actors = [c for c in self.children if c not in self.learners]
        try:  # learner first: it checkpoints and broadcasts stop; then the actors
            stop_all(self.learners, grace_s=self._learner_grace_s())
            stop_all(actors, grace_s=ACTOR_GRACE_S)
        finally:
            self.processes.close()

    # --- progress ---------------------------------------------------------------------------

    def _show(self) -> None:
        """One line per update the learner recorded since the last call (and a warning when
        steps go by without a learning signal, also with ``--quiet``)."""
        for record in self._read_metrics():
            self._time_step(record.get("time"))
            self.progress.last.update(record)
            self.progress.steps = record.get("step", self.progress.steps)
            line = self._line(record)  # also when quiet: the line's rates need every step
            if not self.quiet:
                print(line + _eval_note(record), flush=True)
            warning = self.signal.observe(record)
            if warning is not None:
                print(warning, flush=True)

    def _time_step(self, at: Any) -> None:
        """Note the time since the previous record (``at``: a record's wall-clock ``time``)."""
        if isinstance(at, (int, float)):
            progress = self.progress
            progress.slowest_step_s = max(progress.slowest_step_s, at - progress.last_record)
            progress.last_record = at

    def _learner_grace_s(self) -> float:
        """How long a stopping learner is given before it is killed (``LEARNER_GRACE_S``)."""
        wanted = 2 * self.progress.slowest_step_s
        return min(max(LEARNER_GRACE_S, wanted), LEARNER_GRACE_MAX_S)

    def _read_metrics(self) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return []
        records = []
        with open(path, "rb") as f:
            f.seek(self.progress.metrics_offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                self.progress.metrics_offset += len(raw)
                records.append(json.loads(raw))
        return records

    def _line(self, record: dict[str, Any]) -> str:
        """The step's line (``agentgym.cli.stepline``), then the actors' env errors so far, the
        time taken and the ETA."""
        errors = actor_totals(self.run_dir).get("dropped_env_errors", 0)
        elapsed = duration(time.monotonic() - self.progress.started)
        return self.step_line.format(record, f"env-errors {errors}  {elapsed}  eta {self._eta()}")

    def _eta(self) -> str:
        """Time left at the pace of this launch's updates so far ("?" before the first)."""
        p, total = self.progress, self.config.learner.max_steps
        done = p.steps - p.first_step
        if total is None or p.sampling is None or done < 1:
            return "?"
        pace = (time.monotonic() - p.sampling) / done
        return duration(pace * max(total - p.steps, 0))

    def _closing(self, code: int) -> str:
        """Where the run's files are, and what to run next (eval, or the resume command)."""
        run_dir, step = self.run_dir, checkpoint_step(self.run_dir)
        total = self.config.learner.max_steps
        of = f"/{total}" if total is not None else ""
        wall = duration(time.monotonic() - self.progress.started)
        head = {
            0: f"finished at step {self.progress.steps}{of} after {wall}",
            130: f"stopped at step {self.progress.steps}{of} after {wall}",
        }.get(code, f"failed (exit {code}) at step {self.progress.steps}{of} after {wall}")
        ckpts = run_dir / "checkpoints"
        newest = f"{ckpts} (newest: step {step})" if step is not None else "none written"
        lines = [
            f"agentgym train: {head}",
            f"  checkpoints   {newest}",
            f"  metrics       {run_dir / 'metrics.jsonl'}",
            f"  trajectories  {run_dir / 'trajectories.jsonl'}",
            f"  logs          {run_dir / 'logs'}",
        ]
        if step is not None:
            config = run_dir / RESOLVED_CONFIG
            lines.append(f"  evaluate      agentgym eval {config} --checkpoint {ckpts}")
        if code != 0 and step is not None:
            lines.append(f"  resume        agentgym train --resume {run_dir}")
        if self.signal.silent_steps:
            lines.append(
                f"  note          {self.signal.silent_steps} step(s) had no group whose "
                "rewards differ: they trained on no policy gradient"
            )
        return "\n".join(lines)

    def _summary(self, code: int) -> None:
        summary = {
            "exit_code": code,
            "mode": "sync" if self.sync else "async",
            "wall_s": time.monotonic() - self.progress.started,
            "steps": self.progress.steps,
            "last_metrics": dict(self.progress.last),
            "actors": actor_totals(self.run_dir),
        }
        try:
            write_atomic(self.run_dir / "summary.json", json.dumps(summary, indent=1))
        except OSError as e:  # a full disk: said once, the run's outcome is printed anyway
            print(f"agentgym train: could not write summary.json: {e}", file=sys.stderr,
                  flush=True)  # fmt: skip


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


def _eval_note(record: dict[str, Any]) -> str:
    """The periodic eval's results where this update's record has them (else "")."""
    rates = {k[5:]: v for k, v in record.items() if k.startswith(("eval/avg@", "eval/pass@"))}
    if not rates:
        return ""
    shown = "  ".join(f"{k} {v:.3f}" for k, v in sorted(rates.items()))
    return f"\n  eval on {record.get('eval/tasks', '?')} held-out tasks: {shown}"

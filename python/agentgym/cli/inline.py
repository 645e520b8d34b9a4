"""``agentgym train --inline``: the learner and the actors as threads of the launcher's process.

The run is the one ``agentgym train`` starts in processes, with one difference: the transport.
The learner binds ``inproc`` endpoints (``Endpoints.inproc``) and the actors connect to them, so
every message is encoded, checked and counted as over Unix or TCP sockets, but passed in memory
within one process. That makes a run a debugger can step through from an actor's episode into
the learner's update (``breakpoint()`` anywhere, or ``python -m pdb -m agentgym.cli.main train
CONFIG --inline``), and a profiler see in one trace.

The launcher keeps its role: it holds the run dir's lock, owns the signals (Ctrl-C asks the
learner to checkpoint and stop, as it does a learner process), prints the progress lines and
stops the children in order. A child is a ``ThreadChild``: its exit code is its entry point's
return value (an exception: 1, its traceback logged). The children share one log,
``RUN_DIR/logs/inline.log``, each line naming its thread.

What one process cannot give: a thread cannot be killed, so a child that ignores its stop
request is left running (as a daemon thread, it ends with the process); torch's thread count
and deterministic-algorithms switch are the process's, which is why the learner's and the
actors' ``torch_threads`` must agree; and the actors run under this Python (not
``engine.python``) on the learner's machine (no ``learner.ranks`` > 1, no ``--ray``).
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from agentgym.cli.common import RESOLVED_CONFIG
from agentgym.cli.processes import Child, log_tail
from agentgym.config import RunConfig
from agentgym.transport.endpoints import Endpoints

INLINE_LOG = "inline.log"
"""The children's shared log, in ``RUN_DIR/logs``."""

LOG_FORMAT = "%(asctime)s %(threadName)s %(message)s"


def inline_problem(config: RunConfig, *, ray: bool) -> str | None:
    """Why this run cannot run inline (None when it can)."""
    if ray:
        return "--inline runs the learner and actors in this process; drop --ray or --inline"
    if config.learner.ranks > 1:
        return (
            f"--inline runs one learner process; learner.ranks is {config.learner.ranks} "
            "(set learner.ranks=1, or drop --inline)"
        )
    if config.engine.python:
        return (
            f"--inline runs the actors under this Python ({sys.executable}); engine.python is "
            f"{config.engine.python} (unset it, or drop --inline)"
        )
    if config.torch_threads != config.actor.torch_threads:
        return (
            f"--inline: torch's thread count is the process's, and torch_threads "
            f"({config.torch_threads}) differs from actor.torch_threads "
            f"({config.actor.torch_threads}); set them equal"
        )
    return None


class ThreadChild:
    """One child of an inline run: ``target`` on a thread of this process. ``stop_on`` is the
    hook its entry point is given, through which it hands over the function that stops it;
    ``terminate`` calls that function."""

    def __init__(self, name: str, target: Callable[..., int | None], log_path: Path):
        self.name, self.log_path = name, log_path
        self._target = target
        self._code: int | None = None
        self._stopper: Callable[[], None] | None = None
        self._stop_asked = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ThreadChild:
        self._thread.start()
        return self

    def stop_on(self, stopper: Callable[[], None]) -> None:
        """Keep ``stopper``; a stop asked for before it arrived is passed on at once."""
        with self._lock:
            self._stopper = stopper
            asked = self._stop_asked
        if asked:
            stopper()

    def _run(self) -> None:
        log = logging.getLogger(f"agentgym.inline.{self.name}")
        try:
            code = self._target(stop_on=self.stop_on)
            self._code = int(code or 0)
        except SystemExit as e:  # an entry point's refusal: a message or a code
            if isinstance(e.code, str):
                log.error("%s", e.code)
                print(e.code, file=sys.stderr, flush=True)
            self._code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - the launcher reports it with the log's tail
            log.error("%s failed:\n%s", self.name, traceback.format_exc().rstrip())
            self._code = 1

    def poll(self) -> int | None:
        if self._thread.is_alive() or not self._thread.ident:
            return None
        return self._code if self._code is not None else 1

    def terminate(self) -> None:
        with self._lock:
            self._stop_asked = True
            stopper = self._stopper
        if stopper is not None and self._thread.is_alive():
            stopper()

    def wait(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logging.getLogger("agentgym.inline").warning(
                "%s did not stop within %.0f s; it is left to end with the process",
                self.name, timeout_s,
            )  # fmt: skip

    def tail(self, lines: int = 15) -> str:
        for handler in logging.getLogger().handlers:
            handler.flush()
        return log_tail(self.log_path, lines)


class InlineProcesses:
    """``Processes`` for ``--inline``: the learner and each actor as a ``ThreadChild`` running
    the entry point its process would (``agentgym.cli.learner.main``, ``agentgym.cli.actor.main``)
    with the same arguments; the learner binds ``inproc`` endpoints named after the run dir. The
    run's log handler is installed on the root logger for the run and removed by ``close``."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.log_path = self.run_dir / "logs" / INLINE_LOG
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._handler = logging.FileHandler(self.log_path)
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root = logging.getLogger()
        root.addHandler(self._handler)
        self._level = root.level
        root.setLevel(logging.INFO)
        key = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:12]
        self.endpoints = Endpoints.inproc(f"agentgym-{key}")

    def start_learner(self, args: list[str], stopping: Callable[[], bool]) -> list[Child]:
        from agentgym.cli import learner

        def target(stop_on):
            return learner.main(args, stop_on=stop_on, endpoints=self.endpoints, locked=True)

        return [ThreadChild("learner", target, self.log_path).start()]

    def start_actors(self, extras: list[list[str]], stopping: Callable[[], bool]) -> list[Child]:
        from agentgym.cli import actor

        config = str(self.run_dir / RESOLVED_CONFIG)
        children = []
        for i, extra in enumerate(extras):
            argv = [config, *extra]
            children.append(
                ThreadChild(f"actor{i}", _bind(actor.main, argv), self.log_path).start()
            )
        return children

    def close(self) -> None:
        root = logging.getLogger()
        root.removeHandler(self._handler)
        root.setLevel(self._level)
        self._handler.close()


def _bind(main: Callable[..., int], argv: list[str]) -> Callable[..., int]:
    return lambda stop_on: main(argv, stop_on=stop_on)

"""Child processes of a run: how they start, are watched and are stopped, wherever they run.

The launcher (``agentgym.cli.train``), the Ray launcher (``agentgym.cli.ray_launch``) and the
env servers a run starts (``agentgym.cli.servers``) share this: a ``Child`` has a name, an exit
code, a log and a way to be stopped; ``Processes`` starts the learner and the actors somewhere
(this machine, or a Ray cluster); ``stop_all`` stops a set of children within one grace period.
A local child runs in its own process session, so a terminal's Ctrl-C reaches only the launcher,
which stops the children in order (the learner first: it checkpoints). A local child dies with
its launcher: on Linux it gets SIGTERM when the launcher ends, however it ends (``kill -9``
included; the parent-death signal), and stops as if told to.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

START_TIMEOUT_S = 600.0
"""How long a start may wait: for the learner's endpoints, or for Ray to place a process."""


def exit_description(code: int) -> str:
    """How a child ended, for its error: "exited with code 1", or for a negative code (killed
    by a signal) the signal's name; a SIGKILL the run did not send is most often the kernel's
    out-of-memory killer, which the message says along with what lowers the peak."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    text = f"was killed by {name} (exit code {code})"
    if -code == signal.SIGKILL:
        text += (
            ": a SIGKILL the run did not send, most often the kernel's out-of-memory killer "
            "('Out of memory: Killed process' in dmesg); fewer runs beside it, a smaller "
            "learner.micro_batch_size or actor.max_context_tokens lower the peak"
        )
    return text


class ChildDied(RuntimeError):
    """A child process failed (or could not start); the message says which and why."""


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
    """Where the run's processes start: this machine (``agentgym.cli.train.LocalProcesses``)
    or a Ray cluster (``agentgym.cli.ray_launch.RayProcesses``). ``stopping`` says the launcher
    was asked to stop, for starts that wait on the cluster."""

    def start_learner(self, args: list[str], stopping: Callable[[], bool]) -> list[Child]:
        """The learner (rank 0 first, then any other ranks), running ``agentgym.cli.learner``
        with ``args`` (the run's config, or ``--resume RUN_DIR``)."""

    def start_actors(self, extras: list[list[str]], stopping: Callable[[], bool]) -> list[Child]:
        """One actor per item of ``extras`` (its arguments after the run's config), running
        ``agentgym.cli.actor``."""

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


def spawn(
    name: str,
    cmd: Sequence[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> LocalChild:
    """Start ``cmd`` as ``name`` in its own process session, its output appended to
    ``log_path``, dying with this process (see the module doc); ``pass_fds``: descriptors it
    inherits (the run dir's lock). Returns the ``LocalChild``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - closed in LocalChild.wait
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(
        list(cmd), stdout=log, stderr=subprocess.STDOUT, env=environ, start_new_session=True,
        pass_fds=tuple(pass_fds), preexec_fn=_die_with(os.getpid()),
    )  # fmt: skip
    return LocalChild(name, proc, log_path, log)


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int):
    """A ``preexec_fn`` that gives the child SIGTERM when ``parent`` (the calling thread) ends
    (Linux's ``PR_SET_PDEATHSIG``), and SIGTERM at once if it already has; None elsewhere."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def stop_all(children: Sequence[Child], grace_s: float) -> None:
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

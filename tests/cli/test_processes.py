"""Process supervision lives in ``agentgym.cli.processes``, below the launchers that use it: the
Ray launcher and the env servers do not reach up into ``agentgym train``'s module, and a child
started there is logged, watched and stopped within its grace period."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentgym.cli.processes import exit_description, log_tail, spawn, stop_all

CLI = Path(__file__).resolve().parents[2] / "python" / "agentgym" / "cli"


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_import_circle_between_the_launchers():
    for user in ("ray_launch.py", "servers.py", "processes.py"):
        assert "agentgym.cli.train" not in imported_modules(CLI / user), user
    below = imported_modules(CLI / "processes.py")
    assert not {m for m in below if m.startswith("agentgym.cli.")}, below


def test_a_child_is_logged_and_stopped(tmp_path):
    log = tmp_path / "logs" / "child.log"
    script = "import time; print('started', flush=True); time.sleep(60)"
    child = spawn("child", [sys.executable, "-c", script], log)
    deadline = time.monotonic() + 30
    while "started" not in log_tail(log) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.poll() is None
    started = time.monotonic()
    stop_all([child], grace_s=10.0)
    assert time.monotonic() - started < 10.0  # SIGTERM ends it; no wait for the grace period
    assert child.poll() is not None and child.poll() != 0
    assert child.tail() == "started"
    assert child.log.closed


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    log = tmp_path / "child.log"
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    child = spawn("stubborn", [sys.executable, "-c", script], log)
    deadline = time.monotonic() + 30
    while "ready" not in log_tail(log) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    stop_all([child], grace_s=0.5)
    assert 0.4 < time.monotonic() - started < 10.0
    assert child.poll() == -9


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts: it no longer runs)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def test_a_child_dies_with_its_launcher_killed_by_sigkill(tmp_path):
    launcher = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from agentgym.cli.processes import spawn\n"
        f"c = spawn('child', [sys.executable, '-c', 'import time; time.sleep(60)'], "
        f"Path({str(tmp_path / 'child.log')!r}))\n"
        "print(c.proc.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    assert not _gone(child)
    proc.kill()  # SIGKILL: the launcher cannot stop its children itself
    proc.wait()
    proc.stdout.close()
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = _gone(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the child outlived its launcher"


def test_an_exit_by_signal_is_named_and_a_foreign_sigkill_points_at_memory():
    killed = subprocess.run([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"])
    text = exit_description(killed.returncode)
    assert text.startswith("was killed by SIGKILL (exit code -9)"), text
    assert "out-of-memory killer" in text and "learner.micro_batch_size" in text, text
    assert exit_description(-signal.SIGTERM) == "was killed by SIGTERM (exit code -15)"
    assert exit_description(3) == "exited with code 3"

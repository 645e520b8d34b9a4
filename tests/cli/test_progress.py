"""Long commands show progress a log can hold: redrawn in place on a terminal, whole lines
(no carriage returns) when the output is a file or a pipe."""

from __future__ import annotations

import io
import subprocess
import sys

from agentgym.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_line_redrawn():
    out = Terminal()
    progress = Progress(out, every_s=0.0)
    for k in range(1, 4):
        progress.show(f"step {k}/3")
    progress.finish("step 3/3 done")
    assert out.getvalue() == "\rstep 1/3\rstep 2/3\rstep 3/3\rstep 3/3 done\n"


def test_a_log_gets_whole_lines_at_most_every_interval_and_the_last():
    out = io.StringIO()
    progress = Progress(out, every_s=3600.0)
    for k in range(1, 101):
        progress.show(f"step {k}/100")
    progress.finish("step 100/100")
    assert out.getvalue() == "step 1/100\nstep 100/100\n"


def agentgym(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentgym.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_demos_into_a_log_has_no_carriage_returns(tmp_path):
    done = agentgym("demos", "babyai", "--tasks", "0:6", "--out", str(tmp_path / "d.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("demos 6/6 tasks, ")


def test_index_build_into_a_log_has_no_carriage_returns(tmp_path):
    generated = agentgym("index", "generate", str(tmp_path / "data"), "--questions", "20")
    assert generated.returncode == 0, generated.stderr
    data = tmp_path / "data"
    built = agentgym("index", "build", str(data / "corpus.jsonl"), str(data / "index"))
    assert built.returncode == 0, built.stderr
    assert "\r" not in built.stderr
    assert "100.0%" in built.stderr.splitlines()[-1]

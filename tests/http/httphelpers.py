"""Helpers of the HTTP tests: native servers in-process, CLI and fake servers as subprocesses.

Everything binds 127.0.0.1 on a free port; subprocesses are killed when the test ends.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import agentgym

HERE = Path(__file__).parent
REPO = HERE.parent.parent
AGENTGYM_ROOT = str(Path(agentgym.__file__).resolve().parent.parent)


def native_server(env: str, **kwargs):
    """``agentgym._envserver.Server`` for ``env`` on a free loopback port."""
    from agentgym import _envserver

    options = dict(kwargs.pop("options", {}))
    if env == "textcraft":
        from agentgym.envs.textcraft import default_recipes_dir

        options.setdefault("recipes_dir", default_recipes_dir())
    kwargs.setdefault("port", 0)
    return _envserver.Server(env, host="127.0.0.1", options=options, **kwargs)


def url_of(server) -> str:
    return f"http://{server.host}:{server.port}"


class Proc:
    """A server subprocess that printed its port."""

    def __init__(self, args: list[str], ready: str, timeout: float = 60.0):
        env = {
            **os.environ,
            # The same agentgym this test imported (installed, or a dev tree with its .so).
            "PYTHONPATH": os.pathsep.join([AGENTGYM_ROOT, os.environ.get("PYTHONPATH", "")]),
        }
        self.p = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(lines,), daemon=True).start()
        self.output: list[str] = []
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                raise RuntimeError(f"{args} did not start: {self.output}") from None
            if line is None:
                raise RuntimeError(f"{args} exited: {self.output}")
            self.output.append(line)
            if ready in line:
                self.port = int(line.rsplit(":", 1)[-1].split()[-1].strip().strip("/"))
                break
        self.url = f"http://127.0.0.1:{self.port}"

    def _pump(self, lines: queue.Queue) -> None:
        for line in self.p.stdout:
            lines.put(line.strip())
        lines.put(None)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=10)
        self.p.stdout.close()

    def interrupt(self) -> int:
        self.p.send_signal(signal.SIGINT)
        code = self.p.wait(timeout=20)
        self.p.stdout.close()
        return code


def fake_server(mode: str = "ok", *extra: str) -> Proc:
    """``fake_agentgym_server.py`` in ``mode`` (see there)."""
    return Proc(
        [sys.executable, str(HERE / "fake_agentgym_server.py"), "--mode", mode, *extra], "PORT"
    )


def envserver_process(env: str, *extra: str) -> Proc:
    """The ``agentgym-envserver`` command line, as a subprocess."""
    args = [sys.executable, "-m", "agentgym.cli.envserver", "--env", env, "--port", "0", *extra]
    return Proc(args, "agentgym-envserver:")


def raw_post(url: str, method: str, path: str, body, headers: dict) -> tuple[int, object]:
    """Sends exactly ``body`` (bytes as they are, anything else as JSON); returns (status, JSON)."""
    import json

    import requests

    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    r = requests.request(
        method, url + path, data=data, headers={"Content-Type": "application/json", **headers}
    )
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text

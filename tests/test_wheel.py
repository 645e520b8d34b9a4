"""The wheel: built with maturin and zig for manylinux2014, installed where there is no Rust.

Slow (a release build of the extension). Builds the abi3 wheel of this checkout, checks its
platform tag and the shared libraries it needs (``auditwheel show``), installs it into a fresh
venv with a PATH that has no ``cargo``/``rustc``, and runs the README's env-pool example and an
HTTP round trip there. Skipped where maturin, zig (the ``ziglang`` package) or auditwheel are
missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXAMPLE = """
import json, subprocess, sys, time, urllib.request
from agentgym.envs import EnvPool, env_names

assert {"babyai", "search", "textcraft"} <= set(env_names()), env_names()
pool = EnvPool("babyai", threads=2)
ids = pool.create(1024)
obs = pool.reset(ids, task_ids=range(1024))
pool.set_horizon(20)
batch = pool.step(ids, ["turn left"] * 1024)
assert len(batch.observations) == 1024 and batch.ok, batch.errors[:3]
pool.close(ids)
craft = EnvPool("textcraft")
[sid] = craft.create(1)
assert "Goal: craft" in craft.reset([sid], [3])[0]

server = subprocess.Popen([sys.executable, "-m", "agentgym.cli.envserver", "--env", "textcraft",
                           "--port", "0"], stdout=subprocess.PIPE, text=True)
url = "http://" + server.stdout.readline().strip().rsplit("http://", 1)[1]
body = urllib.request.urlopen(url + "/health", timeout=10).read()
server.terminate()
server.wait()
print("ok", json.loads(body)["env"])
"""


def _tool(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
def test_manylinux_wheel_runs_without_a_rust_toolchain(tmp_path):
    for module in ("maturin", "ziglang", "auditwheel"):
        if not _tool(module):
            pytest.skip(f"needs {module} (pip install maturin ziglang auditwheel)")
    out = tmp_path / "wheels"
    target = os.environ.get("CARGO_TARGET_DIR", str(tmp_path / "target"))
    build = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "--zig",
         "--compatibility", "manylinux2014", "--out", str(out)],
        cwd=ROOT, env={**os.environ, "CARGO_TARGET_DIR": target},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = out.glob("*.whl")
    assert wheel.name.startswith("agentgym_rs-") and "-cp310-abi3-" in wheel.name, wheel.name
    assert "manylinux_2_17_x86_64" in wheel.name or "manylinux2014_x86_64" in wheel.name

    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert 'is consistent with the following platform tag: "manylinux_2_17_x86_64"' in (
        " ".join(shown.stdout.split())
    ), shown.stdout

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    no_rust = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep)
        if not (Path(p) / "cargo").exists() and not (Path(p) / "rustc").exists()
    )  # fmt: skip
    clean = {**os.environ, "PATH": f"{env_dir / 'bin'}{os.pathsep}{no_rust}"}
    clean.pop("CARGO_TARGET_DIR", None)
    assert shutil.which("cargo", path=clean["PATH"]) is None
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        env=clean, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    run = subprocess.run(
        [str(python), "-c", EXAMPLE], env=clean, cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "ok textcraft"

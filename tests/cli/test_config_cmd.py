"""``agentgym config show`` prints a config with every default filled in, loadable as it is;
``agentgym config reference`` prints (or writes) the generated config reference."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from agentgym.config import load_config
from agentgym.configdoc import reference_markdown

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def agentgym(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentgym.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_show_fills_in_every_default_and_loads_back(tmp_path):
    config = CONFIGS / "search-quickstart.yaml"
    out = agentgym("config", "show", str(config), "--set", "learner.optim.lr=3e-4")
    assert out.returncode == 0, out.stderr
    shown = yaml.safe_load(out.stdout)
    # keys the file leaves out are there with their defaults
    assert shown["learner"]["optim"]["betas"] == [0.9, 0.999]
    assert shown["dpo"]["beta"] == 0.1
    assert shown["learner"]["optim"]["lr"] == 3e-4
    assert out.stdout.startswith(f"# {config} --set learner.optim.lr=3e-4")
    saved = tmp_path / "shown.yaml"
    saved.write_text(out.stdout)
    assert load_config(saved) == load_config(config, ["learner.optim.lr=3e-4"])


def test_show_inlines_a_horizon_file(tmp_path):
    out = agentgym("config", "show", str(CONFIGS / "sciworld.yaml"))
    assert out.returncode == 0, out.stderr
    horizon = yaml.safe_load(out.stdout)["learner"]["horizon"]
    sciworld = yaml.safe_load((CONFIGS / "horizon" / "sciworld.yaml").read_text())
    assert horizon["schedule"] == sciworld["schedule"]


def test_show_refuses_an_invalid_config():
    out = agentgym("config", "show", str(CONFIGS / "quickstart.yaml"), "--set", "learner.lr=1")
    assert out.returncode == 2
    assert "learner.lr: unknown key" in out.stderr
    assert out.stdout == ""


def test_reference_prints_and_writes_the_page(tmp_path):
    out = agentgym("config", "reference")
    assert out.returncode == 0, out.stderr
    assert out.stdout == reference_markdown()
    target = tmp_path / "ref.md"
    written = agentgym("config", "reference", "--out", str(target))
    assert written.returncode == 0, written.stderr
    assert target.read_text() == reference_markdown()

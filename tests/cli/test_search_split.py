"""The Deep Search quickstart states its training / held-out split one way: the config's task
ranges, which its header, the docs and ``agentgym index generate`` agree with (the generated
world has no split of its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentgym.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "search-quickstart.yaml"


def test_the_split_is_the_configs_and_everything_says_so(tmp_path):
    tasks = load_config(CONFIG).tasks
    assert (tasks.train.start, tasks.train.stop) == (0, 320)
    assert (tasks.eval.start, tasks.eval.stop) == (320, 720)
    assert "the first 320 are for training, the other 400\n# held out" in CONFIG.read_text()
    page = " ".join((ROOT / "docs" / "envs" / "search.md").read_text().split())
    assert "trains on 0..320 and holds out 320..720" in page
    assert "80%" not in page
    generate = ["index", "generate", str(tmp_path), "--questions", "720"]
    cmd = [sys.executable, "-m", "agentgym.cli.main", *generate]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "720 questions" in out.stdout and "task ids 0..720;" in out.stdout
    assert "train task ids" not in out.stdout and "held out" not in out.stdout

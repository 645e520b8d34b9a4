"""Commands that need no model start without importing torch (a 3-5 s import on a small machine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
import agentgym.cli.main as main
main.build_parser()
import agentgym.config, agentgym.envs, agentgym.hub.runs, agentgym.learner.config
loaded = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(",".join(loaded))
"""


def test_parser_config_and_envs_do_not_import_torch():
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported at start-up: {done.stdout.strip()}"


def test_learner_names_still_import():
    pytest.importorskip("torch")
    from agentgym import learner

    assert learner.Learner.__name__ == "Learner"
    assert learner.collate.__module__ == "agentgym.learner.batch"
    assert set(learner.__all__) <= set(dir(learner))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        learner.Nope  # noqa: B018

"""What a newcomer reads first: ``--help`` in plain text (no reStructuredText markup) for every
command, and ``agentgym eval`` without a usable ``--checkpoint`` naming the paths the run has."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agentgym.cli import actor, learner, main

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def every_help() -> dict[str, str]:
    """The --help text of agentgym, each of its commands, agentgym-actor and agentgym-learner."""
    parser = main.build_parser()
    texts = {"agentgym": parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            texts.update({f"agentgym {n}": p.format_help() for n, p in action.choices.items()})
    texts["agentgym-actor"] = actor.build_parser().format_help()
    texts["agentgym-learner"] = learner.build_parser().format_help()
    return texts


def test_help_is_plain_text():
    texts = every_help()
    assert len(texts) >= 14
    for command, text in texts.items():
        assert "``" not in text and ":func:`" not in text, command
    assert "agentgym train configs/quickstart.yaml" in texts["agentgym"]
    # a command's help says what it does, not only its options
    assert "held-out tasks" in texts["agentgym eval"]
    assert "Ctrl-C" in texts["agentgym train"]


def test_eval_without_checkpoint_names_the_untrained_baseline(capsys, tmp_path):
    run_dir = tmp_path / "run"
    code = main.main(["eval", str(QUICKSTART), "--set", f"run_dir={run_dir}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--checkpoint is required" in err
    assert f"{run_dir / 'model'}  the untrained baseline" in err
    assert f"{run_dir / 'checkpoints'}  the trained policy" in err


@pytest.mark.parametrize("missing", ["runs/nope", "runs/quickstart/checkpoints/step_00000099"])
def test_eval_of_a_missing_checkpoint_says_it_does_not_exist(capsys, tmp_path, missing):
    path = tmp_path / missing
    code = main.main(["eval", str(QUICKSTART), "--checkpoint", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--checkpoint {path}: no such file or directory" in err

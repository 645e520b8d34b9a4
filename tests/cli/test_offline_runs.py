"""``agentgym sft`` and ``dpo`` keep one run per folder as ``agentgym train`` does: a second run
is refused, Ctrl-C / SIGTERM writes a checkpoint, ``--resume`` continues from it (each step
once in the metrics), ``--overwrite`` starts over; they say what they do before the first step;
and a menu-policy config is refused naming a config that works."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.cli import offline  # noqa: E402
from agentgym.cli.main import main  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CONFIG = CONFIGS / "textcraft-sft.yaml"
TINY = [
    "model.tiny.vocab_size=320",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_hidden_layers=1",
    "model.corpus_episodes=8",
    "sft.epochs=2",
    "sft.batch_size=2",
    "sft.micro_batch_size=2",
    "sft.max_tokens=900",
    "model.tiny.max_position_embeddings=1024",
    "actor.max_context_tokens=960",
]


def sets(items):
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture
def own_signals():
    """The commands install Ctrl-C / SIGTERM handlers in this process: put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def metric_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_sft_stops_at_a_checkpoint_resumes_refuses_a_second_run_and_overwrites(
    tmp_path, capsys, monkeypatch, own_signals
):
    demos = tmp_path / "demos.jsonl"
    assert main(["demos", "textcraft", "--tasks", "300:304", "--out", str(demos), "--quiet"]) == 0
    run_dir = tmp_path / "run"
    argv = ["sft", str(CONFIG), *sets([*TINY, f"run_dir={run_dir}"]), "--data", str(demos)]
    real = offline._progress

    def sigterm_after_step_2(line: str) -> None:
        real(line)
        if line.startswith("sft step 2/"):
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(offline, "_progress", sigterm_after_step_2)
    capsys.readouterr()
    assert main(argv) == 130
    out = capsys.readouterr().out.splitlines()
    # what it does before the first step, from its first line on
    assert out[0] == f"agentgym sft: starting the run in {run_dir / 'sft'}"
    assert any(line.startswith("agentgym sft: building the tiny model into") for line in out)
    assert f"agentgym sft: stopped at step 2/4; checkpoint {run_dir}" in "\n".join(out)
    assert f"  resume  agentgym sft --resume {run_dir}" in out
    sft = run_dir / "sft"
    assert (sft / "checkpoints" / "latest").read_text() == "step_00000002"
    assert metric_steps(sft / "metrics.jsonl") == [1, 2]

    monkeypatch.setattr(offline, "_progress", real)
    before = {p: p.stat().st_mtime_ns for p in sft.rglob("*")}
    with pytest.raises(SystemExit, match=r"already holds an SFT run \(sft/config.yaml, "):
        main(argv)
    assert {p: p.stat().st_mtime_ns for p in sft.rglob("*")} == before

    with open(sft / "metrics.jsonl", "a") as f:  # a step the killed run logged, not saved
        f.write(json.dumps({"step": 3, "loss": 1.0}) + "\n")
    assert main(["sft", "--resume", str(run_dir)]) == 0
    assert "resuming from the checkpoint at step 2" in capsys.readouterr().out
    assert metric_steps(sft / "metrics.jsonl") == [1, 2, 3, 4]
    with pytest.raises(SystemExit, match="is finished: .* step 4 of 4.*--set sft.epochs=4"):
        main(["sft", "--resume", str(run_dir)])
    with pytest.raises(SystemExit, match="drop CONFIG"):
        main(["sft", str(CONFIG), "--resume", str(run_dir)])

    assert main([*argv, "--overwrite", "--set", "sft.epochs=1"]) == 0
    assert "--overwrite: deleted sft/config.yaml, sft/metrics.jsonl, sft/checkpoints/" in (
        capsys.readouterr().out
    )
    assert metric_steps(sft / "metrics.jsonl") == [1, 2]


def test_dpo_with_the_menu_policy_names_a_config_that_works(tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text("")
    argv = ["dpo", str(CONFIGS / "quickstart.yaml"), "--set", f"run_dir={tmp_path}"]
    with pytest.raises(SystemExit, match="Thought: ... Action: .*babyai-thought-action.yaml"):
        main([*argv, "--data", str(data)])
    assert not (tmp_path / "dpo").exists()


def test_pairs_of_menu_policy_episodes_say_dpo_cannot_use_them(tmp_path, capsys):
    episodes = tmp_path / "trajectories.jsonl"
    rows = [
        {"task_id": 1, "reward": 1.0, "success": True, "num_turns": 2, "loss_mask": [0, 1, 0, 1]},
        {"task_id": 1, "reward": 0.0, "success": False, "num_turns": 2, "loss_mask": [0, 1, 0, 1]},
    ]
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["pairs", str(episodes), "--out", str(tmp_path / "pairs.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "every reply of these episodes is one token" in out
    assert "configs/babyai-thought-action.yaml" in out
    rows[0]["loss_mask"] = [0, 1, 1, 0, 1, 1]  # replies of two tokens: no note
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["pairs", str(episodes), "--out", str(tmp_path / "pairs.jsonl")]) == 0
    assert "one token" not in capsys.readouterr().out

"""``agentgym train`` end to end (tiny), resume from the run dir, and ``agentgym eval``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_run

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.cli.eval import evaluate, format_table  # noqa: E402
from agentgym.cli.main import main  # noqa: E402

# Groups of 4: the tiny run's groups of 2 can all succeed or all fail in both steps, and groups
# with one reward carry no advantage, so no parameter would move.
TINY = [*tiny_run.TINY, "actor.group_size=4", "tasks.eval.limit=4", "eval.samples=2"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("train") / "run"
    code = main(
        [
            "train",
            str(tiny_run.QUICKSTART),
            *tiny_run.sets(TINY + [f"run_dir={run_dir}"]),
            "--quiet",
        ]
    )
    assert code == 0, (run_dir / "logs" / "learner.log").read_text()[-3000:]
    return run_dir


@pytest.mark.slow
def test_train_moves_versions_and_cap_and_changes_parameters(trained):
    metrics = _lines(trained / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert [m["horizon_cap_trained"] for m in metrics] == [2, 3]
    assert all(any(k.startswith("success/babyai/level_") for k in m) for m in metrics)
    assert (trained / "checkpoints" / "latest").read_text().strip() == "step_00000002"
    from agentgym.actor.policy import tokenizer_id

    state = json.loads((trained / "checkpoints" / "step_00000002" / "state.json").read_text())
    assert state["tokenizer"] == tokenizer_id(trained / "model") != ""
    from safetensors.torch import load_file

    before = load_file(str(trained / "model" / "model.safetensors"))
    after = load_file(str(trained / "checkpoints" / "step_00000002" / "model.safetensors"))
    common = [k for k in after if k.removeprefix("lm.") in before]
    assert len(common) >= len(before) - 1  # tied embeddings are stored once
    changed = [k for k in common if not torch.equal(before[k.removeprefix("lm.")], after[k])]
    assert changed, "training did not change any parameter"
    assert (trained / "config.yaml").exists()
    samples = _lines(trained / "trajectories.jsonl")
    assert samples and {"text", "reward", "success", "versions"} <= set(samples[0])
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["actors"]["groups_pushed"] >= 4


@pytest.mark.slow
def test_resume_continues_from_the_newest_checkpoint(trained):
    code = main(["train", "--resume", str(trained), "--set", "learner.max_steps=3", "--quiet"])
    assert code == 0
    metrics = _lines(trained / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert (trained / "checkpoints" / "latest").read_text().strip() == "step_00000003"


@pytest.mark.slow
def test_eval_reports_avg_and_pass_at_k_per_level(trained):
    from agentgym.config import load_config

    config = load_config(trained / "config.yaml")
    result = evaluate(config, trained / "checkpoints", limit=4)
    assert result["k"] == 2 and result["num_tasks"] == 4
    assert set(result["rows"]) == {"babyai", "level 0", "level 1"}
    row = result["rows"]["babyai"]
    assert row["tasks"] == 4 and row["episodes"] == 8
    assert 0.0 <= row["avg@2"] <= row["pass@2"] <= 1.0
    assert len(result["episodes"]) == 8
    table = format_table(result)
    assert "avg@2" in table and "level 1" in table
    # seeded: the same checkpoint, tasks and eval.seed give the same episodes (the kept
    # records too, but for log-probs, which move in the last bits with the engine's batching)
    again = evaluate(config, trained / "checkpoints", limit=4)["episodes"]

    def same(e):
        return {**e, "record": {k: v for k, v in e["record"].items() if k != "logprobs"}}

    assert [same(e) for e in again] == [same(e) for e in result["episodes"]]


@pytest.mark.slow
def test_two_learner_ranks_train_resume_in_one_process_export_and_eval(tmp_path):
    """learner.ranks=2 (torchrun, FSDP2): sharded checkpoints; resumed by a one-process
    learner; exported as a Hugging Face model that eval reads like the checkpoint."""
    run_dir = tmp_path / "run"
    sets = tiny_run.sets(TINY + [f"run_dir={run_dir}", "learner.ranks=2"])
    code = main(["train", str(tiny_run.QUICKSTART), *sets, "--quiet"])
    assert code == 0, (run_dir / "logs" / "learner.log").read_text()[-3000:]
    assert (run_dir / "checkpoints" / "step_00000002" / "dcp" / ".metadata").exists()
    sets = ["--set", "learner.ranks=1", "--set", "learner.max_steps=3"]
    assert main(["train", "--resume", str(run_dir), *sets, "--quiet"]) == 0
    assert [m["step"] for m in _lines(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert (run_dir / "checkpoints" / "step_00000003" / "model.safetensors").exists()
    from agentgym.cli.export import export
    from agentgym.config import load_config

    config = load_config(run_dir / "config.yaml", [])
    info = export(config, run_dir / "checkpoints", tmp_path / "hf")
    assert info["version"] == 3
    assert (tmp_path / "hf" / "model.safetensors").exists()
    assert (tmp_path / "hf" / "tokenizer.json").exists()
    from_ckpt = evaluate(config, run_dir / "checkpoints", limit=2)
    from_export = evaluate(config, tmp_path / "hf", limit=2)
    assert from_export["rows"] == from_ckpt["rows"]


def test_avg_at_k_counts_episodes_and_pass_at_k_counts_tasks_solved_at_least_once():
    """Three tasks of k = 4 samples: one solved 4 times, one once, one never. Avg@4 = 5 / 12
    (episodes), Pass@4 = 2 / 3 (tasks solved by any sample; all four: 1 / 3). An episode whose
    env failed counts as a failure; the score is the mean episode reward."""
    from agentgym.cli.eval import summarize

    wins = {0: [1, 1, 1, 1], 1: [0, 0, 1, 0], 2: [0, 0, 0, 0]}
    episodes = [
        {"task_id": t, "level": f"level {t % 2}", "success": bool(s), "score": 0.5 * s}
        for t, ss in wins.items()
        for s in ss
    ]
    episodes[-1] = {"task_id": 2, "level": "level 0", "error": "env crashed"}
    result = summarize("babyai", episodes, 4)
    row = result["rows"]["babyai"]
    assert (row["tasks"], row["episodes"], row["errors"]) == (3, 12, 1)
    assert row["avg@4"] == pytest.approx(5 / 12) and row["pass@4"] == pytest.approx(2 / 3)
    assert row["score"] == pytest.approx(2.5 / 12)
    assert result["rows"]["level 1"]["pass@4"] == 1.0  # task 1 alone
    assert result["rows"]["level 0"]["pass@4"] == 0.5  # tasks 0 and 2


def test_eval_refuses_another_seeds_menu_model_before_any_work(tmp_path, capsys):
    """The menu model is built from the seed: evaluating seed 1's run with a seed-0 config names
    the mismatch and the command to use, with exit 2 and no traceback."""
    from agentgym.models import MENU_MANIFEST, menu_manifest

    config = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"")
    from agentgym.config import load_config

    c = load_config(config, [f"run_dir={tmp_path / 'run'}"])
    manifest = menu_manifest(c.env.name, c.model.tiny, c.model.corpus_episodes, 1)
    (model / MENU_MANIFEST).write_text(json.dumps(manifest))
    code = main(["eval", str(config), "--set", f"run_dir={tmp_path / 'run'}", "--checkpoint",
                 str(model)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "holds a different menu model" in err and "RUN_DIR/config.yaml" in err
    assert not (tmp_path / "run" / "eval").exists()

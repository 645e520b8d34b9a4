"""``agentgym eval --policy``: the baselines without a model (``agentgym.agent.baselines``) and
``--caps``, the eval matrix (a row per turn cap)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import tiny_run

from agentgym.agent.baselines import parse_policy
from agentgym.cli.eval import evaluate_baseline, parse_caps
from agentgym.cli.main import main
from agentgym.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2_BABYAI = ROOT / "configs" / "smollm2-babyai.yaml"


@pytest.fixture(autouse=True)
def smollm2_stand_in(tmp_path_factory, monkeypatch):
    """The SmolLM2 recipes read the fetched model's config.json at load (its context length);
    a policy without a model needs nothing else of it, so a stand-in directory will do."""
    root = tmp_path_factory.mktemp("cwd")
    model = root / "runs/models/smollm2-135m-instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        json.dumps({"model_type": "llama", "max_position_embeddings": 8192})
    )
    monkeypatch.chdir(root)


def success(config, spec: str, cap: int | None) -> float:
    config = replace(config, eval=replace(config.eval, horizon_cap=cap))
    result = evaluate_baseline(config, parse_policy(spec), limit=None)
    return result["rows"][result["env"]]["avg@1"]


@pytest.mark.parametrize(
    "spec, by_cap",
    [
        # the SmolLM2 BabyAI recipe's 40 eval tasks (levels 0-1): one string solves 17 of them
        # wherever the cap is; the two-rule script solves them all by turn 4
        ("constant:go to red ball 1", {1: 0.425, 2: 0.425, 4: 0.425, 6: 0.425}),
        ("scripted", {1: 0.425, 2: 0.650, 4: 1.000, 6: 1.000}),
        ("scripted:goal-object", {2: 0.650}),
        ("copy-example", {2: 0.0, 6: 0.0}),  # the example's purple box is on none of them
        ("bot", {1: 0.425, 2: 0.850, 4: 0.850, 6: 1.000}),
    ],
)
def test_each_baseline_on_fixed_tasks_gives_fixed_results(spec, by_cap):
    config = load_config(SMOLLM2_BABYAI)
    for cap, want in by_cap.items():
        assert success(config, spec, cap) == pytest.approx(want), (spec, cap)


def test_textcraft_first_recipe_solves_depth_one_and_not_depth_two():
    config = load_config(ROOT / "configs" / "textcraft-hf.yaml", ["tasks.eval.limit=20"])
    assert success(config, "scripted", 8) == 0.0  # depth 2: nested recipes
    config = load_config(
        ROOT / "configs" / "textcraft-hf.yaml",
        ["tasks.train.start=200", "tasks.eval.start=0", "tasks.eval.stop=20",
         "tasks.eval.limit=null"],
    )  # fmt: skip
    assert success(config, "scripted", 4) >= 0.9
    assert success(config, "bot", 4) >= success(config, "scripted", 4)


@pytest.mark.parametrize(
    "spec, error",
    [
        ("random", "unknown policy"),
        ("constant:", "needs its action"),
        ("bot:fast", "takes no argument"),
    ],
)
def test_bad_policy_specs_are_refused(spec, error):
    with pytest.raises(ValueError, match=error):
        parse_policy(spec)


def test_a_rule_the_family_lacks_is_refused_with_its_rules(tmp_path, capsys):
    code = main(["eval", str(SMOLLM2_BABYAI), "--set", f"run_dir={tmp_path}", "--policy",
                 "scripted:first-recipe", "--limit", "2"])  # fmt: skip
    assert code == 2
    assert "has no scripted baseline 'first-recipe' (it has goal-object)" in capsys.readouterr().err


def test_bad_caps_are_refused():
    assert parse_caps("2, 4,none") == [2, 4, None]
    for bad in ("0", "two", ""):
        with pytest.raises(ValueError):
            parse_caps(bad)


def test_the_matrix_of_a_policy_writes_a_result_per_cap(tmp_path, capsys):
    out = tmp_path / "matrix.json"
    code = main(["eval", str(SMOLLM2_BABYAI), "--set", f"run_dir={tmp_path / 'run'}",
                 "--policy", "scripted", "--caps", "1,2,4", "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "<=2" in printed
    results = json.loads(out.read_text())
    assert [r["horizon_cap"] for r in results] == [1, 2, 4]
    assert [r["policy"] for r in results] == ["scripted"] * 3
    names = sorted(p.name for p in (tmp_path / "run" / "eval").glob("policy_*.json"))
    assert names == ["policy_scripted_cap1.json", "policy_scripted_cap2.json",
                     "policy_scripted_cap4.json"]  # fmt: skip


def test_the_matrix_runs_on_a_tiny_model(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym.actor.policy import prepare_model

    run_dir = tmp_path / "run"
    sets = tiny_run.sets([*tiny_run.TINY, f"run_dir={run_dir}", "eval.samples=2"])
    config = load_config(tiny_run.QUICKSTART, [s for s in sets if s != "--set"])
    prepare_model(config)
    code = main(["eval", str(tiny_run.QUICKSTART), *sets, "--checkpoint", str(run_dir / "model"),
                 "--caps", "1,3", "--limit", "2"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("cap"))
    assert [line.split()[0] for line in lines[head + 2 : head + 4]] == ["1", "3"]


def test_the_matrix_of_a_multi_env_run_reads_its_macro_row(tmp_path, capsys):
    code = main(["eval", str(ROOT / "configs" / "multi.yaml"), "--set", f"run_dir={tmp_path}",
                 "--policy", "scripted", "--caps", "2,4", "--limit", "3"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("cap "))
    assert [line.split()[0] for line in lines[head + 2 : head + 4]] == ["2", "4"]
    assert (tmp_path / "eval" / "policy_scripted_capbabyai2-textcraft2.json").exists()

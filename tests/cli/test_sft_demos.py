"""``agentgym demos`` and ``agentgym sft`` as a user runs them, and their bad-input messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.cli.main import main  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "textcraft-sft.yaml"
TINY = [
    "model.tiny.vocab_size=320",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_hidden_layers=1",
    "model.corpus_episodes=8",
    "sft.epochs=1",
    "sft.batch_size=4",
    "sft.micro_batch_size=2",
    "tasks.eval.limit=2",
    "eval.samples=1",
    "engine.max_new_tokens=8",
]


def _sets(items):
    return [arg for item in items for arg in ("--set", item)]


def test_demos_then_sft_then_eval(tmp_path, capsys):
    demos = tmp_path / "demos.jsonl"
    assert main(["demos", "textcraft", "--tasks", "300:308", "--out", str(demos), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "depth 2" in out and "100.0%" in out
    records = [json.loads(line) for line in demos.read_text().splitlines()]
    assert len(records) == 8 and all(r["success"] for r in records)
    run_dir = tmp_path / "run"
    argv = ["sft", str(CONFIG), *_sets([*TINY, f"run_dir={run_dir}"]), "--data", str(demos)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "data: 8 kept" in out and "sft step 2/2" in out
    latest = run_dir / "sft" / "checkpoints" / "latest"
    assert latest.read_text().strip() == "step_00000002"
    from agentgym.cli.eval import evaluate
    from agentgym.config import load_config

    config = load_config(CONFIG, [*TINY, f"run_dir={run_dir}"])
    result = evaluate(config, run_dir / "sft" / "checkpoints")
    assert result["num_tasks"] == 2 and result["rows"]["textcraft"]["episodes"] == 2
    # model.init_from (agentgym train --init-from) starts the learner and actors from SFT
    from safetensors.torch import load_file

    from agentgym.actor.policy import load_policy

    sft_dir = run_dir / "sft" / "checkpoints"
    init = load_config(CONFIG, [*TINY, f"run_dir={run_dir}", f"model.init_from={sft_dir}"])
    model, _ = load_policy(init)
    saved = load_file(str(sft_dir / "step_00000002" / "model.safetensors"))
    untrained, _ = load_policy(config)
    for name, tensor in model.state_dict().items():
        if name in saved:
            assert torch.equal(tensor, saved[name]), name
    assert any(not torch.equal(t, untrained.state_dict()[n]) for n, t in model.state_dict().items())
    # A run whose tiny model has another tokenizer (built from another seed's env text) refuses
    # these weights, for training and for eval, rather than reading their ids as its own.
    from agentgym.actor.policy import load_trained_policy, prepare_model, tokenizer_id

    other = [*TINY, f"run_dir={tmp_path / 'other'}", "actor.seed=1"]
    prepare_model(load_config(CONFIG, other))
    assert tokenizer_id(tmp_path / "other" / "model") != tokenizer_id(run_dir / "model") != ""
    with pytest.raises(ValueError, match="trained with another tokenizer"):
        load_policy(load_config(CONFIG, [*other, f"model.init_from={sft_dir}"]))
    with pytest.raises(ValueError, match="trained with another tokenizer"):
        load_trained_policy(load_config(CONFIG, other), sft_dir)


def test_sft_bad_input_is_refused_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="no such data file: .*missing.jsonl"):
        main(["sft", str(CONFIG), "--set", f"run_dir={tmp_path}", "--data", "missing.jsonl"])
    with pytest.raises(SystemExit, match="no data"):
        main(["sft", str(CONFIG), "--set", f"run_dir={tmp_path}", "--set", "sft.data=[]"])
    assert main(["sft", str(CONFIG), "--set", f"run_dir={tmp_path}", "--set", "sft.epochs=0"]) == 2
    assert not any(tmp_path.iterdir())


def test_train_refuses_init_from_with_resume(tmp_path):
    with pytest.raises(SystemExit, match="drop --init-from"):
        main(["train", "--resume", str(tmp_path), "--init-from", str(tmp_path)])


def test_demos_bad_task_range(tmp_path):
    with pytest.raises(SystemExit, match="expected START:STOP"):
        main(["demos", "textcraft", "--tasks", "7", "--out", str(tmp_path / "d.jsonl")])
    with pytest.raises(SystemExit, match="task ids 0..543"):
        main(["demos", "textcraft", "--tasks", "500:600", "--out", str(tmp_path / "d.jsonl")])
    with pytest.raises(SystemExit, match="stride >= 1"):
        main(["demos", "textcraft", "--tasks", "0:10:0", "--out", str(tmp_path / "d.jsonl")])


def test_demos_take_a_stride_of_task_ids(tmp_path, capsys):
    """0:10:2 demonstrates the even ids only: a recipe's training split when eval takes odd."""
    demos = tmp_path / "even.jsonl"
    assert main(["demos", "textcraft", "--tasks", "0:10:2", "--out", str(demos), "--quiet"]) == 0
    ids = [json.loads(line)["task_id"] for line in demos.read_text().splitlines()]
    assert ids == [0, 2, 4, 6, 8]


def test_pairs_then_dpo(tmp_path, capsys):
    demos = tmp_path / "demos.jsonl"
    assert main(["demos", "textcraft", "--tasks", "300:304", "--out", str(demos), "--quiet"]) == 0
    # rollouts that failed the same tasks: the demo's first reply, then a wrong craft
    failed = tmp_path / "failed.jsonl"
    with open(failed, "w") as f:
        for line in demos.read_text().splitlines():
            record = json.loads(line)
            messages = record["messages"][:3] + [
                {"role": "user", "content": "Could not find enough items."},
                {"role": "assistant", "content": "Thought: guess.\nAction: craft 1 stick"},
            ]
            f.write(json.dumps({**record, "reward": 0.0, "success": False, "messages": messages}))
            f.write("\n")
    pairs = tmp_path / "pairs.jsonl"
    assert main(["pairs", str(demos), str(failed), "--out", str(pairs)]) == 0
    assert "4 pairs over 4 tasks" in capsys.readouterr().out
    run_dir = tmp_path / "run"
    sets = _sets([*TINY, f"run_dir={run_dir}", "dpo.batch_size=2", "dpo.micro_batch_size=1"])
    assert main(["dpo", str(CONFIG), *sets, "--data", str(pairs)]) == 0
    out = capsys.readouterr().out
    assert "pairs: 4 kept" in out and "dpo step 2/2" in out
    assert (run_dir / "dpo" / "checkpoints" / "latest").read_text().strip() == "step_00000002"
    with pytest.raises(SystemExit, match="no such file"):
        main(["pairs", str(tmp_path / "nope.jsonl"), "--out", str(pairs)])


def test_pairs_pair_episodes_of_one_env_only(tmp_path, capsys):
    """Task ids are per env: task 3 of BabyAI and task 3 of TextCraft are different tasks."""
    records = tmp_path / "episodes.jsonl"

    def episode(env, reward):
        return {"env": env, "task_id": 3, "reward": reward, "success": reward > 0, "messages": []}

    rows = [episode("babyai", 1.0), episode("textcraft", 0.0), episode("textcraft", 0.5)]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = tmp_path / "pairs.jsonl"
    assert main(["pairs", str(records), "--out", str(pairs)]) == 0
    assert "1 pairs over 2 tasks" in capsys.readouterr().out
    (pair,) = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert (pair["chosen"]["env"], pair["chosen"]["reward"]) == ("textcraft", 0.5)
    assert (pair["rejected"]["env"], pair["rejected"]["reward"]) == ("textcraft", 0.0)


@pytest.mark.slow
def test_babyai_demos_then_sft_beat_the_untrained_policy(tmp_path):
    """The real format learns from demos: after SFT on the config's demos (levels 0-4, goal
    restated in each thought) the policy writes valid actions and reaches held-out goals that
    the untrained policy never does."""
    from agentgym.cli.eval import evaluate
    from agentgym.config import load_config

    config_path = CONFIG.parent / "babyai-thought-action.yaml"
    demos = tmp_path / "demos.jsonl"
    assert main(["demos", "babyai", "--tasks", "0:3200", "--levels", "0,1,2,3,4",
                 "--goal-in-thought", "--out", str(demos), "--quiet"]) == 0  # fmt: skip
    # the config's 16 epochs: after 4 the longer goal-restating replies were still 76% invalid
    sets = [f"run_dir={tmp_path / 'run'}", "tasks.eval.limit=10", "tasks.eval.levels=[0, 1]"]
    assert main(["sft", str(config_path), *_sets(sets), "--data", str(demos)]) == 0
    config = load_config(config_path, sets)
    untrained = evaluate(config, tmp_path / "run" / "model")["rows"]["babyai"]
    trained = evaluate(config, tmp_path / "run" / "sft" / "checkpoints")["rows"]["babyai"]
    assert untrained["avg@2"] == 0.0 and untrained["invalid"] > 0.9
    assert trained["invalid"] < 0.6 and trained["avg@2"] >= 0.15, trained

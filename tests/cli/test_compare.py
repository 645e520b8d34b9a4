"""``agentgym compare``: two eval results paired by task, with the paired standard error."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from agentgym.cli.compare import CompareError, compare, load_result
from agentgym.cli.main import main


def _result(successes: dict[int, list[bool]], env: str = "babyai", **settings) -> dict:
    episodes = [
        {"task_id": t, "level": f"level {t % 2}", "success": s, "score": float(s)}
        for t, runs in successes.items()
        for s in runs
    ]
    return {
        "env": env,
        "k": 2,
        "horizon_cap": 8,
        "temperature": 0.3,
        **settings,
        "episodes": episodes,
    }


def test_the_difference_is_paired_by_task_with_its_standard_error():
    base = _result({0: [False, False], 1: [True, False], 2: [True, True], 3: [False, False]})
    new = _result({0: [True, False], 1: [True, True], 2: [True, True], 3: [False, False]})
    rows = compare(base, new)["rows"]
    # per-task differences 0.5, 0.5, 0, 0: mean 0.25, sample sd sqrt(1/12), SE sd / 2
    assert rows["babyai"]["base"] == pytest.approx(0.375)
    assert rows["babyai"]["new"] == pytest.approx(0.625)
    assert rows["babyai"]["diff"] == pytest.approx(0.25)
    assert rows["babyai"]["se"] == pytest.approx(math.sqrt(1 / 12) / 2)
    # level rows: tasks 0 and 2 (level 0), 1 and 3 (level 1)
    assert rows["level 0"]["tasks"] == 2 and rows["level 0"]["diff"] == pytest.approx(0.25)
    assert rows["level 1"]["diff"] == pytest.approx(0.25)


def test_only_common_tasks_are_compared_and_other_settings_are_named():
    base = _result({0: [True, True], 1: [False, False], 2: [True, False]})
    new = _result({1: [True, True], 2: [True, False], 5: [True, True]}, horizon_cap=16)
    result = compare(base, new)
    assert result["rows"]["babyai"]["tasks"] == 2
    assert result["rows"]["babyai"]["diff"] == pytest.approx(0.5)
    assert any("2 tasks in both; 1 only in BASE, 1 only in NEW" in n for n in result["notes"])
    assert any("turn cap differs: BASE 8, NEW 16" in n for n in result["notes"])
    with pytest.raises(CompareError, match="no task in common"):
        compare(base, _result({7: [True, True]}))


def test_several_envs_get_env_level_rows_and_a_macro_row():
    def multi(a: dict, b: dict) -> dict:
        one, two = _result(a), _result(b, env="textcraft")
        episodes = [{**e, "env": "babyai"} for e in one["episodes"]]
        episodes += [{**e, "env": "textcraft"} for e in two["episodes"]]
        return {
            **one,
            "env": "babyai+textcraft",
            "envs": ["babyai", "textcraft"],
            "episodes": episodes,
        }

    base = multi({0: [False], 1: [False]}, {0: [False], 1: [True]})
    new = multi({0: [True], 1: [True]}, {0: [False], 1: [True]})
    rows = compare(base, new)["rows"]
    assert rows["babyai"]["diff"] == 1.0 and rows["textcraft"]["diff"] == 0.0
    assert "babyai: level 0" in rows and "textcraft: level 1" in rows
    assert rows["macro"]["diff"] == pytest.approx(0.5) and rows["macro"]["tasks"] == 4


def test_cli_prints_the_table_writes_json_and_refuses_bad_files(tmp_path, capsys):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "cmp.json"
    a.write_text(json.dumps(_result({0: [False, False], 1: [True, False]})))
    b.write_text(json.dumps(_result({0: [True, True], 1: [True, False]})))
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "new-base" in printed and "+0.500" in printed
    assert json.loads(out.read_text())["rows"]["babyai"]["diff"] == 0.5

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["compare", str(bad), str(b)]) == 2
    assert "bad.json: not JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({"rows": {}}))
    assert main(["compare", str(bad), str(b)]) == 2
    assert "not an agentgym eval result" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing.json"), str(b)]) == 2
    with pytest.raises(CompareError):
        load_result(tmp_path / "missing.json")


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(tmp_path):
    """``agentgym compare A B | head -1``: the command stops quietly with 141, as shell tools do."""
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_result({t: [True, False] for t in range(200)})))
    code = "import sys; from agentgym.cli.main import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "compare", str(a), str(a)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # before the interpreter has even imported agentgym
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141
    assert b"Traceback" not in err and b"Exception ignored" not in err


def test_score_and_invalid_replies_are_paired_too_where_they_moved(capsys, tmp_path):
    """Success may not move while the replies do: the score and the invalid-reply share are
    paired per task as success is, and shown beside it ('-' where a result lacks them)."""

    def result(invalid: int, score: float) -> dict:
        episodes = [
            {"task_id": t, "level": "level 8", "success": False, "score": score + t / 10,
             "turns": 8, "invalid_replies": invalid + t % 2}
            for t in range(4) for _ in range(2)
        ]  # fmt: skip
        return {"env": "babyai", "k": 2, "horizon_cap": 8, "temperature": 0.3,
                "episodes": episodes}  # fmt: skip

    base, new = result(invalid=4, score=0.0), result(invalid=1, score=0.25)
    row = compare(base, new)["rows"]["babyai"]
    assert row["diff"] == 0.0  # success did not move
    assert row["score"]["diff"] == pytest.approx(0.25) and row["score"]["se"] < 1e-12
    assert row["invalid"]["base"] == pytest.approx((4 * 2 + 5 * 2) / 16 / 2)
    assert row["invalid"]["diff"] == pytest.approx(-3 / 8)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(new))
    assert main(["compare", str(a), str(b)]) == 0
    table = [x for x in capsys.readouterr().out.splitlines() if not x.startswith("note: ")]
    assert table[0].split()[-4:] == ["score", "(SE)", "invalid", "(SE)"]
    assert table[2].split()[-4:] == ["+0.250", "(0.000)", "-0.375", "(0.000)"]
    for e in base["episodes"]:
        del e["invalid_replies"]  # a result that does not record them
    assert compare(base, new)["rows"]["babyai"]["invalid"] is None


SETTINGS = {
    "eval_seed": 0, "tasks": [{"start": 200000, "stop": 216000}], "limit": None, "samples": 2,
    "temperature": 0.3, "top_k": 0, "top_p": 1.0, "max_new_tokens": 48, "groups_in_flight": 4,
    "max_batch_size": 32, "bf16": True, "model": "m", "tokenizer": "t", "weights": "a",
}  # fmt: skip


def test_every_recorded_setting_that_decides_episodes_is_named_when_it_differs():
    base = _result({0: [True, False]}, settings=SETTINGS)
    other = {**SETTINGS, "eval_seed": 7, "top_p": 0.9, "groups_in_flight": 1, "weights": "b",
             "tasks": [{"start": 0, "stop": 10}], "model": "n"}  # fmt: skip
    notes = compare(base, _result({0: [True, True]}, settings=other))["notes"]
    for what in ("eval.seed", "top_p", "eval.groups_in_flight", "eval tasks", "base model"):
        assert any(n.startswith(f"{what} differs") for n in notes), (what, notes)
    assert not any("weights" in n for n in notes)  # two checkpoints differ there by design
    same = compare(base, _result({0: [True, True]}, settings=SETTINGS))["notes"]
    assert same == []
    assert any(
        "records no eval settings" in n for n in compare(base, _result({0: [True]}))["notes"]
    )


def test_a_result_of_other_settings_never_replaces_an_earlier_file(tmp_path):
    """An eval of one checkpoint with another seed, or another --limit, gets a file of its own;
    the same settings again replace their own file."""
    from agentgym.cli.eval import result_path

    path = tmp_path / "step_36.json"
    first = {**_result({0: [True]}), "settings": SETTINGS}
    path.write_text(json.dumps(first))
    seeded = {**_result({0: [True]}), "settings": {**SETTINGS, "eval_seed": 7}}
    second = result_path(path, seeded)
    assert second.name == "step_36-2.json"
    second.write_text(json.dumps(seeded))
    limited = {**_result({0: [True]}), "settings": {**SETTINGS, "limit": 10}}
    third = result_path(path, limited)
    assert third.name == "step_36-3.json"
    assert result_path(path, first) == path and result_path(path, seeded) == second


def test_an_eval_names_its_base_model_by_its_real_path_whatever_the_cwd(tmp_path, monkeypatch):
    from agentgym.cli.eval import eval_settings
    from agentgym.config import load_config

    (tmp_path / "main" / "models" / "m").mkdir(parents=True)
    (tmp_path / "main" / "models" / "m" / "config.json").write_text("{}")
    (tmp_path / "worktree").mkdir()
    (tmp_path / "worktree" / "models").symlink_to(tmp_path / "main" / "models")
    names = []
    for cwd, path in ((tmp_path / "worktree", "models/m"), (tmp_path, "main/models/m")):
        monkeypatch.chdir(cwd)
        config = load_config(None, [f"run_dir={tmp_path / 'run'}", f"model.path={path}"])
        names.append(eval_settings(config, tmp_path / "ckpt", None)["model"])
    assert names == [str((tmp_path / "main" / "models" / "m").resolve())] * 2

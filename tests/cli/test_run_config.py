"""The run config: YAML over defaults, strict keys, --set overrides."""

from pathlib import Path

import pytest

# agentgym.learner's package __init__ imports torch, and the config schema lives below it
pytest.importorskip("torch")

from agentgym.actor.config import ActorConfig
from agentgym.config import (
    RunConfig,
    TaskRange,
    TasksConfig,
    absolute_paths,
    dump_config,
    load_config,
    parse_override,
)
from agentgym.configtools import ConfigError

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def test_quickstart_loads_and_round_trips(tmp_path):
    config = load_config(QUICKSTART)
    assert config.model.menu_policy and config.learner.horizon.schedule == "stepwise"
    train, held_out = set(config.tasks.train.ids()), set(config.tasks.eval.ids())
    assert train and held_out and not train & held_out
    assert {t % 40 for t in held_out} <= set(config.tasks.eval.levels)
    dump_config(config, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == config


def test_unknown_key_names_key_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("learner:\n  optim:\n    learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"learner\.optim\.learning_rate: unknown key.*bad\.yaml"):
        load_config(path)


def test_set_overrides_nested_fields_with_yaml_values():
    config = load_config(
        QUICKSTART, ["learner.optim.lr=1e-4", "actor.group_size=4", "learner.horizon.rounds=[2, 4]"]
    )
    assert config.learner.optim.lr == pytest.approx(1e-4)
    assert config.actor.group_size == 4
    assert config.learner.horizon.rounds == (2, 4)
    assert parse_override("a.b=x") == {"a": {"b": "x"}}
    with pytest.raises(ConfigError, match="learner.nope"):
        load_config(QUICKSTART, ["learner.nope=1"])
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("novalue")


def test_inconsistent_settings_are_rejected():
    with pytest.raises(ConfigError, match="menu_policy"):
        load_config(QUICKSTART, ["engine.max_new_tokens=8"])
    with pytest.raises(ValueError, match="overlap"):
        TasksConfig(train=TaskRange(0, 100), eval=TaskRange(50, 150))
    with pytest.raises(ValueError, match="num_actors"):
        RunConfig(actor=ActorConfig(num_actors=9))


def test_webnav_templates_select_ids_of_webnav_only():
    assert TaskRange(0, 184, templates=(6, 30)).ids() == (6, 30, 52, 76, 98, 122, 144, 168)
    with pytest.raises(ValueError, match=r"templates: must be webnav templates in \[0, 46\)"):
        TaskRange(0, 90, templates=(46,))
    with pytest.raises(ValueError, match="templates: and levels select ids of different envs"):
        TaskRange(0, 90, levels=(0,), templates=(6,))
    webnav = ["env.name=webnav", "tasks.train={start: 0, stop: 920, templates: [6, 7]}",
              "tasks.eval={start: 920, stop: 1840, templates: [6, 7], limit: 4}"]  # fmt: skip
    config = load_config(None, webnav)
    assert config.tasks.eval.ids() == (926, 927, 972, 973)
    with pytest.raises(ConfigError, match=r"tasks\.eval\.templates: keeps webnav templates"):
        load_config(None, [*webnav, "env.name=textcraft"])
    with pytest.raises(ConfigError, match=r"envs\[0\]\.tasks\.train\.templates: .*webnav only"):
        load_config(None, ["envs=[{env: {name: babyai}, tasks: {train: {templates: [6]}}}]"])


def test_babyai_levels_select_ids_of_babyai_only():
    """The registry owns the filters: BabyAI's levels on a TextCraft run would keep goals by
    id % 40, which means nothing there, so the config is refused; an env the registry does not
    know (a remote one) keeps its filters."""
    assert TaskRange(0, 120, levels=(1, 39)).ids() == (1, 39, 41, 79, 81, 119)
    with pytest.raises(ValueError, match=r"levels: must be BabyAI levels in \[0, 40\)"):
        TaskRange(0, 90, levels=(40,))
    with pytest.raises(ConfigError, match=r"tasks\.train\.levels: keeps BabyAI levels "
                       r"\(task_id % 40\): babyai only"):  # fmt: skip
        load_config(None, ["env.name=textcraft", "tasks.train={start: 0, stop: 100, levels: [1]}",
                           "tasks.eval={start: 100, stop: 200}"])  # fmt: skip
    remote = load_config(None, ["env.name=other", "env.remote=[http://127.0.0.1:9]",
                                "model.path=org/name",
                                "tasks.train={start: 0, stop: 100, levels: [1]}",
                                "tasks.eval={start: 100, stop: 200}"])  # fmt: skip
    assert remote.tasks.train.ids() == (1, 41, 81)


def test_absolute_paths_name_the_real_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "goals.txt").write_text("")
    config = load_config(
        None,
        ["run_dir=runs/x", "model.init_from=ckpt", "env.options.goal_order=goals.txt",
         "env.options.note=not-a-file", "model.path=Qwen/Qwen2.5-0.5B-Instruct"],
    )  # fmt: skip
    real = absolute_paths(config)
    assert real.run_dir == str(tmp_path / "runs" / "x")
    assert real.model.init_from == str(tmp_path / "ckpt")
    assert real.env.options == {"goal_order": str(tmp_path / "goals.txt"), "note": "not-a-file"}
    assert real.model.path == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id stays as it is


def test_stride_spreads_a_limited_range():
    assert TaskRange(0, 544, stride=14, limit=3).ids() == (0, 14, 28)
    assert TaskRange(0, 200, levels=(0, 1), stride=2).ids()[:3] == (0, 40, 80)
    with pytest.raises(ValueError, match="stride: must be >= 1"):
        TaskRange(0, 10, stride=0)


def test_ranges_that_meet_are_held_out_when_they_share_no_id():
    """TextCraft's depth-1 split (configs/smollm2-textcraft.yaml): even ids train, odd ids
    evaluate; the same ranges with a common id are refused."""
    tasks = TasksConfig(train=TaskRange(0, 125, stride=2), eval=TaskRange(1, 125, stride=2))
    assert set(tasks.train.ids()).isdisjoint(tasks.eval.ids())
    assert len(tasks.train.ids()) == 63 and len(tasks.eval.ids()) == 62
    with pytest.raises(ValueError, match="overlaps tasks.train"):
        TasksConfig(train=TaskRange(0, 125, stride=2), eval=TaskRange(0, 125, stride=3))


def test_dr_grpo_divides_a_token_sum_by_a_constant_fixed_in_the_saved_config(tmp_path):
    """dr_grpo's default aggregation is the token sum over a constant: the most tokens a
    minibatch can generate (max_new_tokens x the largest cap x episodes per minibatch), which
    the saved config then holds, so a resumed run keeps it."""
    sets = ["learner.advantage.estimator=dr_grpo", "engine.max_new_tokens=48",
            "learner.horizon={schedule: stepwise, rounds: [2, 6, 4], every: 5}",
            "learner.groups_per_step=2", "actor.group_size=8", "learner.minibatches=2"]  # fmt: skip
    config = load_config(None, sets)
    assert config.learner.aggregation == "seq-mean-token-sum-norm"
    assert config.learner.loss.norm_tokens == 48 * 6 * 8
    dump_config(config, tmp_path / "c.yaml")
    again = load_config(tmp_path / "c.yaml", ["engine.max_new_tokens=16"])
    assert again.learner.loss.norm_tokens == 48 * 6 * 8
    grpo = load_config(None, ["learner.advantage.estimator=grpo"])
    assert grpo.learner.aggregation == "token-mean" and grpo.learner.loss.norm_tokens is None

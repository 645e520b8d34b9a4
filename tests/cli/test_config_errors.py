"""An invalid config stops a command before any work: every problem on its own line, naming the
field's dotted path and where the value came from, exit code 2, no traceback, no run dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.envs import env_names

pytest.importorskip("torch")  # the config schema lives under agentgym.learner

from agentgym.config import load_config  # noqa: E402
from agentgym.configtools import ConfigError  # noqa: E402
from agentgym.models import MANIFEST  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUICKSTART = CONFIGS / "quickstart.yaml"
THOUGHT_ACTION = CONFIGS / "babyai-thought-action.yaml"


def agentgym(*args: str, module: str = "agentgym.cli.main") -> subprocess.CompletedProcess:
    """Run a command as a user would, capturing its output."""
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_train_reports_every_problem_at_once_and_creates_nothing(tmp_path):
    run_dir = tmp_path / "run"
    bad = sets(
        f"run_dir={run_dir}",
        "learner.max_steps=-5",
        "learner.optim.lr=-0.1",
        "env.name=babyia",
        "actor.group_size=0",
        "tasks.train.stop=-1",
        "learner.nope=1",
    )
    done = agentgym("train", str(QUICKSTART), *bad)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "agentgym train: the config has 6 problems (nothing was started):"
    assert sorted(line.strip() for line in lines[1:]) == sorted([
        f"env.name: must be a native env ({', '.join(env_names())}), or set env.remote or "
        "env.serve, got 'babyia' (--set env.name=babyia)",
        "tasks.train.stop: must be > start (0), got -1 (--set tasks.train.stop=-1)",
        "actor.group_size: must be >= 1, got 0 (--set actor.group_size=0)",
        "learner.optim.lr: must be > 0, got -0.1 (--set learner.optim.lr=-0.1)",
        "learner.max_steps: must be >= 1 (or null: no limit), got -5 "
        "(--set learner.max_steps=-5)",
        "learner.nope: unknown key (known: activation_checkpointing, advantage, bf16, "
        "checkpoint_dir, checkpoint_every, device, dist_timeout_s, groups_per_step, horizon, "
        "keep_checkpoints, loss, max_rejected_steps, max_staleness, max_steps, metrics_path, "
        "micro_batch_size, micro_batch_tokens, minibatches, optim, pad_token_id, ppo_epochs, "
        "publish_weights_every, ranks, seed, shared_prefix, temperature, tensorboard_dir, "
        "train_order, wandb_mode, wandb_project, weights_dir, weights_via) "
        "(--set learner.nope=1)",
    ])  # fmt: skip
    assert not run_dir.exists()


def test_action_line_replies_need_room_for_an_action_and_a_model_path_must_exist(tmp_path):
    run_dir = tmp_path / "run"
    args = sets(f"run_dir={run_dir}", "engine.max_new_tokens=1", "model.path=/nonexistent/model",
                "model.copy_warmup_steps=0")  # fmt: skip
    done = agentgym("train", str(THOUGHT_ACTION), *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    problems = [line.strip() for line in done.stderr.strip().splitlines()[1:]]
    assert problems == [
        "model.path: no model directory there (a local Hugging Face directory with config.json, "
        "or a hub id org/name), got '/nonexistent/model' (--set model.path=/nonexistent/model)",
        "engine.max_new_tokens: must be >= 4 with actor.reply_format action_line (a reply needs "
        "room for 'Action: <action>'), got 1 (--set engine.max_new_tokens=1)",
    ]
    assert not run_dir.exists()


def test_problems_in_the_file_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("learner:\n  ppo_epochs: 0\n  optim: {eps: -1}\neval: {samples: 0}\n")
    done = agentgym("eval", str(path), "--checkpoint", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[1:] == [
        f"  learner.optim.eps: must be > 0, got -1.0 ({path})",
        f"  learner.ppo_epochs: must be >= 1, got 0 ({path})",
        f"  eval.samples: must be >= 1, got 0 ({path})",
    ]
    missing = agentgym("train", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert f"{tmp_path / 'nope.yaml'}: cannot read the config" in missing.stderr


def test_the_learner_and_actor_commands_check_the_same_way(tmp_path):
    for module in ("agentgym.cli.learner", "agentgym.cli.actor"):
        done = agentgym(str(QUICKSTART), *sets("eval.top_p=0"), module=module)
        prog = module.rsplit(".", 1)[1]
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.splitlines() == [
            f"agentgym-{prog}: the config has 1 problem (nothing was started):",
            "  eval.top_p: must be in (0, 1] (1: off), got 0.0 (--set eval.top_p=0)",
        ]


def test_model_path_takes_local_directories_and_hub_ids(tmp_path):
    no_build = "model.copy_warmup_steps=0"  # a tiny-model build setting of this config
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for good in (str(tmp_path / "model"), "Qwen/Qwen2.5-0.5B-Instruct", "gpt2"):
        assert load_config(THOUGHT_ACTION, [f"model.path={good}", no_build]).model.path == good
    for bad in ("./missing", str(tmp_path), "/abs/missing", "a/b/c"):
        with pytest.raises(ConfigError, match=r"^model\.path: no model directory there"):
            load_config(THOUGHT_ACTION, [f"model.path={bad}", no_build])


def test_tokenizer_texts_must_be_files(tmp_path):
    (tmp_path / "world.jsonl").write_text("{}\n")
    good = f"model.tokenizer_texts=[{tmp_path / 'world.jsonl'}]"
    assert load_config(THOUGHT_ACTION, [good]).model.tokenizer_texts == (
        str(tmp_path / "world.jsonl"),
    )
    with pytest.raises(ConfigError, match=r"^model\.tokenizer_texts: every path must be a file"):
        load_config(THOUGHT_ACTION, [f"model.tokenizer_texts=[{tmp_path / 'missing.jsonl'}]"])
    with pytest.raises(ConfigError, match=r"^model\.tokenizer_texts: tiny model only"):
        load_config(THOUGHT_ACTION, [good, "model.path=gpt2"])


def test_a_model_path_takes_build_settings_its_manifest_records(tmp_path):
    """A pipeline's later stage names the tiny model an earlier stage built: the config's
    build settings are accepted when the model's manifest records them, refused otherwise."""
    texts = tmp_path / "world.jsonl"
    texts.write_text("{}\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    path = f"model.path={model}"
    with pytest.raises(ConfigError, match=r"^model\.copy_warmup_steps: tiny model only; "
                       rf"model\.path {model} is no tiny-model build"):  # fmt: skip
        load_config(THOUGHT_ACTION, [path])
    manifest = {"copy_warmup": {"steps": 400}, "tokenizer_texts": [str(texts.resolve())]}
    (model / MANIFEST).write_text(json.dumps(manifest))
    assert load_config(THOUGHT_ACTION, [path]).model.copy_warmup_steps == 400
    assert load_config(THOUGHT_ACTION, [path, f"model.tokenizer_texts=[{texts}]"])
    other = model / "config.json"
    with pytest.raises(ConfigError) as raised:
        load_config(THOUGHT_ACTION, [path, "model.copy_warmup_steps=300",
                                     f"model.tokenizer_texts=[{other}]"])  # fmt: skip
    assert str(raised.value).splitlines() == [
        f"model.tokenizer_texts: model.path {model} was built with tokenizer texts "
        f"['{texts.resolve()}'], got ('{other}',) (--set model.tokenizer_texts=[{other}])",
        f"model.copy_warmup_steps: model.path {model} was built with 400 copy warm-up steps, "
        "got 300 (--set model.copy_warmup_steps=300)",
    ]
    with pytest.raises(ConfigError, match=r"^model\.copy_warmup_steps: tiny model only \(not "):
        load_config(THOUGHT_ACTION, ["model.menu_policy=true"])


def test_periodic_eval_needs_one_learner_process():
    with pytest.raises(ConfigError) as raised:
        load_config(QUICKSTART, ["eval.every=5", "learner.ranks=2"])
    assert raised.value.problems == [
        "eval.every: must be 0 with learner.ranks > 1 (periodic eval runs in one learner "
        "process), got 5 (--set eval.every=5)"
    ]


def test_the_learner_samples_temperature_follows_the_engine_unless_given():
    """One setting of the sampling temperature is enough; two that differ are refused."""
    config = load_config(None, ["engine.temperature=0.5"])
    assert config.learner.temperature == 0.5
    assert load_config(None, []).learner.temperature == 1.0
    same = load_config(None, ["engine.temperature=0.7", "learner.temperature=0.7"])
    assert same.learner.temperature == 0.7
    with pytest.raises(ConfigError, match=r"learner.temperature: must equal engine.temperature"):
        load_config(None, ["engine.temperature=0.5", "learner.temperature=1.0"])


def test_copy_warmup_is_for_the_tiny_model_only():
    config = load_config(THOUGHT_ACTION, ["model.copy_warmup_steps=400"])
    assert config.model.copy_warmup_steps == 400
    with pytest.raises(ConfigError, match=r"^model\.copy_warmup_steps: must be >= 0"):
        load_config(THOUGHT_ACTION, ["model.copy_warmup_steps=-1"])
    with pytest.raises(ConfigError, match=r"^model\.copy_warmup_steps: tiny model only"):
        load_config(THOUGHT_ACTION, ["model.copy_warmup_steps=400", "model.path=gpt2"])
    with pytest.raises(ConfigError, match=r"^model\.copy_warmup_steps: tiny model only"):
        load_config(QUICKSTART, ["model.copy_warmup_steps=400"])


def test_copy_mix_must_not_be_negative():
    assert load_config(THOUGHT_ACTION, ["sft.copy_mix=0.5"]).sft.copy_mix == 0.5
    with pytest.raises(ConfigError, match=r"^sft\.copy_mix: must be >= 0"):
        load_config(THOUGHT_ACTION, ["sft.copy_mix=-0.1"])


def test_invalid_reply_penalty_must_not_be_negative():
    penalty = load_config(THOUGHT_ACTION, ["actor.invalid_reply_penalty=0.1"]).actor
    assert penalty.invalid_reply_penalty == 0.1
    with pytest.raises(ConfigError, match=r"^actor\.invalid_reply_penalty: must be >= 0"):
        load_config(THOUGHT_ACTION, ["actor.invalid_reply_penalty=-0.1"])


def test_the_format_reward_alone_needs_a_format_term():
    sets = ["actor.invalid_reply_penalty=0.1", "actor.task_reward=0"]
    assert load_config(THOUGHT_ACTION, sets).actor.task_reward == 0.0
    with pytest.raises(ConfigError, match=r"actor\.task_reward: 0 needs actor\.invalid_reply_pen"):
        load_config(THOUGHT_ACTION, ["actor.invalid_reply_penalty=0", "actor.task_reward=0"])
    with pytest.raises(ConfigError, match=r"actor\.task_reward: must be >= 0"):
        load_config(THOUGHT_ACTION, ["actor.task_reward=-1"])


def test_a_reply_must_fit_the_models_context(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    base = [f"model.path={model}", "actor.reply_format=action_line", "engine.max_new_tokens=64"]
    load_config(None, [*base, "actor.max_context_tokens=449"])  # 448 + 64 = 512 fits
    with pytest.raises(ConfigError) as e:
        load_config(None, [*base, "actor.max_context_tokens=500"])
    [line] = [p for p in e.value.problems if p.startswith("actor.max_context_tokens")]
    assert "is 563 positions, the model has 512" in line and "at most 449" in line
    with pytest.raises(ConfigError, match="model.tiny.max_position_embeddings"):
        load_config(QUICKSTART, ["model.tiny.max_position_embeddings=1024"])


def test_a_kl_reward_is_refused_where_the_advantages_ignore_it():
    """grpo, dr_grpo and rloo score an episode by its outcome reward alone: a KL reward
    coefficient would build a reference model and change nothing."""
    for estimator in ("grpo", "dr_grpo", "rloo"):
        items = [f"learner.advantage.estimator={estimator}", "learner.advantage.kl_reward_coef=0.1"]
        with pytest.raises(ConfigError) as raised:
            load_config(QUICKSTART, items)
        (problem,) = raised.value.problems
        assert problem.startswith(
            "learner.advantage.kl_reward_coef: applies to reinforce_pp, reinforce_pp_baseline, "
            f"gae only: {estimator} advantages come from the outcome reward alone"
        )
        assert "learner.loss.kl_coef" in problem
    for estimator in ("reinforce_pp", "reinforce_pp_baseline", "gae"):
        items = [f"learner.advantage.estimator={estimator}", "learner.advantage.kl_reward_coef=0.1"]
        assert load_config(QUICKSTART, items).learner.advantage.kl_reward_coef == 0.1


def test_weights_published_more_rarely_than_actors_may_lag_are_refused(tmp_path):
    """An actor samples only with weights at most max_staleness versions old: weights
    published every max_staleness + 2 updates or more would leave it waiting for ever."""
    ok = load_config(QUICKSTART, ["learner.max_staleness=2", "learner.publish_weights_every=3"])
    assert ok.learner.publish_weights_every == 3
    with pytest.raises(ConfigError) as raised:
        load_config(QUICKSTART, ["learner.max_staleness=2", "learner.publish_weights_every=4"])
    assert raised.value.problems[0].startswith(
        "learner.publish_weights_every: must be <= max_staleness + 1 (3): actors sample only "
        "with weights at most max_staleness versions old"
    )
    with pytest.raises(ConfigError, match=r"publish_weights_every: must be 1 with deterministic"):
        load_config(QUICKSTART, ["deterministic=true", "learner.publish_weights_every=2"])
    run_dir = tmp_path / "run"
    every = sets(f"run_dir={run_dir}", "learner.publish_weights_every=2")
    for command in (["train", str(QUICKSTART), "--sync"], [str(QUICKSTART), "--sync"]):
        module = "agentgym.cli.main" if command[0] == "train" else "agentgym.cli.actor"
        done = agentgym(*command, *every, module=module)
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert "learner.publish_weights_every: must be 1 with --sync" in done.stderr
    assert not run_dir.exists()


def test_training_never_samples_from_a_truncated_distribution(tmp_path):
    """The learner's log-probs are of the whole distribution: top-k / top-p sampling would
    make every importance weight the truncated mass (about 0.95 at top_p 0.9), so training
    refuses it; evaluation may truncate (eval.top_k, eval.top_p)."""
    from agentgym.actor.policy import sampling_params
    from agentgym.config import dump_config

    for key, value in (("top_p", 0.9), ("top_k", 20)):
        with pytest.raises(ConfigError) as raised:
            load_config(QUICKSTART, [f"engine.{key}={value}"])
        assert raised.value.problems == [
            f"engine.{key}: training samples from the whole distribution: the learner's "
            "log-probs are of the untruncated policy, and a truncated support cannot be "
            "reproduced exactly (a token at its edge flips in or out with rounding); set "
            f"eval.{key} to truncate evaluation sampling, got {value!r} "
            f"(--set engine.{key}={value})"
        ]
    done = agentgym("train", str(QUICKSTART), "--sync", *sets("engine.top_p=0.9"))
    assert done.returncode == 2 and "engine.top_p: training samples from the whole" in done.stderr
    saved = tmp_path / "saved.yaml"  # a saved config may list the sampler's "off" values
    saved.write_text("engine: {top_k: 0, top_p: 1.0, temperature: 0.7}\n")
    assert load_config(saved).engine.temperature == 0.7
    config = load_config(QUICKSTART, ["eval.top_p=0.9", "eval.top_k=20", "eval.temperature=0.5"])
    train, evaluation = sampling_params(config), sampling_params(config, evaluation=True)
    assert (train.top_k, train.top_p, train.temperature) == (0, 1.0, 1.0)
    assert (evaluation.top_k, evaluation.top_p, evaluation.temperature) == (20, 0.9, 0.5)
    dump_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_engine_and_learner_compute_in_the_same_precision():
    load_config(QUICKSTART, ["engine.bf16=true", "learner.bf16=true"])
    with pytest.raises(ConfigError, match=r"engine.bf16: must equal learner.bf16 \(False\)"):
        load_config(QUICKSTART, ["engine.bf16=true"])
    vllm = ["model.menu_policy=false", "engine.backend=vllm"]  # vLLM's dtype follows it too
    load_config(QUICKSTART, [*vllm, "engine.bf16=true", "learner.bf16=true"])
    with pytest.raises(ConfigError, match=r"engine.bf16: must equal learner.bf16 \(True\)"):
        load_config(QUICKSTART, [*vllm, "learner.bf16=true"])


def test_the_menu_policy_needs_the_transformers_engine():
    with pytest.raises(ConfigError, match=r"model.menu_policy: needs engine.backend hf"):
        load_config(QUICKSTART, ["engine.backend=vllm"])


REFUSALS = {
    "sync needs weights every update": (["--sync"], ["learner.publish_weights_every=2",
                                                     "learner.max_staleness=3"]),
    "unknown key": ([], ["learner.nope=1"]),
    "bad type": ([], ["learner.groups_per_step=many"]),
    "env": ([], ["env.name=babyia"]),
    "tasks": ([], ["tasks.train.stop=-1"]),
    "model": ([], ["model.path=/no/such/model"]),
    "engine": ([], ["engine.max_batch_size=0"]),
    "engine vs learner": ([], ["engine.bf16=true"]),
    "actor": ([], ["actor.group_size=0"]),
    "learner": ([], ["learner.micro_batch_tokens=-1"]),
    "optim": ([], ["learner.optim.lr=0"]),
    "loss": ([], ["learner.loss.norm_tokens=0"]),
    "advantage": ([], ["learner.advantage.gamma=2"]),
    "horizon": ([], ["learner.horizon.schedule=sideways"]),
    "eval": ([], ["eval.samples=0"]),
    "transport": ([], ["transport.kind=udp"]),
    "kv reuse": ([], ["engine.kv_reuse_max_lag=-1"]),
    "vllm kv cache": ([], ["engine.vllm_kv_cache_mb=0"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_every_config_refusal_exits_with_code_2(tmp_path, case):
    """Whatever check refuses a config, and wherever it runs (the schema, --sync), the command
    exits with the one code docs/configs.md gives config problems, before creating anything."""
    from agentgym.cli.main import main

    flags, items = REFUSALS[case]
    run_dir = tmp_path / "run"
    argv = ["train", str(QUICKSTART), *flags, *sets(f"run_dir={run_dir}", *items)]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2, case
    assert not run_dir.exists()


def test_the_actor_refuses_an_unsynchronised_config_with_code_2(tmp_path):
    cmd = ["--sync", *sets(f"run_dir={tmp_path}", "learner.publish_weights_every=2",
                           "learner.max_staleness=3")]  # fmt: skip
    proc = agentgym(str(QUICKSTART), *cmd, module="agentgym.cli.actor")
    assert proc.returncode == 2, proc.stderr
    assert "publish_weights_every" in proc.stderr and "Traceback" not in proc.stderr

"""agentgym's envs for TRL: the tool envs of ``environment_factory`` (their tools as TRL and
transformers read them, expert episodes played through them) and real two-step
``GRPOTrainer`` runs on CPU with a tiny local model, with tools and with ``rollout_func``."""

from __future__ import annotations

import inspect
import os
import re

import pytest

from conftest import need

need("trl", "trl")
torch = need("torch", "trl")
datasets = need("datasets", "trl")

from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import qwen2_5_chat_template  # noqa: E402

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.planners import plan_babyai, plan_textcraft  # noqa: E402
from agentgym.integrations import trl as agtrl  # noqa: E402
from agentgym.integrations.tasks import export, rows  # noqa: E402
from agentgym.models import (  # noqa: E402
    TinyModelSpec,
    build_tiny_model,
    env_corpus,
    load_model,
    train_tokenizer,
)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# TRL 1.16 still calls transformers' gradient_checkpointing names, which 5.24 deprecates.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`.*gradient_checkpointing.*` is deprecated:FutureWarning"
)

TOOLS = {
    "babyai": {"turn_left", "turn_right", "move_forward", "go_to", "pick_up", "go_through",
               "toggle_and_go_through", "toggle"},
    "textcraft": {"get", "craft", "inventory"},
    "search": {"search", "answer"},
    "webnav": {"click", "type", "hover", "press", "scroll", "goto", "go_back", "stop"},
}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One intra-op thread while these run (set per module, not at import: other tests change
    it, and two threads fighting on a busy 2-core box made these runs 20x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tools_of(instance) -> list:
    """The methods TRL turns into tools, found as TRL finds them."""
    return [
        getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


@pytest.mark.parametrize("env", ["babyai", "textcraft", "search", "webnav"])
def test_each_family_has_meaningful_documented_tools(env):
    cls = agtrl.FAMILY_TOOLS[env]
    methods = tools_of(cls.__new__(cls))
    assert {m.__name__ for m in methods} == TOOLS[env]
    for method in methods:  # transformers renders these into the prompt; each must parse
        schema = get_json_schema(method)["function"]
        assert schema["description"] and all(
            p.get("description") for p in schema["parameters"].get("properties", {}).values()
        )


def babyai_call(env, action: str) -> str:
    for prefix, tool in (("toggle and go through ", env.toggle_and_go_through),
                         ("go through ", env.go_through), ("go to ", env.go_to),
                         ("pickup ", env.pick_up)):  # fmt: skip
        if action.startswith(prefix):
            return tool(action[len(prefix) :])
    return {"turn left": env.turn_left, "turn right": env.turn_right,
            "move forward": env.move_forward, "toggle": env.toggle}[action]()  # fmt: skip


def test_an_expert_babyai_episode_through_the_tools():
    env = agtrl.environment_factory("babyai")()
    row = next(r for r in rows("trl", "babyai", "train") if r["task_id"] == 12)
    first = env.reset(**row)
    assert first.startswith("Your goal:")
    steps = plan_babyai(EnvPool("babyai", threads=1), 12)
    for step in steps:
        observation = babyai_call(env, step.action)
    assert observation.endswith(agtrl.ENDED) and env.get_reward() > 0
    with pytest.raises(ValueError, match="episode is over"):
        env.turn_left()


def test_an_expert_textcraft_episode_through_the_tools():
    env = agtrl.environment_factory("textcraft")()
    env.reset(task_id=7)
    for step in plan_textcraft(EnvPool("textcraft", threads=1), 7):
        if m := re.fullmatch(r"get (\d+) (.+)", step.action):
            observation = env.get(int(m.group(1)), m.group(2))
        else:
            m = re.fullmatch(r"craft (\d+) (.+?) using (.+)", step.action)
            observation = env.craft(int(m.group(1)), m.group(2), m.group(3))
    assert observation.endswith(agtrl.ENDED) and env.get_reward() == 1.0
    assert env._episode.success


def test_webnav_tools_write_webarenas_actions():
    env = agtrl.environment_factory("webnav")()
    pool = EnvPool("webnav", threads=1)
    sid = pool.create(1)
    assert env.reset(task_id=0) == pool.reset(sid, [0])[0]
    assert (
        env.type(6, "garden hose") == pool.step(sid, ["type [6] [garden hose] [1]"]).observations[0]
    )
    assert env.scroll("down") == pool.step(sid, ["scroll [down]"]).observations[0]
    assert env.click(2) == pool.step(sid, ["click [2]"]).observations[0]


def test_bad_input():
    with pytest.raises(ValueError, match="no TRL tools for env 'chess'"):
        agtrl.environment_factory("chess")
    env = agtrl.environment_factory("babyai")()
    with pytest.raises(RuntimeError, match="reset first"):
        env.turn_left()
    with pytest.raises(ValueError, match="names no agentgym task"):
        env.reset(prompt=[{"role": "user", "content": ""}])
    with pytest.raises(ValueError, match="not of env 'babyai'"):
        env.reset(prompt=[{"role": "user", "content": "", "task": "textcraft/3"}])
    assert env.reset(prompt=[{"role": "user", "content": "", "task": "babyai/3"}])
    with pytest.raises(ValueError, match="names no agentgym task"):
        agtrl.prompt_task("babyai", [{"role": "user", "content": "hi"}])


# --- real GRPOTrainer runs ------------------------------------------------------------------

SPEC = TinyModelSpec(
    vocab_size=2048, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
)  # fmt: skip
INVENTORY_CALL = '<tool_call>\n{"name": "inventory", "arguments": {}}\n</tool_call>'


def grpo_args(tmp_path, learning_rate=1e-3, **kw) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2, num_generations=2,
        max_steps=2, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
        learning_rate=learning_rate, disable_tqdm=True, **kw,
    )  # fmt: skip


def alternating(completions, **kwargs) -> list[float]:
    """A reward that differs within every group, so that the two steps move the weights."""
    return [float(i % 2) for i in range(len(completions))]


def changed(before: dict, model) -> int:
    return sum(int(not torch.equal(before[k], v)) for k, v in model.named_parameters())


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    """The tiny model with a tool-calling chat template (Qwen2.5's, as TRL ships it), taught
    in a few hundred milliseconds per step to answer with a call of ``inventory``, so that the
    run below really calls the env's tools."""
    factory = agtrl.environment_factory("textcraft")
    probe = factory()
    renderer = train_tokenizer(["x"], 300)
    renderer.chat_template = qwen2_5_chat_template
    openings = [probe.reset(task_id=t) for t in range(4)]

    def prompt_text(tokenizer, observation):
        messages = [{"role": "user", "content": observation}]
        return tokenizer.apply_chat_template(
            messages, tools=tools_of(probe), tokenize=False, add_generation_prompt=True
        )

    corpus = [prompt_text(renderer, o) for o in openings] * 10 + [INVENTORY_CALL] * 10
    model, tokenizer = load_model(
        build_tiny_model(tmp_path_factory.mktemp("tool") / "m", corpus, SPEC)
    )
    tokenizer.chat_template = qwen2_5_chat_template
    target = tokenizer.encode(INVENTORY_CALL + "<|im_end|>", add_special_tokens=False)
    prompts = [
        tokenizer.encode(prompt_text(tokenizer, o), add_special_tokens=False) for o in openings
    ]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for step in range(150):
        ids = torch.tensor([prompts[step % 4] + target])
        labels = ids.clone()
        labels[0, : len(prompts[step % 4])] = -100
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    return factory, model, tokenizer


def test_grpo_two_steps_with_the_tool_env(tmp_path, tool_model):
    """GRPOTrainer(environment_factory=...): each rollout's env is reset to its row's task,
    the model's tool calls run the env's tools, the env's reward is a reward column, and the
    weights move."""
    factory, model, tokenizer = tool_model
    data = datasets.Dataset.from_list(list(rows("trl", "textcraft", "train"))[:4])
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer = GRPOTrainer(
        model=model, reward_funcs=[alternating], processing_class=tokenizer, train_dataset=data,
        environment_factory=factory,
        args=grpo_args(
            tmp_path, learning_rate=1e-4, max_completion_length=48, max_tool_calling_iterations=2
        ),
    )  # fmt: skip
    trainer.train()
    logs = [h for h in trainer.state.log_history if "tools/call_frequency" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all(h["tools/call_frequency"] > 0 and h["tools/failure_frequency"] == 0 for h in logs)
    assert "rewards/TextCraftEnv/mean" in logs[0]
    assert {e._episode.task_id for e in trainer.environments} <= {0, 1, 2, 3}
    # Completions are sampled: after one update some may answer without a call, so what holds
    # on every machine is that the calls reached an env's session.
    assert any(e._episode.turns >= 1 for e in trainer.environments)
    assert changed(before, model) > 0


def test_grpo_two_steps_with_the_rollout_func(tmp_path):
    """GRPOTrainer(rollout_func=...): agentgym's own multi-turn episodes, observation tokens
    masked out of the loss, every rollout stepped in one batch per turn, the weights move."""
    corpus = env_corpus("babyai", episodes=4, max_steps=4)
    model, tokenizer = load_model(build_tiny_model(tmp_path / "m", corpus, SPEC))
    rollout = agtrl.rollout_func("babyai", max_turns=3, max_new_tokens=12)
    seen: dict = {}

    def recording(prompts, trainer):
        out = rollout(prompts, trainer)
        seen.update(out)
        return out

    data = datasets.Dataset.from_list(list(rows("trl", "babyai", "train"))[:4])
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer = GRPOTrainer(
        model=model, reward_funcs=[agtrl.env_reward, alternating], processing_class=tokenizer,
        train_dataset=data, rollout_func=recording,
        args=grpo_args(tmp_path, max_completion_length=256),
    )  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 2 and changed(before, model) > 0
    masks = seen["env_mask"]
    assert len(masks) == 2 and all(
        len(m) == len(c) for m, c in zip(masks, seen["completion_ids"], strict=True)
    )
    assert any(0 in m and 1 in m for m in masks)  # replies and observations interleaved
    assert len(seen["env_reward"]) == 2 and len(seen["logprobs"][0]) == len(masks[0])


def test_exported_rows_load_with_datasets(tmp_path):
    written = export("trl", "babyai", tmp_path)
    data = datasets.load_dataset("parquet", data_files=str(written["train"]))["train"]
    first = data[0]
    assert first["task_id"] == 0 and first["prompt"][-1]["task"] == "babyai/0"
    assert agtrl.prompt_task("babyai", first["prompt"]) == 0

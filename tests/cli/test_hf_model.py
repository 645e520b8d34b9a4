"""``configs/textcraft-hf.yaml`` with ``model.path`` at a local Hugging Face checkpoint directory,
run as a user would: planner demos, SFT, GRPO from the SFT weights, eval and export, with no
tiny model built.

The checkpoint is made here in the shape real chat checkpoints have (no weights can be
downloaded): a Qwen2 model saved in bfloat16 with ``save_pretrained``, a fast tokenizer whose
chat template adds a default system message when a conversation has none, a generation config
with two end-of-turn ids, and no agentgym manifest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import sets

from agentgym.config import load_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "textcraft-hf.yaml"

QWEN_STYLE_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

SHRINK = [
    "actor.group_size=2",
    "actor.groups_in_flight=1",
    "actor.sample_every=1",
    "engine.max_new_tokens=24",
    "learner.groups_per_step=1",
    "learner.max_steps=2",
    "learner.checkpoint_every=1",
    "learner.horizon={schedule: fixed, cap: 3}",
    "tasks.eval.limit=2",
]


def make_checkpoint(directory: Path) -> Path:
    """A small Qwen2 chat checkpoint directory, as ``save_pretrained`` writes real ones."""
    import torch

    from agentgym.config import TinyModelSpec
    from agentgym.models import MANIFEST, build_tiny_model, env_corpus, load_model

    # 4,224 positions: the config's 4,096-token prompts plus its 128-token replies.
    spec = TinyModelSpec(vocab_size=512, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4224)  # fmt: skip
    build = build_tiny_model(directory / "build", env_corpus("textcraft", episodes=8), spec)
    model, tokenizer = load_model(build)
    tokenizer.chat_template = QWEN_STYLE_TEMPLATE
    out = directory / "Qwen2-chat-small"
    tokenizer.save_pretrained(out)
    model.to(torch.bfloat16).save_pretrained(out)
    assert not (out / MANIFEST).exists()
    return out


def agentgym(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "agentgym.cli.main", *args],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, f"agentgym {args[0]}: " + run.stdout[-3000:] + run.stderr[-3000:]
    return run


@pytest.mark.slow
def test_sft_train_eval_export_from_a_local_hugging_face_checkpoint(tmp_path):
    import torch

    from agentgym.models import load_model

    checkpoint = make_checkpoint(tmp_path)
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "bfloat16"
    run_dir = tmp_path / "run"
    demos = tmp_path / "demos.jsonl"
    common = [f"model.path={checkpoint}", f"run_dir={run_dir}"]
    agentgym("demos", "textcraft", "--tasks", "0:6", "--out", str(demos))
    agentgym("sft", str(CONFIG), *sets([*common, f"sft.data=[{demos}]", "sft.epochs=1",
                                         "sft.batch_size=2", "sft.optim.lr=0.003"]))  # fmt: skip
    agentgym("train", str(CONFIG), "--quiet", "--init-from", str(run_dir / "sft" / "checkpoints"),
             *sets([*common, *SHRINK]))  # fmt: skip
    assert not (run_dir / "model").exists(), "a tiny model was built beside model.path"
    recorded = load_config(run_dir / "config.yaml")
    assert recorded.model.path == str(checkpoint)
    assert recorded.actor.reply_format == "action_line"
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in steps if "step" in row][-1] == 2
    samples = [
        json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()
    ]
    assert samples and all(s["env"] == "textcraft" for s in samples)

    agentgym("eval", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir / "checkpoints"),
             "--set", "eval.samples=1")  # fmt: skip
    assert len(list((run_dir / "eval").glob("step_*.json"))) == 1

    out = tmp_path / "exported"
    agentgym("export", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir / "checkpoints"),
             "--out", str(out))  # fmt: skip
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out).chat_template == QWEN_STYLE_TEMPLATE
    trained, _ = load_model(out, dtype=torch.bfloat16)
    base, _ = load_model(checkpoint, dtype=torch.bfloat16)
    pairs = zip(trained.named_parameters(), base.named_parameters(), strict=True)
    moved = [name for (name, a), (_, b) in pairs if not torch.equal(a, b)]
    assert moved, "the exported weights are the starting checkpoint's"


def test_the_config_loads_and_needs_nothing_built():
    config = load_config(CONFIG)
    assert config.model.path is not None and config.actor.reply_format == "action_line"
    assert config.learner.horizon.rounds == (10, 20, 30)
    assert config.env.name == "textcraft" and config.engine.backend == "hf"

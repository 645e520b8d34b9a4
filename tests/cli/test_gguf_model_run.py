"""A real-model run from a GGUF file, end to end on CPU: ``agentgym model import`` of a GGUF
written by the test (a tiny Llama with SmolLM2's chat template), zero-shot eval of 2 tasks with
``configs/smollm2-babyai.yaml``, one GRPO step from the imported weights, eval of the step and
export; the exported directory is a Hugging Face model with the template and moved weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from gguf_helpers import SMOLLM_TEMPLATE, write_gguf  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2-babyai.yaml"


def agentgym(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "agentgym.cli.main", *args],
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, f"agentgym {args[0]}: " + run.stdout[-3000:] + run.stderr[-3000:]
    return run


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.mark.slow
def test_import_eval_train_export_from_a_gguf_file(tmp_path):
    import torch

    from agentgym.models import load_model

    write_gguf(tmp_path / "tiny.gguf", context=4096)
    model_dir = tmp_path / "model"
    agentgym("model", "import", str(tmp_path / "tiny.gguf"), str(model_dir))
    run_dir = tmp_path / "run"
    common = sets([
        f"model.path={model_dir}", f"run_dir={run_dir}", "engine.max_new_tokens=8",
        "actor.max_context_tokens=3000", "actor.group_size=2", "actor.groups_in_flight=1",
        "learner.groups_per_step=1", "learner.max_steps=1", "learner.checkpoint_every=1",
        "eval.samples=1", "eval.groups_in_flight=2", "learner.horizon.cap=2",
        # Every episode of a random model fails alike (no GRPO signal): the entropy bonus makes
        # the step move the weights, so that export can be seen to carry trained ones.
        "learner.loss.entropy_coef=0.01",
    ])  # fmt: skip
    agentgym("eval", str(CONFIG), *common, "--checkpoint", str(model_dir), "--limit", "2")
    agentgym("train", str(CONFIG), "--quiet", *common)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "step" in m] == [1]
    agentgym("eval", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir / "checkpoints"),
             "--limit", "2")  # fmt: skip
    results = sorted(p.name for p in (run_dir / "eval").glob("*.json"))
    assert results == ["model.json", "step_1.json"], results
    out = tmp_path / "exported"
    agentgym("export", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir / "checkpoints"),
             "--out", str(out))  # fmt: skip
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out).chat_template == SMOLLM_TEMPLATE
    trained, _ = load_model(out)
    base, _ = load_model(model_dir)
    pairs = zip(trained.named_parameters(), base.named_parameters(), strict=True)
    assert any(not torch.equal(a, b) for (_, a), (_, b) in pairs), "no weight moved"

"""Which weights an engine starts from: vLLM starts from a model directory, which must hold the
weights the learner starts from (``--init-from``) or the checkpoint ``agentgym eval`` scores.
vLLM is not needed: its engine's constructor is replaced by one that records the directory."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file, save_model  # noqa: E402

from agentgym.actor.policy import load_policy, make_engine, tokenizer_id  # noqa: E402
from agentgym.config import load_config  # noqa: E402
from agentgym.engines.vllm import VLLMEngine  # noqa: E402
from agentgym.models import TinyModelSpec, build_tiny_model, load_model  # noqa: E402


class Started(Exception):
    """Raised by the recording constructor once it knows the directory."""


@pytest.fixture()
def vllm_starts(monkeypatch):
    """The directories ``VLLMEngine.from_pretrained`` is asked to start from."""
    paths: list[Path] = []

    def record(path, **kwargs):
        paths.append(Path(path))
        return kwargs

    monkeypatch.setattr(VLLMEngine, "from_pretrained", staticmethod(record))
    return paths


def _base_and_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny model directory, and a learner-style checkpoint of other weights for it."""
    spec = TinyModelSpec(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    base = build_tiny_model(tmp_path / "model", ["Thought: go.\nAction: go forward"] * 20, spec)
    model, _ = load_model(base)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    ckpt = tmp_path / "checkpoints" / "step_00000007"
    ckpt.mkdir(parents=True)
    save_model(model, str(ckpt / "model.safetensors"))
    (ckpt.parent / "latest").write_text(ckpt.name)
    return base, ckpt


def _config(tmp_path: Path, base: Path, *more: str):
    items = [f"model.path={base}", "engine.backend=vllm", f"run_dir={tmp_path / 'run'}", *more]
    return load_config(None, items)


def _same_weights(directory: Path, reference: Path) -> bool:
    """Whether the model in ``directory`` has the weights of the model or checkpoint
    ``reference`` (by the names the model's state dict uses)."""
    got, _ = load_model(directory)
    want = load_file(str(reference / "model.safetensors"))
    state = got.state_dict()
    return all(torch.equal(state[name], tensor) for name, tensor in want.items())


def test_vllm_actors_start_from_the_weights_the_learner_starts_from(tmp_path, vllm_starts):
    base, ckpt = _base_and_checkpoint(tmp_path)
    plain = _config(tmp_path, base)
    make_engine(plain, *load_policy(plain))
    assert vllm_starts == [base]  # no init_from: the model directory itself
    init = _config(tmp_path, base, f"model.init_from={ckpt.parent}")
    model, tokenizer = load_policy(init)
    make_engine(init, model, tokenizer, seed=3)
    make_engine(init, model, tokenizer, seed=4)  # a second actor reuses the saved directory
    started = vllm_starts[1]
    assert vllm_starts[2] == started and (tmp_path / "run") in started.parents
    assert _same_weights(started, ckpt) and not _same_weights(base, ckpt)
    assert tokenizer_id(started) == tokenizer_id(base)


def test_vllm_eval_scores_the_checkpoint_it_names(tmp_path, monkeypatch):
    """``agentgym eval --checkpoint`` with engine.backend vllm samples with the checkpoint's
    weights, not the base model's under the checkpoint's name."""
    from agentgym.cli.eval import evaluate

    base, ckpt = _base_and_checkpoint(tmp_path)
    started = []

    def record(path, **kwargs):
        started.append(Path(path))
        raise Started

    monkeypatch.setattr(VLLMEngine, "from_pretrained", staticmethod(record))
    with pytest.raises(Started):
        evaluate(_config(tmp_path, base), ckpt.parent, limit=1)
    (directory,) = started
    assert directory != base and _same_weights(directory, ckpt)


def test_vllm_starts_as_the_config_sizes_it(tmp_path, vllm_starts):
    """The learner's arithmetic (bf16 or float32), room for the longest prompt and reply, the
    configured KV cache (None: the engine's CPU default), eager or compiled, the chat's stop
    ids."""
    base, _ = _base_and_checkpoint(tmp_path)
    plain = _config(tmp_path, base, "actor.max_context_tokens=900", "engine.max_new_tokens=48")
    model, tokenizer = load_policy(plain)
    kwargs = make_engine(plain, model, tokenizer, seed=5)
    assert kwargs["dtype"] == "float32" and kwargs["kv_cache_memory_bytes"] is None
    assert kwargs["max_model_len"] == 899 + 48 and kwargs["seed"] == 5
    assert kwargs["enforce_eager"] is False
    eos = tokenizer.eos_token_id
    assert eos is not None and eos in kwargs["stop_token_ids"]
    sized = _config(tmp_path, base, "engine.bf16=true", "learner.bf16=true",
                    "engine.vllm_kv_cache_mb=512", "engine.vllm_eager=true")  # fmt: skip
    kwargs = make_engine(sized, model, tokenizer)
    assert kwargs["dtype"] == "bfloat16" and kwargs["kv_cache_memory_bytes"] == 512 << 20
    assert kwargs["enforce_eager"] is True

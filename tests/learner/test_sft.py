"""SFT: one step's gradient does not depend on the micro-batch size (token mean over the whole
step), training lowers the loss on the data, and checkpoints load as the learner's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.config import SFTConfig  # noqa: E402
from agentgym.learner.datasets import Example  # noqa: E402
from agentgym.learner.sft import _step, micro_batches, train_sft  # noqa: E402


def tiny_lm(vocab=40, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg).eval()


def examples(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 5 + i
        tokens = torch.randint(1, 40, (length,), generator=g).tolist()
        mask = [0] * 2 + [1] * (length - 2)
        out.append(Example(tokens, mask))
    return out


def grads_after_step(micro: int):
    model = tiny_lm()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep the gradient, change nothing
    cfg = SFTConfig(batch_size=6, micro_batch_size=micro, optim=SFTConfig().optim)
    opt.zero_grad = lambda set_to_none=True: None  # keep .grad for the comparison
    loss, tokens, _ = _step(model, opt, examples(), list(range(6)), cfg, pad_token_id=0)
    return loss, tokens, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_gradient_does_not_depend_on_micro_batch_size():
    loss1, tokens1, g1 = grads_after_step(1)
    loss6, tokens6, g6 = grads_after_step(6)
    assert tokens1 == tokens6 == sum(len(e.tokens) - 2 for e in examples())
    assert loss1 == pytest.approx(loss6, rel=1e-5)
    for name in g1:
        assert torch.allclose(g1[name], g6[name], atol=1e-6), name


def test_micro_batches_hold_similar_lengths_longest_first():
    ex = examples()
    assert micro_batches(ex, [0, 5, 2, 3], 2) == [[5, 3], [2, 0]]


def test_training_lowers_the_loss_and_writes_checkpoints(tmp_path):
    model = tiny_lm()
    data = examples(4) * 4
    cfg = SFTConfig(epochs=3, batch_size=8, micro_batch_size=4, checkpoint_every=2)
    cfg = SFTConfig(**{**cfg.__dict__, "optim": type(cfg.optim)(lr=0.01)})
    result = train_sft(model, data, cfg, pad_token_id=0, out_dir=tmp_path, progress=lambda s: None)
    import json

    losses = [
        json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert result.steps == 6 and len(losses) == 6
    assert losses[-1] < losses[0] * 0.8
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_00000006"
    assert (tmp_path / "checkpoints" / "step_00000002" / "model.safetensors").exists()
    with pytest.raises(ValueError, match="no usable examples"):
        train_sft(model, [], cfg, pad_token_id=0, out_dir=tmp_path)

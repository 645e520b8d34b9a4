"""SFT: one step's gradient does not depend on the micro-batch size (token mean over the whole
step), training lowers the loss on the data, and checkpoints load as the learner's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.learner.config import SFTConfig  # noqa: E402
from agentgym.learner.datasets import Example  # noqa: E402
from agentgym.learner.sft import _demo_loss, micro_batches, train_sft  # noqa: E402


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
    cfg = SFTConfig(batch_size=6, micro_batch_size=micro, optim=SFTConfig().optim)
    loss, tokens = _demo_loss(model, examples(), list(range(6)), cfg, pad_token_id=0)
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


def copy_skill(model, seed=3) -> float:
    from agentgym.models import copy_accuracy

    return copy_accuracy(model, torch.arange(3, 40), torch.Generator().manual_seed(seed))


def sft_from_a_copier(tmp_path, copy_mix: float):
    """A 2-layer model trained to copy, then 40 SFT steps at a high lr on data with nothing
    to copy; returns (its copy accuracy before, after, the run's metrics, its copy loss on
    fresh copy sequences before and after)."""
    import json

    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentgym.models import copy_loss

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=40, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    ))  # fmt: skip
    ids, generator = torch.arange(3, 40), torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(300):
        copy_loss(model, ids, 32, generator).backward()
        optimizer.step()
        optimizer.zero_grad()
    before = copy_skill(model)
    loss_before = fresh_copy_loss(model, ids)
    cfg = SFTConfig(epochs=10, batch_size=4, micro_batch_size=4, copy_mix=copy_mix)
    cfg = SFTConfig(**{**cfg.__dict__, "optim": type(cfg.optim)(lr=0.003)})
    out = tmp_path / f"mix{copy_mix}"
    train_sft(
        model, examples(16), cfg, pad_token_id=0, out_dir=out, progress=lambda s: None,
        copy_ids=ids,
    )  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return before, copy_skill(model), rows, (loss_before, fresh_copy_loss(model, ids))


def fresh_copy_loss(model, ids) -> float:
    from agentgym.models import copy_loss

    with torch.no_grad():
        return float(copy_loss(model, ids, 64, torch.Generator().manual_seed(5)))


def test_copy_mix_keeps_the_copy_skill_that_sft_alone_wipes(tmp_path):
    before, plain, rows, _ = sft_from_a_copier(tmp_path, 0.0)
    assert before > 0.9
    assert plain < 0.5, plain
    assert "copy_loss" not in rows[0]
    before, mixed, rows, (loss_before, loss_after) = sft_from_a_copier(tmp_path, 0.5)
    assert mixed > 0.9, mixed
    # the logged copy_loss is the model's copy loss at that step: the copier's at the first
    # step, the trained model's at the last (each on its own random copy sequences)
    assert len(rows) == 40
    assert rows[0]["copy_loss"] == pytest.approx(loss_before, abs=0.25), (rows[0], loss_before)
    assert rows[-1]["copy_loss"] == pytest.approx(loss_after, abs=0.25), (rows[-1], loss_after)


def test_copy_mix_needs_the_ids_to_draw_from(tmp_path):
    cfg = SFTConfig(copy_mix=0.5)
    with pytest.raises(ValueError, match="copy_mix needs the token ids"):
        train_sft(tiny_lm(), examples(), cfg, pad_token_id=0, out_dir=tmp_path)


def test_a_stopped_run_resumes_to_what_one_uninterrupted_run_gives(tmp_path):
    """Stopped after step 3 at a checkpoint, then resumed in a fresh model: the same losses,
    step by step (the copy mix's random spans included), and the same final weights."""
    import json

    cfg = SFTConfig(epochs=2, batch_size=4, micro_batch_size=2, copy_mix=0.5)
    cfg = SFTConfig(**{**cfg.__dict__, "optim": type(cfg.optim)(lr=0.01)})
    ids = torch.arange(3, 40)

    def run(out, **kwargs):
        model = tiny_lm()
        result = train_sft(model, examples(12), cfg, pad_token_id=0, out_dir=out,
                           progress=lambda s: None, copy_ids=ids, **kwargs)  # fmt: skip
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return model, result, rows

    whole, done, rows = run(tmp_path / "whole")
    assert (done.steps, done.done, done.stopped) == (6, 6, False)
    asked = iter(range(100))
    _, stopped, first = run(tmp_path / "parts", should_stop=lambda: next(asked) >= 2)
    assert (stopped.done, stopped.stopped) == (3, True)
    assert stopped.checkpoint.name == "step_00000003"
    model, resumed, rest = run(tmp_path / "parts", resume=stopped.checkpoint)
    assert (resumed.done, resumed.stopped) == (6, False)
    assert [r["step"] for r in rest] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(rows, rest, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5), a["step"]
        assert a["copy_loss"] == pytest.approx(b["copy_loss"], rel=1e-5), a["step"]
    for (name, p), q in zip(whole.named_parameters(), model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), name


def test_bf16_step_is_the_float32_step_in_bf16_arithmetic():
    from dataclasses import replace

    loss32, _, g32 = grads_after_step(6)
    model = tiny_lm()
    cfg = replace(SFTConfig(batch_size=6, micro_batch_size=6), bf16=True)
    loss16, _ = _demo_loss(model, examples(), list(range(6)), cfg, pad_token_id=0)
    g16 = {n: p.grad for n, p in model.named_parameters()}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # master weights
    assert loss16 == pytest.approx(loss32, rel=2e-2) and loss16 != loss32
    flat = lambda g: torch.cat([v.reshape(-1) for v in g.values()])  # noqa: E731
    assert torch.nn.functional.cosine_similarity(flat(g16), flat(g32), 0) > 0.99


def test_a_step_whose_loss_is_not_finite_is_skipped_and_counted(tmp_path, monkeypatch):
    """A NaN loss gives a NaN gradient: the step leaves every parameter and the optimizer's
    moments as they were, is counted, and the next step trains."""
    import json

    from agentgym.learner import sft

    poisoned = {"on": True}
    plain_loss = sft.sft_loss

    def nan_loss(*args, **kwargs):
        loss = plain_loss(*args, **kwargs)
        return loss * float("nan") if poisoned["on"] else loss

    monkeypatch.setattr(sft, "sft_loss", nan_loss)
    model = tiny_lm()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    after_steps = []

    def progress(line):
        after_steps.append({n: p.detach().clone() for n, p in model.named_parameters()})
        poisoned["on"] = False

    cfg = SFTConfig(epochs=2, batch_size=6, micro_batch_size=3)
    train_sft(model, examples(), cfg, pad_token_id=0, out_dir=tmp_path, progress=progress)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["skipped_steps"], r["skipped_steps_total"]) for r in rows] == [(1, 1), (0, 1)]
    assert all(torch.equal(before[n], p) for n, p in after_steps[0].items())
    assert all(torch.isfinite(p).all() for p in after_steps[1].values())
    assert any(not torch.equal(before[n], p) for n, p in after_steps[1].items())

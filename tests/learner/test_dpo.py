"""DPO training: the policy moves towards the chosen sides, the reference stays frozen, one
step's gradient does not depend on the micro-batch size; pairs of different tasks are refused."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_sft import examples, tiny_lm  # noqa: E402

from agentgym.learner.config import DPOConfig  # noqa: E402
from agentgym.learner.datasets import DatasetError, read_pairs  # noqa: E402
from agentgym.learner.dpo import _pairs_loss, side_logprobs, train_dpo  # noqa: E402


def pairs():
    ex = examples(8, seed=3)
    return [(ex[i], ex[i + 1]) for i in range(0, 8, 2)]


def test_dpo_prefers_the_chosen_sides_and_keeps_the_reference(tmp_path):
    model = tiny_lm()
    data = pairs()
    before = side_logprobs(model, [c for c, _ in data], 0) - side_logprobs(
        model, [r for _, r in data], 0
    )
    cfg = DPOConfig(epochs=8, batch_size=4, micro_batch_size=2, beta=0.5)
    cfg = DPOConfig(**{**cfg.__dict__, "optim": type(cfg.optim)(lr=0.01)})
    result = train_dpo(model, data, cfg, pad_token_id=0, out_dir=tmp_path, progress=lambda s: None)
    after = side_logprobs(model, [c for c, _ in data], 0) - side_logprobs(
        model, [r for _, r in data], 0
    )
    assert (after - before).min() > 0  # every chosen side gained on its rejected side
    assert result.final_accuracy == 1.0
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["loss"] < lines[0]["loss"]
    assert lines[0]["reward_margin"] == pytest.approx(0.0, abs=1e-6)  # policy == reference at start
    assert (tmp_path / "checkpoints" / "latest").exists()


def test_dropout_is_off_in_the_policy_as_in_the_reference(tmp_path):
    """With dropout on in the policy only, the implicit rewards are noise from the first step:
    both run without it, so at step 1 (policy == reference) every margin is exactly 0."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    small = tiny_lm().config.to_dict()
    model = Qwen2ForCausalLM(Qwen2Config(**{**small, "attention_dropout": 0.9}))
    modes = []
    model.register_forward_hook(lambda module, args, out: modes.append(module.training))
    cfg = DPOConfig(epochs=1, batch_size=4, micro_batch_size=2, beta=0.5)
    train_dpo(model, pairs(), cfg, pad_token_id=0, out_dir=tmp_path, progress=lambda s: None)
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first["reward_margin"] == 0.0 and first["accuracy"] == 0.0
    assert modes and not any(modes)


def test_gradient_does_not_depend_on_micro_batch_size():
    grads = []
    for micro in (1, 4):
        model = tiny_lm()
        reference = tiny_lm()
        # move the policy off the reference so the gradient is not trivially symmetric
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
        cfg = DPOConfig(batch_size=4, micro_batch_size=micro)
        _pairs_loss(model, reference, pairs(), cfg, 0)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


def pair_codec():
    from agentgym.agent.turns import ChatCodec
    from agentgym.models import train_tokenizer

    return ChatCodec(train_tokenizer(["Thought: a\nAction: b", "get 1 x"] * 5, vocab_size=300))


def side(task, reply, env=None, opening="goal"):
    return {
        "task_id": task,
        **({"env": env} if env is not None else {}),
        "messages": [
            {"role": "user", "content": opening},
            {"role": "assistant", "content": reply},
        ],
    }


def test_pairs_of_different_tasks_are_refused(tmp_path):
    codec = pair_codec()

    path = tmp_path / "pairs.jsonl"
    lines = [
        {"chosen": side(1, "Action: get 1 x"), "rejected": side(1, "Action: b")},
        {"chosen": side(1, "Action: get 1 x"), "rejected": side(2, "Action: b")},
        {"chosen": side(1, "Action: get 1 x")},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got, report = read_pairs(path, codec)
    assert len(got) == 1 and report.mismatched == 1 and report.malformed == 1
    assert "1 mismatched (first: pairs.jsonl:2)" in report.summary()
    with pytest.raises(DatasetError, match="pairs.jsonl:2: chosen is task 1, rejected task 2"):
        read_pairs(path, codec, strict=True)


def test_pairs_of_the_same_task_id_in_different_envs_are_refused(tmp_path):
    path = tmp_path / "pairs.jsonl"
    chosen = side(3, "Action: get 1 x", "babyai")
    lines = [
        {"chosen": chosen, "rejected": side(3, "Action: b", "babyai")},
        {"chosen": chosen, "rejected": side(3, "Action: b", "textcraft")},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got, report = read_pairs(path, pair_codec())
    assert len(got) == report.kept == 1 and report.mismatched == 1
    with pytest.raises(DatasetError, match="chosen is babyai task 3, rejected textcraft task 3"):
        read_pairs(path, pair_codec(), strict=True)


def test_pair_sides_are_cut_before_the_loss_token_check(tmp_path):
    """A side whose every loss token lies past ``max_tokens`` loses them all to the cut: the
    pair is skipped and counted, never trained on a side with nothing to score."""
    codec = pair_codec()
    long_opening = " ".join(["goal"] * 40)
    path = tmp_path / "pairs.jsonl"
    lines = [
        {"chosen": side(1, "Action: get 1 x", opening=long_opening),
         "rejected": side(1, "Action: b")},
        {"chosen": side(2, "Action: get 1 x"), "rejected": side(2, "Action: b")},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    [second], _ = read_pairs(_one(tmp_path, lines[1]), codec)
    max_tokens = max(len(e.tokens) for e in second)  # the second pair fits whole
    got, report = read_pairs(path, codec, max_tokens=max_tokens)
    assert len(got) == report.kept == 1 and report.empty_after_cut == 1
    assert report.truncated == 1 and "1 empty after cut (first: pairs.jsonl:1)" in report.summary()
    assert all(any(e.loss_mask) for pair in got for e in pair)
    with pytest.raises(DatasetError, match="pairs.jsonl:1: no loss token left"):
        read_pairs(path, codec, max_tokens=max_tokens, strict=True)


def _one(tmp_path, line):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(line) + "\n")
    return path


def test_a_step_whose_loss_is_not_finite_is_skipped_and_counted(tmp_path, monkeypatch):
    """A NaN loss gives a NaN gradient: the step leaves every parameter as it was, is counted,
    and the next step trains."""
    from agentgym.learner import dpo

    poisoned = {"on": True}
    plain_loss = dpo.dpo_loss

    def nan_loss(*args, **kwargs):
        loss, margin = plain_loss(*args, **kwargs)
        return (loss * float("nan") if poisoned["on"] else loss), margin

    monkeypatch.setattr(dpo, "dpo_loss", nan_loss)
    model = tiny_lm()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    after_steps = []

    def progress(line):
        after_steps.append({n: p.detach().clone() for n, p in model.named_parameters()})
        poisoned["on"] = False

    cfg = DPOConfig(epochs=2, batch_size=4, micro_batch_size=2, beta=0.5)
    train_dpo(model, pairs(), cfg, pad_token_id=0, out_dir=tmp_path, progress=progress)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["skipped_steps"], r["skipped_steps_total"]) for r in rows] == [(1, 1), (0, 1)]
    assert all(torch.equal(before[n], p) for n, p in after_steps[0].items())
    assert all(torch.isfinite(p).all() for p in after_steps[1].values())
    assert any(not torch.equal(before[n], p) for n, p in after_steps[1].items())

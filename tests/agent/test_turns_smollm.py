"""Token-in/token-out with SmolLM2's tokenizer and chat template, as ``agentgym model import``
brings them from a GGUF file (a tiny one written by the test): a 3-turn episode's tokens are
exactly what the template renders, only the replies carry loss, and each observation turn is the
template's delta, also where the template adds its default system message."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from agentgym.agent.turns import ChatCodec, Conversation  # noqa: E402
from agentgym.model_import import import_gguf  # noqa: E402
from gguf_helpers import write_gguf  # noqa: E402

OBSERVATIONS = [
    'Your goal: go to the red ball\nAvailable actions: ["turn left", "go to red ball 1"]',
    'You turned left. Available actions: ["turn left", "move forward"]',
    "Your reply has no 'Action:' line, so nothing happened.",
    "You moved forward.",
]
REPLIES = [
    "Thought: the red ball is not in view.\nAction: turn left",
    "Thought: I move on.",
    "Thought: sorry.\nAction: move forward",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    base = tmp_path_factory.mktemp("smollm")
    write_gguf(base / "tiny.gguf")
    model_dir = import_gguf(base / "tiny.gguf", base / "model", progress=lambda _: None)
    return AutoTokenizer.from_pretrained(model_dir)


def rendered(tokenizer, messages) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def episode(codec: ChatCodec, conv: Conversation) -> list[tuple[int, int]]:
    """Three replies (sampled as the template would close them) and their observations; the
    token span of each reply."""
    im_end = codec.tokenizer.convert_tokens_to_ids("<|im_end|>")
    spans = []
    for turn, reply in enumerate(REPLIES):
        tokens = codec.encode(reply) + [im_end]
        start = len(conv.tokens)
        conv.add_reply(tokens, [-0.25] * len(tokens), version=turn)
        spans.append((start, start + len(tokens)))
        conv.add_observation(OBSERVATIONS[turn + 1])
    return spans


@pytest.mark.parametrize("worked_example", [False, True])
def test_three_turns_are_the_template_and_only_replies_carry_loss(tokenizer, worked_example):
    from agentgym.agent.prompts import initial_messages

    codec = ChatCodec(tokenizer)
    opening = initial_messages("babyai", OBSERVATIONS[0], worked_example=worked_example)
    conv = Conversation(codec, opening)
    spans = episode(codec, conv)
    assert conv.tokens == rendered(tokenizer, conv.messages)
    text = tokenizer.decode(conv.tokens)
    assert text == tokenizer.apply_chat_template(
        conv.messages, tokenize=False, add_generation_prompt=True
    )
    mask = conv.trace.loss_mask
    assert [i for i, m in enumerate(mask) if m] == [i for a, b in spans for i in range(a, b)]
    assert [lp for lp, m in zip(conv.trace.logprobs, mask, strict=True) if m] == [-0.25] * sum(mask)


def test_each_observation_turn_is_the_templates_delta(tokenizer):
    codec = ChatCodec(tokenizer)
    conv = Conversation.start(codec, "babyai", OBSERVATIONS[0])
    spans = episode(codec, conv)
    for turn, (_, end) in enumerate(spans):
        before = conv.messages[: 2 + 2 * turn + 1]  # through this reply
        after = conv.messages[: 2 + 2 * turn + 2]  # and the observation that follows it
        full = rendered(tokenizer, after)
        closed = tokenizer.apply_chat_template(before, tokenize=False)
        assert conv.tokens[:end] == codec.encode(closed)[:end]
        nxt = spans[turn + 1][0] if turn + 1 < len(spans) else len(conv.tokens)
        assert conv.tokens[end:nxt] == full[end:]


def test_without_a_system_message_the_template_adds_smollms_own(tokenizer):
    codec = ChatCodec(tokenizer)
    conv = Conversation(codec, [{"role": "user", "content": OBSERVATIONS[0]}])
    episode(codec, conv)
    assert conv.tokens == rendered(tokenizer, conv.messages)
    assert tokenizer.decode(conv.tokens).startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM"
    )

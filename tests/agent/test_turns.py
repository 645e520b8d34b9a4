"""Token-in/token-out turns: the token stream equals what the ChatML template produces for the
whole conversation, sampled tokens are kept verbatim, masks and log-probs line up."""

import asyncio

import numpy as np
import pytest

from agentgym.agent.prompts import initial_messages
from agentgym.agent.turns import ChatCodec, Conversation, TokenTrace

OBSERVATIONS = [
    "Your goal: go to the red ball. There is a red ball 1 right in front of you 3 steps away.",
    "You moved forward. There is a red ball 1 right in front of you 2 steps away.",
    "Your reply has no 'Action:' line, so nothing happened.",
    "You moved forward. There is a red ball 1 right in front of you 1 steps away.",
]
REPLIES = [
    "Thought: the ball is ahead.\nAction: move forward",
    "Thought: closer.\nI go on",
    "Thought: sorry.\nAction: move forward",
]


def template_ids(tokenizer, messages) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def play(codec, replies_as_tokens) -> Conversation:
    conv = Conversation.start(codec, "babyai", OBSERVATIONS[0])
    for turn, tokens in enumerate(replies_as_tokens):
        conv.add_reply(tokens, [-0.5] * len(tokens), version=turn)
        conv.add_observation(OBSERVATIONS[turn + 1])
    return conv


def im_end(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_stream_equals_the_template_over_the_whole_conversation(tokenizer) -> None:
    codec = ChatCodec(tokenizer)
    replies = [codec.encode(r) + [im_end(tokenizer)] for r in REPLIES]
    conv = play(codec, replies)
    assert [m["content"] for m in conv.messages if m["role"] == "assistant"] == REPLIES
    assert conv.tokens == template_ids(tokenizer, conv.messages)


def test_opening_prompt_is_the_template_with_generation_prompt(tokenizer) -> None:
    codec = ChatCodec(tokenizer)
    conv = Conversation.start(codec, "textcraft", "Goal: craft blue dye.")
    messages = initial_messages("textcraft", "Goal: craft blue dye.")
    assert conv.tokens == template_ids(tokenizer, messages)
    text = tokenizer.decode(conv.tokens)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


def test_mask_and_logprobs_mark_exactly_the_sampled_tokens(tokenizer) -> None:
    codec = ChatCodec(tokenizer)
    replies = [codec.encode(r) + [im_end(tokenizer)] for r in REPLIES]
    conv = play(codec, replies)
    trace = conv.trace
    mask = np.asarray(trace.loss_mask)
    lps = np.asarray(trace.logprobs)
    assert mask.sum() == sum(len(r) for r in replies)
    assert np.all(lps[mask == 1] == -0.5) and np.all(lps[mask == 0] == 0.0)
    generated = [t for t, m in zip(trace.tokens, trace.loss_mask, strict=True) if m]
    assert generated == [t for r in replies for t in r]
    assert trace.prompt_len == len(template_ids(tokenizer, conv.messages[:2]))
    assert trace.turn_versions == [0, 1, 2] and trace.num_turns == 3


def test_sampled_tokens_are_kept_even_when_not_canonical(tokenizer) -> None:
    codec = ChatCodec(tokenizer)
    # One token per character: valid ids whose text re-tokenizes to different (merged) ids.
    odd = [t for ch in REPLIES[0] for t in codec.encode(ch)] + [im_end(tokenizer)]
    assert odd[:-1] != codec.encode(REPLIES[0])
    conv = play(codec, [odd])
    start = conv.trace.prompt_len
    assert conv.tokens[start : start + len(odd)] == odd
    assert tokenizer.decode(conv.tokens) == codec.render(conv.messages, add_generation_prompt=True)


def test_reply_cut_by_length_is_closed_by_the_delta(tokenizer) -> None:
    codec = ChatCodec(tokenizer)
    cut = codec.encode("Thought: the ball is")  # no <|im_end|>: the token budget ran out
    conv = play(codec, [cut])
    delta = conv.tokens[conv.trace.prompt_len + len(cut) :]
    assert delta[0] == im_end(tokenizer)
    assert conv.trace.loss_mask[conv.trace.prompt_len + len(cut)] == 0
    assert conv.tokens == template_ids(tokenizer, conv.messages)


def test_turn_order_is_enforced(tokenizer) -> None:
    conv = Conversation.start(ChatCodec(tokenizer), "babyai", OBSERVATIONS[0])
    with pytest.raises(RuntimeError):
        conv.add_observation("too early")
    conv.add_reply([5, im_end(tokenizer)], [-1.0, -1.0], version=0)
    with pytest.raises(RuntimeError):
        conv.add_reply([5], [-1.0], version=0)


def test_trace_fields_build_a_wire_trajectory(tokenizer) -> None:
    wire = pytest.importorskip("agentgym.transport.wire")
    codec = ChatCodec(tokenizer)
    conv = play(codec, [codec.encode(r) + [im_end(tokenizer)] for r in REPLIES])
    traj = wire.Trajectory(
        episode_id=1,
        group_id=0,
        group_size=1,
        env="babyai",
        task_id=3,
        horizon_cap=None,
        reward=1.0,
        success=True,
        truncation="",
        **conv.trace.trajectory_fields(),
    )
    assert traj.num_tokens == len(conv.tokens)
    assert traj.min_version == 0 and traj.max_version == 2 and traj.num_turns == 3
    assert traj.tokens.dtype == np.int32 and traj.loss_mask.dtype == np.uint8


def test_trace_rejects_mismatched_logprobs() -> None:
    with pytest.raises(ValueError):
        TokenTrace().extend_generated([1, 2], [0.0], version=0)


def test_engine_replies_flow_into_the_stream(tmp_path) -> None:
    pytest.importorskip("torch")
    from agentgym.engines import SamplingParams
    from agentgym.engines.hf import HFEngine
    from agentgym.models import TinyModelSpec, build_tiny_model, load_tokenizer

    spec = TinyModelSpec(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    path = build_tiny_model(tmp_path / "m", OBSERVATIONS, spec)
    engine = HFEngine.from_pretrained(path)
    engine_tokenizer = load_tokenizer(path)
    codec = ChatCodec(engine_tokenizer)
    conv = Conversation.start(codec, "babyai", OBSERVATIONS[0])

    async def two_turns():
        for turn in range(2):
            prompt = list(conv.tokens)
            [gen] = await engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=turn))
            conv.add_reply(gen.token_ids, gen.logprobs, gen.policy_version)
            assert conv.tokens[: len(prompt)] == prompt
            assert conv.tokens[len(prompt) :] == gen.token_ids
            conv.add_observation(OBSERVATIONS[turn + 1])
        await engine.close()

    asyncio.run(two_turns())
    text = engine_tokenizer.decode(conv.tokens)
    assert text == codec.render(conv.messages, add_generation_prompt=True)

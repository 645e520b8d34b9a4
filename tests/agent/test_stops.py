"""Replies cut after their first stop string: on tokens for the trajectory, on text for the env."""

import pytest

from agentgym.agent.stops import cut_text, first_stop_end, tokens_to_keep
from agentgym.agent.turns import ChatCodec, Conversation
from agentgym.envs.families import SEARCH_STOP

STOPS = ("</search>", "</answer>")


def test_the_earliest_stop_string_ends_the_text() -> None:
    assert first_stop_end("a</answer>b</search>", STOPS) == len("a</answer>")
    assert first_stop_end("<search>q</search><answer>x</answer>", STOPS) == len(
        "<search>q</search>"
    )
    assert first_stop_end("no stop here", STOPS) is None
    assert cut_text("<search>q</search> and then", STOPS) == "<search>q</search>"
    assert cut_text("no stop here", STOPS) == "no stop here"
    assert cut_text("x</search>", ()) == "x</search>"


@pytest.mark.parametrize(
    ("pieces", "keep"),
    [
        (["<search>", "q", "</sea", "rch>", " more", " text"], 4),
        (["<search>q</search>\n"], 1),  # the stop ends inside the only token
        (["a", "b</answer>x", "</search>"], 2),  # the token completing the stop carries more
        (["<search>", "q", "</search>"], 3),  # an engine that stopped there
        (["nothing", " to", " cut"], 3),
        ([], 0),
    ],
)
def test_tokens_are_kept_up_to_the_one_that_completes_the_stop(pieces, keep) -> None:
    calls = []

    def decode(ids):
        calls.append(len(ids))
        return "".join(pieces[i] for i in ids)

    ids = list(range(len(pieces)))
    assert tokens_to_keep(decode, ids, STOPS) == keep
    assert len(calls) <= 2 + max(len(pieces), 1).bit_length()


def test_a_reply_enters_the_conversation_cut_after_its_first_stop(tokenizer) -> None:
    codec = ChatCodec(tokenizer)
    conv = Conversation.start(codec, "search", "Question: where was the founder born?")
    reply = "<think>look it up</think><search>founder</search> then <answer>Paris</answer>"
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tokens = codec.encode(reply) + [im_end]
    logprobs = [-float(i) for i in range(len(tokens))]
    text = conv.add_reply(tokens, logprobs, version=3, stop=SEARCH_STOP)
    assert text == "<think>look it up</think><search>founder</search>"
    assert conv.messages[-1] == {"role": "assistant", "content": text}
    trace = conv.trace
    kept = [t for t, m in zip(trace.tokens, trace.loss_mask, strict=True) if m]
    assert kept == tokens[: len(kept)] and len(kept) < len(tokens)
    assert codec.decode_reply(kept).startswith(text)
    assert "</search>" not in codec.decode_reply(kept[:-1])
    assert trace.logprobs[-len(kept) :] == logprobs[: len(kept)]
    # The reply did not end with the template's closing token, so the observation turn
    # closes it before the user message; nothing after the stop is in the stream.
    conv.add_observation("<information>Doc 1(Title: founder) ...</information>")
    stream = tokenizer.decode(conv.tokens)
    assert "</search><|im_end|>\n<|im_start|>user\n<information>" in stream
    assert "Paris" not in stream

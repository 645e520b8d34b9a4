"""Dataset reader: both conversation formats and token records, masks on assistant tokens only,
the actors' tokenization, truncation and bad lines counted (or fatal in strict mode)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from agentgym.agent.turns import ChatCodec, Conversation  # noqa: E402
from agentgym.learner.datasets import (  # noqa: E402
    DatasetError,
    end_of_turn_tokens,
    read_dataset,
)
from agentgym.models import train_tokenizer  # noqa: E402

TEXTS = [
    "Crafting commands:\ncraft 1 blue dye using 1 lapis lazuli\nGoal: craft blue dye.",
    "Thought: I need lapis lazuli.\nAction: get 1 lapis lazuli",
    "Got 1 lapis lazuli.",
    "Thought: now I craft.\nAction: craft 1 blue dye using 1 lapis lazuli",
    "Crafted 1 minecraft:blue_dye",
    "You are an agent. OK. I will follow your instructions.",
]


@pytest.fixture(scope="module")
def codec():
    return ChatCodec(train_tokenizer(TEXTS * 5, vocab_size=320))


def write(tmp_path, records, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def demo_record():
    return {
        "env": "textcraft",
        "task_id": 7,
        "reward": 1.0,
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": TEXTS[0]},
            {"role": "assistant", "content": TEXTS[1]},
            {"role": "user", "content": TEXTS[2]},
            {"role": "assistant", "content": TEXTS[3]},
        ],
    }


def test_messages_tokenize_as_an_actor_episode(codec, tmp_path):
    (ex,), report = read_dataset(write(tmp_path, [demo_record()]), codec)
    assert report.kept == 1 and report.summary() == "1 kept"
    # the same episode played through the actor's Conversation, replies sampled as
    # text tokens + the end-of-turn token
    end = end_of_turn_tokens(codec)
    assert len(end) == 1 and codec.tokenizer.convert_ids_to_tokens(end[0]) == "<|im_end|>"
    conv = Conversation(codec, demo_record()["messages"][:2])
    conv.add_reply(codec.encode(TEXTS[1]) + end, [0.0] * (len(codec.encode(TEXTS[1])) + 1), 0)
    conv.add_observation(TEXTS[2])
    conv.add_reply(codec.encode(TEXTS[3]) + end, [0.0] * (len(codec.encode(TEXTS[3])) + 1), 0)
    assert ex.tokens == conv.trace.tokens
    assert ex.loss_mask == conv.trace.loss_mask
    masked = codec.tokenizer.decode([t for t, m in zip(ex.tokens, ex.loss_mask, strict=True) if m])
    assert masked == TEXTS[1] + "<|im_end|>" + TEXTS[3] + "<|im_end|>"
    assert ex.meta["task_id"] == 7 and ex.meta["source"] == "data.jsonl:1"


def test_agenttraj_conversations(codec, tmp_path):
    record = {
        "item_id": "textcraft_7",
        "conversations": [
            {"from": "human", "loss": None, "value": "You are an agent."},
            {"from": "gpt", "loss": False, "value": "OK. I will follow your instructions."},
            {"from": "human", "loss": None, "value": TEXTS[0]},
            {"from": "gpt", "loss": True, "value": TEXTS[1]},
        ],
    }
    (ex,), _ = read_dataset(write(tmp_path, [record]), codec)
    masked = codec.tokenizer.decode([t for t, m in zip(ex.tokens, ex.loss_mask, strict=True) if m])
    assert masked == TEXTS[1] + "<|im_end|>"  # the acknowledgement carries no loss
    text = codec.tokenizer.decode(ex.tokens)
    assert text.startswith("<|im_start|>user\nYou are an agent.<|im_end|>")
    assert "OK. I will follow your instructions." in text
    assert ex.meta["item_id"] == "textcraft_7"


def test_token_records_pass_through(codec, tmp_path):
    record = {"tokens": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1], "episode_id": 3}
    (ex,), _ = read_dataset(write(tmp_path, [record]), codec)
    assert (ex.tokens, ex.loss_mask, ex.meta["episode_id"]) == ([5, 6, 7, 8], [0, 0, 1, 1], 3)


def test_bad_lines_are_counted_with_line_numbers(codec, tmp_path):
    no_reply = {"messages": [{"role": "user", "content": "hi"}]}
    ack_only = {
        "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "gpt", "loss": False, "value": "OK"},
        ]
    }
    path = write(
        tmp_path,
        [
            demo_record(),
            "{not json",
            {"conversations": [{"from": "robot", "value": "x"}]},
            no_reply,
            ack_only,
            [1, 2],
            {"tokens": [1, 2], "loss_mask": [1]},
            demo_record(),
        ],
    )
    examples, report = read_dataset(path, codec)
    assert len(examples) == report.kept == 2
    assert report.malformed == 5 and report.no_assistant == 1
    assert report.first_lines["malformed"] == [f"data.jsonl:{n}" for n in (2, 3, 4, 6, 7)]
    assert "5 malformed (first: data.jsonl:2" in report.summary()
    with pytest.raises(DatasetError, match="data.jsonl:2"):
        read_dataset(path, codec, strict=True)


def test_long_records_are_cut_and_counted(codec, tmp_path):
    (full,), _ = read_dataset(write(tmp_path, [demo_record()]), codec)
    first_loss = full.loss_mask.index(1)
    (cut,), report = read_dataset(
        write(tmp_path, [demo_record()]), codec, max_tokens=first_loss + 2
    )
    assert cut.tokens == full.tokens[: first_loss + 2] and sum(cut.loss_mask) == 2
    assert report.truncated == 1
    examples, report = read_dataset(write(tmp_path, [demo_record()]), codec, max_tokens=first_loss)
    assert examples == [] and report.empty_after_cut == 1


def test_alternation_is_required(codec, tmp_path):
    record = demo_record()
    record["messages"].append({"role": "assistant", "content": "again"})
    _, report = read_dataset(write(tmp_path, [record]), codec)
    assert report.malformed == 1

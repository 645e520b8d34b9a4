"""Trajectory datasets for SFT and DPO: JSONL files read into token ids and loss masks.

Each line is one record, in one of three forms:

- **AgentTraj** (AgentGym's expert trajectories): ``{"item_id": ..., "conversations": [{"from":
  "human" | "gpt", "loss": bool | null, "value": text}, ...]}``. ``human`` turns are user
  messages, ``gpt`` turns assistant messages; an assistant turn carries loss unless its ``loss``
  is ``false`` (AgentGym marks its acknowledgement turn so).
- **messages** (``agentgym demos`` and exported runs): ``{"messages": [{"role": "system" |
  "user" | "assistant", "content": text, "loss": bool (optional)}, ...], "env", "task_id",
  "reward", "success", ...}``. Assistant messages carry loss unless ``loss`` is false.
- **tokens** (the actors' ``trajectories.jsonl``): ``{"tokens": [...], "loss_mask": [...]}``,
  used as recorded (the ids of the tokenizer that produced them).

Messages become tokens exactly as the actors build an episode (``agentgym.agent.turns``): the
chat template renders the opening messages with the generation prompt, each assistant turn is
its text's tokens plus the template's end-of-turn token (what a model samples), each later user
turn is the template's delta. Only assistant tokens carry loss.

Bad input loses nothing silently: a line that is not JSON or not one of the forms above is
skipped and counted (with the first few line numbers), as is a record without any assistant turn
that carries loss; ``strict=True`` raises instead. Records longer than ``max_tokens`` are cut to
that length and counted; one with no loss token left is skipped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.agent.turns import ChatCodec

_SHOWN_LINES = 5
_ROLES = {"human": "user", "gpt": "assistant"}


class DatasetError(ValueError):
    """A record that cannot be used (raised in strict mode, counted otherwise)."""


@dataclass
class Example:
    """One training sequence."""

    tokens: list[int]
    loss_mask: list[int]
    meta: dict[str, Any] = field(default_factory=dict)
    """The record's other fields (``item_id``, ``env``, ``task_id``, ``reward``, ``success``),
    plus ``source`` (``file:line``)."""


@dataclass
class ReadReport:
    """What a read kept and what it skipped, with the first line numbers of each kind."""

    kept: int = 0
    malformed: int = 0
    mismatched: int = 0
    no_assistant: int = 0
    truncated: int = 0
    empty_after_cut: int = 0
    first_lines: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, kind: str, where: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        shown = self.first_lines.setdefault(kind, [])
        if len(shown) < _SHOWN_LINES:
            shown.append(where)

    def summary(self) -> str:
        """One line: kept, and each kind of skip with its first line numbers."""
        parts = [f"{self.kept} kept"]
        for kind in ("malformed", "mismatched", "no_assistant", "truncated", "empty_after_cut"):
            n = getattr(self, kind)
            if n:
                lines = ", ".join(self.first_lines.get(kind, []))
                parts.append(f"{n} {kind.replace('_', ' ')} (first: {lines})")
        return "; ".join(parts)


def read_dataset(
    paths: str | Path | Sequence[str | Path],
    codec: ChatCodec,
    *,
    max_tokens: int | None = None,
    strict: bool = False,
) -> tuple[list[Example], ReadReport]:
    """Every usable record of the JSONL files ``paths`` as ``Example``s, and the report."""
    report = ReadReport()
    examples: list[Example] = []
    for line, where in _lines(paths):
        example = _read_line(line, codec, where, report, strict)
        if example is not None and _cut_kept(example, max_tokens, where, report, strict):
            examples.append(example)
            report.kept += 1
    return examples, report


def read_pairs(
    paths: str | Path | Sequence[str | Path],
    codec: ChatCodec,
    *,
    max_tokens: int | None = None,
    strict: bool = False,
) -> tuple[list[tuple[Example, Example]], ReadReport]:
    """(chosen, rejected) pairs of the JSONL files ``paths``: each line ``{"chosen": record,
    "rejected": record}`` with records in any of the three forms. A pair whose sides name
    different episodes' tasks (``env``, and ``task_id`` or ``item_id``) is refused
    (``mismatched``); each side is cut to ``max_tokens`` as examples are, before the check
    that it has loss tokens: a pair with a side that lost every one is skipped and counted
    (``empty after cut``), as is each pair with a side cut (``truncated``)."""
    report = ReadReport()
    pairs = []
    for line, where in _lines(paths):
        pair = _read_pair(line, codec, where, report, strict)
        if pair is not None and _cut_kept(pair, max_tokens, where, report, strict):
            pairs.append(pair)
            report.kept += 1
    return pairs, report


def _lines(paths: str | Path | Sequence[str | Path]) -> Iterator[tuple[str, str]]:
    """(line, ``file:number``) of every non-blank line of ``paths``."""
    files = [paths] if isinstance(paths, str | Path) else list(paths)
    for path in files:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    yield line, f"{Path(path).name}:{number}"


def _cut_kept(
    item: Example | tuple[Example, ...], max_tokens: int | None, where: str, report, strict
) -> bool:
    """Cut ``item``'s sequences (one example, or a pair's sides) to ``max_tokens`` in place,
    counting a cut; False (rejected and counted) when a cut one has no loss token left."""
    examples = item if isinstance(item, tuple) else (item,)
    if max_tokens is None or all(len(e.tokens) <= max_tokens for e in examples):
        return True
    for e in examples:
        e.tokens, e.loss_mask = e.tokens[:max_tokens], e.loss_mask[:max_tokens]
    report.skip("truncated", where)
    if all(any(e.loss_mask) for e in examples):
        return True
    _reject(report, "empty_after_cut", where, strict, "no loss token left after the cut")
    return False


def _read_pair(line: str, codec, where: str, report: ReadReport, strict: bool):
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or not {"chosen", "rejected"} <= record.keys():
            raise DatasetError("a pair is an object with 'chosen' and 'rejected'")
        sides = tuple(record_to_example(record[k], codec) for k in ("chosen", "rejected"))
    except (json.JSONDecodeError, DatasetError, TypeError, KeyError, AttributeError) as e:
        _reject(report, "malformed", where, strict, str(e))
        return None
    chosen, rejected = (task_of(e.meta) for e in sides)
    if chosen != rejected:
        why = f"chosen is {_task_name(chosen)}, rejected {_task_name(rejected)}"
        _reject(report, "mismatched", where, strict, why)
        return None
    if not all(any(e.loss_mask) for e in sides):
        _reject(report, "no_assistant", where, strict, "a side has no assistant turn with loss")
        return None
    return sides


def task_of(meta: dict[str, Any]) -> tuple[Any, Any]:
    """(env, task) of a record: its ``env`` (None when it names none) and its ``task_id``
    (AgentTraj: ``item_id``). Task ids are per env: task 3 of BabyAI is not task 3 of
    TextCraft."""
    return meta.get("env"), meta.get("task_id", meta.get("item_id"))


def _task_name(task: tuple[Any, Any]) -> str:
    env, task_id = task
    return f"task {task_id}" if env is None else f"{env} task {task_id}"


def _read_line(line: str, codec, where: str, report: ReadReport, strict: bool) -> Example | None:
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise DatasetError("a record must be a JSON object")
        example = record_to_example(record, codec)
    except (json.JSONDecodeError, DatasetError, TypeError, KeyError) as e:
        _reject(report, "malformed", where, strict, str(e))
        return None
    if not any(example.loss_mask):
        _reject(report, "no_assistant", where, strict, "no assistant turn carries loss")
        return None
    example.meta["source"] = where
    return example


def _reject(report: ReadReport, kind: str, where: str, strict: bool, why: str) -> None:
    if strict:
        raise DatasetError(f"{where}: {why}")
    report.skip(kind, where)


def record_to_example(record: dict[str, Any], codec: ChatCodec) -> Example:
    """One record (any of the three forms) as an ``Example``; raises ``DatasetError``."""
    meta = {k: v for k, v in record.items() if k not in ("conversations", "messages", "tokens")}
    meta.pop("loss_mask", None)
    if "conversations" in record:
        return Example(*tokenize_messages(agenttraj_messages(record["conversations"]), codec), meta)
    if "messages" in record:
        return Example(*tokenize_messages(_checked_messages(record["messages"]), codec), meta)
    if "tokens" in record and "loss_mask" in record:
        tokens, mask = [int(t) for t in record["tokens"]], [int(m) for m in record["loss_mask"]]
        if len(tokens) != len(mask):
            raise DatasetError(f"{len(tokens)} tokens but {len(mask)} loss_mask entries")
        return Example(tokens, [1 if m else 0 for m in mask], meta)
    raise DatasetError("no 'conversations', 'messages' or 'tokens' + 'loss_mask' field")


def agenttraj_messages(conversations: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """AgentTraj turns as chat messages with a ``loss`` flag on assistant turns."""
    out = []
    for turn in conversations:
        role = _ROLES.get(turn.get("from"))
        if role is None:
            raise DatasetError(f"turn 'from' must be 'human' or 'gpt', got {turn.get('from')!r}")
        message = {"role": role, "content": _text(turn.get("value"))}
        if role == "assistant":
            message["loss"] = turn.get("loss") is not False
        out.append(message)
    return out


def _checked_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        if m.get("role") not in ("system", "user", "assistant"):
            raise DatasetError(f"message role must be system, user or assistant: {m.get('role')!r}")
        message = {"role": m["role"], "content": _text(m.get("content"))}
        if m["role"] == "assistant":
            message["loss"] = m.get("loss") is not False
        out.append(message)
    return out


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise DatasetError(f"message text must be a string, got {type(value).__name__}")
    return value


def tokenize_messages(messages: list[dict[str, Any]], codec: ChatCodec) -> tuple[list, list]:
    """(tokens, loss_mask) of a conversation, built as the actors build an episode."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or first == 0:
        raise DatasetError("a conversation needs opening messages, then an assistant turn")
    opening = [{"role": m["role"], "content": m["content"]} for m in messages[:first]]
    tokens = codec.prompt_tokens(opening)
    mask = [0] * len(tokens)
    end = end_of_turn_tokens(codec)
    last: int | None = None
    expect_assistant = True
    for m in messages[first:]:
        if m["role"] == "system":
            raise DatasetError("a system message may only open a conversation")
        if (m["role"] == "assistant") != expect_assistant:
            raise DatasetError("after the opening, user and assistant turns must alternate")
        if m["role"] == "assistant":
            reply = codec.encode(m["content"]) + end
            tokens += reply
            mask += [int(m["loss"])] * len(reply)
            last = reply[-1]
        else:
            delta = codec.observation_delta(m["content"], last)
            tokens += delta
            mask += [0] * len(delta)
        expect_assistant = not expect_assistant
    return tokens, mask


def end_of_turn_tokens(codec: ChatCodec) -> list[int]:
    """The special tokens that open the template's text after a reply (ChatML: <|im_end|>):
    what a model samples to end its turn, and what the actor's stop tokens are."""
    special = set(codec.tokenizer.all_special_ids)
    out = []
    for token in codec.encode(codec.reply_suffix):
        if token not in special:
            break
        out.append(token)
    return out

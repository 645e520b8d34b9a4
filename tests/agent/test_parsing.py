"""Action parsing with AgentGym's rules: exactly one Action line, sanitised; otherwise a corrective
observation and no environment call."""

import pytest

from agentgym.agent.parsing import (
    EMPTY_ACTION_MESSAGE,
    MANY_ACTIONS_MESSAGE,
    NO_ACTION_MESSAGE,
    ParsedAction,
    parse_action,
    sanitize_action,
)
from agentgym.envs.families import SEARCH_INVALID_REPLY


@pytest.mark.parametrize(
    ("reply", "env", "action"),
    [
        ("Thought: the ball is ahead.\nAction: go to red ball 1", "babyai", "go to red ball 1"),
        ("Thought:\nturn first.\n\nAction:\nturn left", "babyai", "turn left"),
        ("Action:   move    forward  ", "babyai", "move forward"),
        ("Thought: x\n  Action: Turn Right", "babyai", "turn right"),
        ("thought: x\naction: toggle", "babyai", "toggle"),
        ("ACTION: pick up blue key 1.", "babyai", "pick up blue key 1"),
        ("Thought: x\n**Action:** move forward", "babyai", "move forward"),
        (
            "Thought: need dye.\nAction: craft 1 blue dye using 1 lapis_lazuli!",
            "textcraft",
            "craft 1 blue dye using 1 lapislazuli",
        ),
        ("Action: get 2 oak planks\n\n", "textcraft", "get 2 oak planks"),
        ("Action: look", "textcraft", "inventory"),
        ("Action: search[red shoes]", "webshop", "search[red shoes]"),
        ("Action: `open door to kitchen`", "sciworld", "open door to kitchen"),
    ],
)
def test_single_action_is_extracted_and_sanitised(reply: str, env: str, action: str) -> None:
    parsed = parse_action(reply, env)
    assert parsed.ok
    assert parsed.action == action
    assert parsed.error is None


def test_no_action_line_gives_corrective_observation() -> None:
    parsed = parse_action("Thought: I will go forward now.", "babyai")
    assert not parsed.ok
    assert parsed.action is None
    assert parsed.error == NO_ACTION_MESSAGE


def test_action_inside_a_sentence_is_not_an_action_line() -> None:
    parsed = parse_action("Thought: my next Action: turn left", "babyai")
    assert parsed.error == NO_ACTION_MESSAGE


def test_two_action_lines_are_rejected() -> None:
    parsed = parse_action("Thought: x\nAction: turn left\nAction: turn right", "babyai")
    assert not parsed.ok
    assert parsed.error == MANY_ACTIONS_MESSAGE


def test_two_action_lines_are_rejected_even_when_identical() -> None:
    parsed = parse_action("Action: get 1 stick\naction: get 1 stick", "textcraft")
    assert parsed.error == MANY_ACTIONS_MESSAGE


def test_empty_action_is_rejected() -> None:
    assert parse_action("Thought: x\nAction:", "babyai").error == EMPTY_ACTION_MESSAGE
    assert parse_action("Thought: x\nAction: ?!", "textcraft").error == EMPTY_ACTION_MESSAGE


def test_empty_reply_is_rejected() -> None:
    assert parse_action("", "babyai").error == NO_ACTION_MESSAGE


def test_sanitize_keeps_textcraft_commas_and_digits() -> None:
    raw = "craft 1 golden carrot using 8 gold nugget,  1 carrot"
    want = "craft 1 golden carrot using 8 gold nugget, 1 carrot"
    assert sanitize_action(raw, "textcraft") == want


def test_generic_env_keeps_symbols_but_collapses_whitespace() -> None:
    assert sanitize_action("  click[Buy  Now] ", "webshop") == "click[Buy Now]"


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        (
            "<think>need the capital</think>\n<search> capital of\nFrance </search>",
            "<search>capital of France</search>",
        ),
        ("<answer>Paris</answer> <search>x</search>", "<answer>Paris</answer>"),
        ("<search>oops <answer> Paris </answer>", "<answer>Paris</answer>"),
        ("Action: search it\n<search>q</search>", "<search>q</search>"),
    ],
)
def test_search_replies_use_the_first_complete_tag(reply: str, action: str) -> None:
    assert parse_action(reply, "search") == ParsedAction(action)


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("</search><answer>Paris</answer>", None),
        ("<think>x</search></think><answer>Paris</answer>", None),
        ("<answer>Paris</answer> then </search>", "<answer>Paris</answer>"),
        ("<search>q <answer>x</answer></search>", "<search>q <answer>x</answer></search>"),
    ],
)
def test_search_replies_are_cut_as_search_r1_cuts_them(reply: str, action: str | None) -> None:
    # Search-R1 keeps a reply up to its first </search> (else its first </answer>) and reads
    # the action from that part only.
    want = ParsedAction(action) if action else ParsedAction(None, SEARCH_INVALID_REPLY)
    assert parse_action(reply, "search") == want


def test_search_reply_without_a_tag_gets_agentgyms_corrective_observation() -> None:
    parsed = parse_action("Thought: x\nAction: search France", "search")
    assert parsed == ParsedAction(None, SEARCH_INVALID_REPLY)
    assert parsed.error.startswith("My previous action is invalid.")


@pytest.mark.parametrize("reply_format", ["action_line", "bare"])
def test_the_actor_parses_search_replies_with_the_tags_in_either_format(reply_format: str) -> None:
    from agentgym.actor.episodes import parse_reply

    reply = "<think>" + "long reasoning " * 400 + "</think><search> who </search>"
    assert parse_reply(reply, "search", reply_format) == ParsedAction("<search>who</search>")
    assert parse_reply("no tag", "search", reply_format).error == SEARCH_INVALID_REPLY

"""Per-env instructions ask for the Thought/Action format the parser reads."""

from agentgym.agent.parsing import parse_action
from agentgym.agent.prompts import GENERIC_INSTRUCTION, initial_messages, instruction_for


def test_each_env_has_its_instruction_and_others_fall_back() -> None:
    assert "move forward" in instruction_for("babyai")
    assert "craft" in instruction_for("TextCraft")
    assert instruction_for("webshop") == GENERIC_INSTRUCTION
    assert len({instruction_for("babyai"), instruction_for("textcraft"), GENERIC_INSTRUCTION}) == 3


def test_instructions_describe_the_format_the_parser_accepts() -> None:
    for env in ("babyai", "textcraft", "other"):
        assert "Thought:" in instruction_for(env)
        assert "Action:" in instruction_for(env)


def test_example_reply_in_the_format_parses() -> None:
    assert parse_action("Thought: go.\nAction: move forward", "babyai").action == "move forward"


def test_initial_messages_are_system_then_user() -> None:
    messages = initial_messages("babyai", "Your goal: go to the red ball.")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "Your goal: go to the red ball."

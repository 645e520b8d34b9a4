"""Per-env instructions ask for the Thought/Action format the parser reads; a worked example
shows it once."""

import pytest

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


@pytest.mark.parametrize("env", ["babyai", "textcraft", "search"])
def test_worked_example_sits_between_instruction_and_observation(env) -> None:
    from agentgym.envs.families import family

    messages = initial_messages(env, "OBSERVATION", worked_example=True)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    example_obs, example_reply = family(env).example
    assert messages[1]["content"] == example_obs and messages[3]["content"] == "OBSERVATION"
    parsed = parse_action(example_reply, env)
    assert parsed.ok
    # a listed action; an input; the question's first hop
    acted_on = {
        "babyai": parsed.action,
        "textcraft": "birch logs",
        "search": "Brindsoun Mills",
    }[env]
    assert acted_on in parsed.action
    assert acted_on in example_obs  # the reply acts on what it was shown
    assert initial_messages(env, "OBSERVATION") == [messages[0], messages[3]]


def test_worked_examples_are_observations_the_envs_write() -> None:
    from agentgym.envs import EnvPool
    from agentgym.envs.families import family

    pool = EnvPool("textcraft")
    [obs] = pool.reset(pool.create(1), [3])
    assert family("textcraft").example[0] == obs
    pool = EnvPool("babyai")
    [obs] = pool.reset(pool.create(1), [804])
    assert family("babyai").example[0] == obs


def test_the_search_example_is_the_first_question_of_the_configs_world(tmp_path) -> None:
    from agentgym.envs import EnvPool
    from agentgym.envs.families import family
    from agentgym.envs.search import build_index
    from agentgym.envs.search_data import write_dataset

    write_dataset(tmp_path, seed=0, num_questions=720)  # `agentgym index generate ... 720`
    build_index(tmp_path / "corpus.jsonl", tmp_path / "index", threads=1)
    pool = EnvPool("search", index=tmp_path / "index", qa=tmp_path / "qa.jsonl", topk=1)
    sid = pool.create(1)
    [obs] = pool.reset(sid, [0])
    assert family("search").example[0] == obs
    batch = pool.step(sid, [family("search").example[1]])
    assert 'Title: "Brindsoun Mills"' in batch.observations[0]  # the search finds its first hop


def test_a_family_without_an_example_is_refused() -> None:
    with pytest.raises(ValueError, match="no worked example"):
        initial_messages("webnav", "OBSERVATION", worked_example=True)

"""The planners: TextCraft's crafts goals of every depth, BabyAI's bot solves missions of every
kind of level, and their demos replay as successful episodes in AgentGym's Thought/Action format
that the actor's parser and the dataset reader take."""

from __future__ import annotations

import pytest

from agentgym.agent.demos import demo_episode
from agentgym.agent.parsing import parse_action
from agentgym.envs import EnvPool
from agentgym.envs.planners import parse_textcraft, plan_babyai, plan_textcraft, run_expert

# ids are ordered by depth: 1 (0-124), 2 (125-415), 3 (416-532), 4 (533-543); 440 (crossbow)
# needs an ingredient twice
SAMPLE = (0, 124, 125, 200, 300, 415, 416, 440, 500, 533, 543)


def test_parse_textcraft_reads_recipes_and_goal():
    recipes, goal = parse_textcraft(
        "Crafting commands:\ncraft 4 stick using 2 planks\n"
        "craft 3 spruce fence using 2 stick, 4 spruce planks\n\nGoal: craft spruce fence."
    )
    assert goal == "spruce fence"
    assert recipes[1].count == 3 and recipes[1].ingredients == ((2, "stick"), (4, "spruce planks"))
    with pytest.raises(ValueError, match="Goal"):
        parse_textcraft("craft 4 stick using 2 planks")


def test_plans_craft_the_goal_and_demos_replay_them():
    pool = EnvPool("textcraft")
    depths = set()
    for task in SAMPLE:
        steps = plan_textcraft(pool, task)
        assert steps, task
        record = demo_episode(pool, "textcraft", task, steps)
        assert record["success"] and record["reward"] == 1.0, task
        messages = record["messages"]
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        assert [parse_action(r, "textcraft").action for r in replies] == [s.action for s in steps]
        assert all(r.startswith("Thought: ") for r in replies)
        assert messages[-1]["role"] == "assistant"  # the goal's craft ends the episode
        (sid,) = pool.create(1)
        pool.reset([sid], [task])
        depths.add(pool.info([sid])[0]["depth"])
        pool.close([sid])
    assert depths == {1, 2, 3, 4}


# one task of each kind of mission: go to (maze, locked room, sequence), open, pick up (blocked,
# behind a locked door, behind two), put next to, key corridor, synth and boss levels
BABYAI_SAMPLE = (0, 5, 6, 7, 11, 17, 21, 22, 23, 27, 28, 31, 33, 36, 37, 38, 39, 47, 58, 79)


def test_babyai_bot_demos_succeed_and_replay():
    pool = EnvPool("babyai")
    for task in BABYAI_SAMPLE:
        steps = plan_babyai(pool, task)
        assert steps, (task, run_expert(pool, task).why)
        assert plan_babyai(pool, task) == steps, task  # same task, same demo
        record = demo_episode(pool, "babyai", task, steps)
        assert record["success"] and record["reward"] > 0, task
        replies = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
        assert [parse_action(r, "babyai").action for r in replies] == [s.action for s in steps]
        assert all(r.startswith("Thought: ") and "; I " in r for r in replies), replies
        assert record["messages"][-1]["role"] == "assistant"


def test_babyai_bot_thoughts_state_what_it_sees_and_needs():
    pool = EnvPool("babyai")
    thoughts = [s.thought for s in plan_babyai(pool, 27) or []]  # BlockedUnlockPickup
    assert any("is locked, so I need the" in t for t in thoughts), thoughts
    assert any(t.startswith("My hands are full with the") for t in thoughts), thoughts
    (first,) = [s.thought for s in (plan_babyai(pool, 0) or [])[:1]]  # GoToRedBallGrey
    assert first.startswith(("The red ball is ", "I do not see the red ball yet")), first


def test_babyai_bot_says_why_it_cannot():
    pool = EnvPool("babyai")
    run = run_expert(pool, 25)  # KeyInBox: the text actions cannot open the box with the key
    assert not run.success and not run.steps
    assert "cannot open boxes" in run.why
    assert plan_babyai(pool, 25) is None


def test_expert_batch_from_the_pool():
    pool = EnvPool("babyai")
    ids = pool.create(2)
    pool.reset(ids[:1], [0])
    batch = pool.expert(ids)
    assert len(batch) == 2
    action, thought = batch.moves[0]
    assert action in pool.available_actions(ids[:1])[0] and thought
    assert batch.moves[1] is None and "reset" in batch.errors[1]
    textcraft = EnvPool("textcraft")
    (sid,) = textcraft.create(1)
    textcraft.reset([sid], [0])
    assert textcraft.expert([sid]).errors == ["this env has no expert"]


def test_demos_cli_reports_babyai_levels_with_reasons(tmp_path, capsys):
    import json

    from agentgym.cli.main import main

    out = tmp_path / "demos.jsonl"
    assert main(["demos", "babyai", "--tasks", "0:80", "--out", str(out), "--quiet"]) == 0
    report = capsys.readouterr().out
    assert "level 25" in report and "BabyAI-KeyInBox-v0" in report
    assert "cannot open boxes" in report  # the planner's reason, per level
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) >= 76 and all(r["success"] for r in records)
    assert {r["task_id"] % 40 for r in records} >= set(range(40)) - {15, 25}


def test_demos_cli_keeps_the_named_webnav_templates(tmp_path, capsys):
    import json

    from agentgym.cli.main import main

    out = tmp_path / "demos.jsonl"
    argv = ["demos", "webnav", "--tasks", "0:138", "--templates", "6,30", "--out", str(out)]
    assert main([*argv, "--quiet"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == [6, 30, 52, 76, 98, 122]  # 46 templates a seed
    assert all(r["success"] for r in records)
    with pytest.raises(SystemExit, match=r"--templates 6,46: each must be in \[0, 46\)"):
        main(["demos", "webnav", "--tasks", "0:90", "--templates", "6,46", "--out", str(out)])
    with pytest.raises(SystemExit, match="no task id left"):
        main(["demos", "webnav", "--tasks", "0:5", "--templates", "6", "--out", str(out)])


def test_family_goal_lines():
    from agentgym.envs.families import family

    babyai, textcraft = family("babyai").goal, family("textcraft").goal
    assert babyai("Your goal: go to the red door\nIn front of you ...") == "go to the red door"
    recipes = "Crafting commands:\ncraft 4 stick using 2 planks\n\n"
    assert textcraft(recipes + "Goal: craft stick.") == "craft stick"
    assert babyai("In front of you ...") is None and textcraft("Goal: ") is None
    assert family("search").goal is None and family("unknown-env").goal is None


@pytest.mark.parametrize(
    "env,task,plan", [("babyai", 3, plan_babyai), ("textcraft", 200, plan_textcraft)]
)
def test_goal_in_thought_restates_the_goal_line_and_keeps_the_actions(env, task, plan):
    pool = EnvPool(env)
    steps = plan(pool, task)
    plain = demo_episode(pool, env, task, steps)
    restated = demo_episode(pool, env, task, steps, goal_in_thought=True)
    first = plain["messages"][1]["content"]
    line = next(line for line in first.splitlines() if "oal: " in line)
    goal = line.split("oal: ", 1)[1].rstrip(".")
    replies = [m["content"] for m in restated["messages"] if m["role"] == "assistant"]
    before = [m["content"] for m in plain["messages"] if m["role"] == "assistant"]
    assert replies == [r.replace("Thought: ", f"Thought: My goal: {goal}. ", 1) for r in before]
    assert [parse_action(r, env).action for r in replies] == [s.action for s in steps]
    assert restated["success"] and restated["reward"] == plain["reward"]
    assert [m for m in restated["messages"] if m["role"] != "assistant"] == [
        m for m in plain["messages"] if m["role"] != "assistant"
    ]


def test_goal_in_thought_is_refused_without_a_goal_line(tmp_path):
    from agentgym.cli.main import main

    out = tmp_path / "demos.jsonl"
    with pytest.raises(SystemExit, match="search states no goal line"):
        main(["demos", "search", "--goal-in-thought", "--out", str(out)])
    with pytest.raises(SystemExit, match="webnav's family has no worked example"):
        main(["demos", "webnav", "--worked-example", "--out", str(out)])
    assert not out.exists()
    with pytest.raises(ValueError, match="search: the env family states no goal line"):
        demo_episode(EnvPool("textcraft"), "search", 0, [], goal_in_thought=True)
    with pytest.raises(ValueError, match="babyai task 0: no goal line in the first observation"):
        # a TextCraft world read with BabyAI's rules
        demo_episode(EnvPool("textcraft"), "babyai", 0, [], goal_in_thought=True)
    assert not out.exists()


def test_demos_cli_states_a_bad_env_option_without_a_traceback(tmp_path):
    from agentgym.cli.main import main

    with pytest.raises(SystemExit, match='agentgym demos search: invalid option "qa"'):
        main(["demos", "search", "--out", str(tmp_path / "d.jsonl")])


def test_demos_with_the_worked_example_open_as_the_actors_do():
    from agentgym.agent.prompts import initial_messages

    pool = EnvPool("babyai")
    steps = plan_babyai(pool, 0)
    record = demo_episode(pool, "babyai", 0, steps, worked_example=True)
    (obs,) = pool.reset(pool.create(1), [0])
    opening = initial_messages("babyai", obs, worked_example=True)
    assert [m["content"] for m in record["messages"][:4]] == [m["content"] for m in opening]
    assert record["messages"][2]["loss"] is False  # the example's reply is prompt
    assert record["success"] and record["num_turns"] == len(steps)
    plain = demo_episode(pool, "babyai", 0, steps)
    assert plain["messages"][2:] == record["messages"][4:]

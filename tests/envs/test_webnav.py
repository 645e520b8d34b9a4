"""The webnav env through the Python surface: episodes, the expert across templates, ids in
view, bad input, options, and the family's reply parser and eval grouping."""

from __future__ import annotations

import re

import pytest

from agentgym.envs import EnvPool
from agentgym.envs.families import TASK_FILTERS, WEBNAV_INVALID_REPLY, family, parse_webnav_reply
from agentgym.envs.planners import run_expert

NUM_TEMPLATES = TASK_FILTERS["templates"].modulus  # the Rust env's count, checked below

SITES = ("shop", "forum", "code")
_ID_LINE = re.compile(r"^\t*\[(\d+)\] (\w+) '")


def test_reset_and_step_lay_out_webarenas_observation() -> None:
    pool = EnvPool("webnav")
    assert pool.num_tasks == NUM_TEMPLATES * 10_000
    (sid,) = pool.create(1)
    (obs,) = pool.reset([sid], [0])
    assert obs.startswith("OBSERVATION:\nTab 0 (current): ")
    assert "\n[1] RootWebArea '" in obs and "focused: True" in obs
    assert re.search(r"\nURL: http://shop\.test/\nOBJECTIVE: .+\nPREVIOUS ACTION: None$", obs)
    batch = pool.step([sid], ["click [3]"])
    assert batch.ok and not batch.dones[0] and batch.rewards[0] == 0.0
    assert "URL: http://shop.test/account" in batch.observations[0]
    assert batch.observations[0].endswith(
        "PREVIOUS ACTION: click [3] where [3] is link 'My Account'"
    )


def test_same_task_same_episode() -> None:
    a, b = EnvPool("webnav", threads=1), EnvPool("webnav", threads=2)
    tasks = [0, 17, 45, 299_999]
    obs_a = a.reset(a.create(4), tasks)
    obs_b = b.reset(b.create(4), tasks)
    assert obs_a == obs_b
    assert len(set(obs_a)) == 4


def test_the_expert_solves_every_template() -> None:
    pool = EnvPool("webnav")
    for task in range(2 * NUM_TEMPLATES):
        run = run_expert(pool, task, max_turns=60)
        assert run.success, (task, run.why, [s.action for s in run.steps])
        (sid,) = pool.create(1)
        pool.reset([sid], [task])
        assert pool.info([sid])[0]["difficulty"] == len(run.steps)
        pool.close([sid])


def test_info_and_eval_grouping() -> None:
    pool = EnvPool("webnav")
    sids = pool.create(NUM_TEMPLATES)
    pool.reset(sids, list(range(NUM_TEMPLATES)))
    infos = pool.info(sids)
    assert {i["site"] for i in infos} == set(SITES)
    assert {i["kind"] for i in infos} == {"information_seeking", "navigation", "state_change"}
    assert len({i["template"] for i in infos}) == NUM_TEMPLATES
    rules = family("webnav")
    groups = {rules.group("webnav", t, info) for t, info in enumerate(infos)}
    assert groups == {
        f"{s}/{k}" for s in SITES for k in ("information_seeking", "navigation", "state_change")
    }
    assert all(i["difficulty"] >= 2 and i["intent"] for i in infos)


# An option of each combobox: the shop's Sort By, the code host's Role and Label.
_OPTIONS = {"Sort By": "Price", "Role": "Developer", "Label": "bug"}


def _probe(line: str) -> str | None:
    """The action that uses the node of an observation line: type into fields (an option into
    a combobox), click the rest."""
    match = _ID_LINE.match(line)
    if match is None:
        return None
    node, role = match.groups()
    if role == "combobox":
        name = line.split("'")[1]
        return f"type [{node}] [{_OPTIONS[name]}] [0]"
    return f"type [{node}] [2] [0]" if role in ("textbox", "searchbox") else f"click [{node}]"


def test_every_id_in_view_is_actionable() -> None:
    pool = EnvPool("webnav")
    for task in range(NUM_TEMPLATES):
        (sid,) = pool.create(1)
        (obs,) = pool.reset([sid], [task])
        history: list[str] = []
        for _ in range(3):
            probes = [p for p in map(_probe, obs.splitlines()) if p]
            # Each probe in its own copy of the episode: replay the history, then act once.
            copies = pool.create(len(probes))
            pool.reset(copies, [task] * len(copies))
            for action in history:
                pool.step(copies, [action] * len(copies))
            batch = pool.step(copies, probes)
            for probe, after in zip(probes, batch.observations, strict=True):
                assert "FEEDBACK" not in after, (task, probe, after[-300:])
            pool.close(copies)
            (move,) = pool.expert([sid]).moves
            if move is None or move[0].startswith("stop"):
                break
            history.append(move[0])
            (obs,) = pool.step([sid], [move[0]]).observations


BAD_INPUT = [
    ("", "is not valid"),
    ("click [100000]", "no element [100000]"),
    ("type [2] [text]", "cannot be typed into"),
    ("press [Hyper+q]", "not a key combination"),
    ("goto [https://example.com/]", "outside the websites"),
    ("goto [http://code.test/]", "not part of this task"),
    ("tab_focus [4]", "no tab 4"),
    ("close_tab", "cannot be closed"),
    ("go_back", "no previous page"),
    ("scroll [left]", "scroll takes"),
    ("stop [" + "x" * 300 + "]", "too long"),
]


@pytest.mark.parametrize(("action", "feedback"), BAD_INPUT)
def test_bad_input_gets_feedback(action: str, feedback: str) -> None:
    pool = EnvPool("webnav")
    (sid,) = pool.create(1)
    pool.reset([sid], [0])
    batch = pool.step([sid], [action])
    assert batch.errors[0] is None and not batch.dones[0]
    assert "\nFEEDBACK: " in batch.observations[0] and feedback in batch.observations[0]


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="colour"):
        EnvPool("webnav", colour="red")
    with pytest.raises(ValueError, match="viewport"):
        EnvPool("webnav", viewport=1)
    pool = EnvPool("webnav", viewport=8, num_seeds=2, max_answer_len=5)
    assert pool.num_tasks == 2 * NUM_TEMPLATES
    (sid,) = pool.create(1)
    (obs,) = pool.reset([sid], [0])
    assert sum(bool(_ID_LINE.match(line)) for line in obs.splitlines()) == 9
    assert "(content below" in obs
    assert "too long" in pool.step([sid], ["stop [123456]"]).observations[0]


def test_a_wrong_answer_ends_with_reward_zero() -> None:
    pool = EnvPool("webnav")
    (sid,) = pool.create(1)
    pool.reset([sid], [0])
    batch = pool.step([sid], ["stop [$0.01]"])
    assert batch.dones[0] and batch.rewards[0] == 0.0
    assert pool.info([sid])[0]["success"] is False


REPLIES = [
    ("Let's think. In summary, the next action I will perform is ```click [12]```", "click [12]"),
    (
        "the NEXT ACTION I WILL PERFORM IS ```type [3] [blue kettle] [1]```",
        "type [3] [blue kettle] [1]",
    ),
    # WebArena's re.search: the first block anywhere, even before the summary phrase.
    (
        "I saw ```click [1]```. In summary, the next action I will perform is ```scroll [down]```",
        "click [1]",
    ),
    ("```click [1]``` then ```click [2]```", "click [1]"),
    ("In summary, the next action I will perform is\n```\nstop [$12.99]\n```", "stop [$12.99]"),
    ("the next action I will perform is ```text\ngo_back```", "go_back"),
    (
        "Earlier: the next action I will perform is ```click [5]```. Now I think ```click [6]```",
        "click [5]",
    ),
    ("```click [7] to open it``` and more", "click [7] to open it"),
]


@pytest.mark.parametrize(("reply", "action"), REPLIES)
def test_parse_reply_takes_the_first_block(reply: str, action: str) -> None:
    assert parse_webnav_reply(reply) == (action, None)


@pytest.mark.parametrize(
    "reply", ["click [12]", "the next action I will perform is click [3]", "``` ```", ""]
)
def test_a_reply_without_an_action_gets_a_correction(reply: str) -> None:
    assert parse_webnav_reply(reply) == (None, WEBNAV_INVALID_REPLY)


def test_demo_replies_parse_back() -> None:
    rules = family("webnav")
    reply = rules.format_reply("The search box finds it.", "type [6] [acme kettle] [1]")
    assert rules.parse_reply(reply) == ("type [6] [acme kettle] [1]", None)


def test_actions_webarenas_parser_accepts_are_taken() -> None:
    pool = EnvPool("webnav")
    (sid,) = pool.create(1)
    pool.reset([sid], [0])
    # WebArena's own prompt example, a scroll without brackets, text after complete actions.
    for action in [
        "press [Ctrl+v]",
        "scroll down",
        "scroll [up] again",
        "new_tab [1]",
        "close_tab now",
    ]:
        obs = pool.step([sid], [action]).observations[0]
        assert "FEEDBACK" not in obs, (action, obs)
    obs = pool.step([sid], ["click [3] to see my account"]).observations[0]
    assert "URL: http://shop.test/account" in obs and "FEEDBACK" not in obs


def test_answers_are_as_strict_as_webarenas_exact_match() -> None:
    pool = EnvPool("webnav")
    ids = pool.create(2)
    pool.reset(ids, [0, 0])  # a price question
    for _ in range(20):
        action = pool.expert(ids[:1]).moves[0][0]
        if action.startswith("stop ["):
            break
        pool.step(ids, [action, action])
    answer = action[len("stop [") : -1]
    assert answer.startswith("$")
    batch = pool.step(ids, [f"stop [ '{answer.upper()}' ]", f"stop [{answer[1:]}]"])
    assert batch.dones.all() and batch.rewards.tolist() == [1.0, 0.0]

"""The search env agrees with Search-R1's definitions (the Python reference): rewards on a table of
tricky answers (articles, punctuation, unicode, numbers, whitespace, yes/no) and the action it
reads from random replies."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from agentgym.envs import EnvPool
from agentgym.envs.families import SEARCH_INVALID_REPLY
from agentgym.envs.reference import search_r1
from agentgym.envs.search import build_index

# (answer, gold answers)
CASES: list[tuple[str, list[str]]] = [
    ("The Eiffel Tower", ["Eiffel Tower"]),
    ("eiffel tower.", ["the Eiffel Tower"]),
    ("An apple a day", ["apple day"]),
    ("Theatre", ["atre"]),
    ("the_end", ["theend"]),
    ("U.S.A.", ["USA"]),
    ("Don't stop", ["dont stop"]),
    ("1,000,000", ["1000000"]),
    ("3.14", ["314"]),
    ("3.14", ["3 14"]),
    ("Zürich", ["ZÜRICH"]),
    ("Zurich", ["Zürich"]),
    ("l’été", ["l'été"]),
    ("Rock–Paper", ["rock paper"]),
    ("tab\tand\nnewline", ["tab and newline"]),
    ("non\u00a0breaking", ["non breaking"]),
    ("ΣΊΣΥΦΟΣ", ["σίσυφος"]),
    ("President Barack Obama", ["Barack Obama", "Obama"]),
    ("new york city", ["New York", "NYC"]),
    ("the the cat", ["cat cat"]),
    ("yes", ["no"]),
    ("yes it is", ["yes"]),
    ("no", ["No."]),
    ("a", ["the"]),
    ("Lyon", ["Paris", "Marseille"]),
    ("1st of May, 1990", ["May 1, 1990", "1 May 1990"]),
    # Combining marks and circled letters are not word characters for Python's `re`: the
    # article before one stands alone and goes.
    ("a\u0901 answer", ["\u0901 answer"]),
    ("The\u093e", ["\u093e"]),
    ("theⓐ", ["ⓐ"]),
    ("an\u0301", ["\u0301"]),
]

SCORERS = {
    "em": search_r1.exact_match,
    "subem": search_r1.substring_match,
    "f1": search_r1.token_f1,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("rewards")
    corpus = out / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "0", "contents": '"T"\nsome text'}) + "\n")
    build_index(corpus, out / "index", threads=1)
    qa = out / "qa.jsonl"
    rows = [{"question": f"case {i}", "golden_answers": g} for i, (_, g) in enumerate(CASES)]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out / "index", qa


@pytest.mark.parametrize("reward", sorted(SCORERS))
def test_rewards_match_search_r1(data: tuple[Path, Path], reward: str) -> None:
    index, qa = data
    pool = EnvPool("search", index=index, qa=qa, reward=reward)
    ids = pool.create(len(CASES))
    pool.reset(ids, list(range(len(CASES))))
    batch = pool.step(ids, [f"<answer>{answer}</answer>" for answer, _ in CASES])
    assert batch.dones.all()
    infos = pool.info(ids)
    for (answer, gold), got, info in zip(CASES, batch.rewards, infos, strict=True):
        want = SCORERS[reward](answer, gold)
        assert got == pytest.approx(want, abs=1e-6), (reward, answer, gold)
        assert (info["matched"] is None) == (want == 0.0), (answer, info)


def test_the_reference_normaliser_on_known_values() -> None:
    assert search_r1.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert search_r1.normalize_answer("An an a") == ""
    assert search_r1.normalize_answer("l’été") == "l’été"


FRAGMENTS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", " ",
             "\n", "Paris", "capital", "x", "<", ">", "/", "search", "answer"]  # fmt: skip


def test_replies_are_read_as_search_r1_reads_them(data: tuple[Path, Path]) -> None:
    # Random replies from tag fragments, each stepped once; what the env did (searched, answered
    # what, or found no action) is Search-R1's reading of the reply.
    index, qa = data
    rng = random.Random(35)
    replies = ["</search><answer>Paris</answer>", "<answer>Paris</answer></search>"]
    replies += ["".join(rng.choices(FRAGMENTS, k=rng.randint(1, 12))) for _ in range(3000)]
    pool = EnvPool("search", index=index, qa=qa, max_turns=2)
    ids = pool.create(len(replies))
    pool.reset(ids, [0] * len(replies))
    batch = pool.step(ids, replies)
    for reply, obs, done, info in zip(
        replies, batch.observations, batch.dones, pool.info(ids), strict=True
    ):
        want = search_r1.reply_action(reply)
        if want is None:
            got = None if obs == SEARCH_INVALID_REPLY else ("?", obs)
        elif done:
            got = ("answer", info["answer"])
        else:
            got = ("search", want[1])  # the query is not in the info; its kind is
        assert got == want, reply

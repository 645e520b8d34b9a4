"""The search env's rewards agree with Search-R1's definition (the Python reference) on a table of
tricky answers: articles, punctuation, unicode, numbers, whitespace, yes/no."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.envs import EnvPool
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

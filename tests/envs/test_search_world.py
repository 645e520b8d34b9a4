"""The generated search world's options: one-hop questions mixed in, and a held-out block whose
chains share no entity with the earlier questions; the check that finds shared entities, and
the one-hop scripted baseline on that world."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentgym.cli.main import main
from agentgym.envs.search_data import generate, read_dataset, shared_entities, write_dataset


def test_one_hop_share_is_spread_evenly_and_needs_one_search():
    data = generate(0, 40, one_hop=0.5)
    kinds = [q["data_source"] for q in data.questions]
    assert Counter(kinds) == {"chain1": 20, "chain2": 10, "chain3": 10}
    assert all("chain1" in kinds[k : k + 2] for k in range(0, 40, 2))  # one in each pair
    for q in data.questions:
        if q["data_source"] == "chain1":
            person = str(q["question"]).removeprefix("In which city was ").removesuffix(" born?")
            [doc] = [d for d in data.corpus if d["contents"].startswith(f'"{person}"')]
            assert f"born in {q['golden_answers'][0]} in" in doc["contents"]


def test_without_options_the_world_is_unchanged_by_them():
    plain = generate(5, 30)
    assert generate(5, 30, one_hop=0.0, held_out=0) == plain
    assert {q["data_source"] for q in plain.questions} == {"chain2", "chain3"}


def test_a_held_out_block_shares_no_entity_and_the_default_world_does():
    mixed = generate(0, 200, one_hop=0.5, held_out=80)
    assert shared_entities(mixed, range(0, 120), range(120, 200)) == {}
    example = str(mixed.questions[0]["question"])
    assert shared_entities(mixed, range(0, 120), range(120, 200), example) == {}
    # Inside the training block entities do repeat, and the check finds them.
    assert shared_entities(mixed, range(0, 60), range(60, 120))
    plain = generate(0, 200)
    shared = shared_entities(plain, range(0, 120), range(120, 200))
    assert len(shared) > 40
    answers = {a for q in plain.questions[:120] for a in q["golden_answers"]}
    k = next(k for k in shared if plain.questions[k]["golden_answers"][0] in answers)
    assert plain.questions[k]["golden_answers"][0] in shared[k]


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="one_hop must be a share"):
        generate(0, 10, one_hop=1.5)
    with pytest.raises(ValueError, match="held_out must be in 0..10"):
        generate(0, 10, held_out=11)


def test_index_check_reports_and_fails_when_strict(tmp_path, capsys):
    assert main(["index", "generate", str(tmp_path / "m"), "--questions", "60", "--one-hop",
                 "0.5", "--held-out", "20"]) == 0  # fmt: skip
    assert main(["index", "check", str(tmp_path / "m"), "--train", "0:40", "--eval", "40:60",
                 "--strict"]) == 0  # fmt: skip
    assert "0 of 20 held-out questions share an entity" in capsys.readouterr().out
    write_dataset(tmp_path / "p", seed=0, num_questions=60)
    assert main(["index", "check", str(tmp_path / "p"), "--train", "0:40", "--eval", "40:60",
                 "--strict"]) == 1  # fmt: skip
    assert "of 20 held-out questions share an entity" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="past the 60 questions"):
        main(["index", "check", str(tmp_path / "p"), "--train", "0:40", "--eval", "40:61"])
    with pytest.raises(SystemExit, match="overlap"):
        main(["index", "check", str(tmp_path / "p"), "--train", "0:40", "--eval", "30:60"])
    with pytest.raises(SystemExit, match="generate: held_out"):
        main(["index", "generate", str(tmp_path / "x"), "--questions", "5", "--held-out", "6"])
    assert len(read_dataset(tmp_path / "m").questions) == 60


def test_the_one_hop_rule_solves_chain1_only(tmp_path):
    from agentgym.agent.baselines import parse_policy, play
    from agentgym.envs import EnvPool
    from agentgym.envs.search import build_index

    write_dataset(tmp_path, seed=0, num_questions=24, one_hop=0.5, held_out=8)
    build_index(tmp_path / "corpus.jsonl", tmp_path / "index", threads=1)
    rows = [json.loads(x) for x in (tmp_path / "qa.jsonl").read_text().splitlines()]
    pool = EnvPool("search", index=tmp_path / "index", qa=tmp_path / "qa.jsonl", topk=1)
    levels = {k: row["data_source"] for k, row in enumerate(rows)}
    episodes = play(pool, "search", parse_policy("scripted"), list(range(24)), 5, levels)
    by_kind: dict[str, list[bool]] = {}
    for row, episode in zip(rows, episodes, strict=True):
        by_kind.setdefault(row["data_source"], []).append(episode["success"])
    assert all(by_kind["chain1"]) and len(by_kind["chain1"]) == 12
    assert not any(by_kind["chain2"] + by_kind["chain3"])

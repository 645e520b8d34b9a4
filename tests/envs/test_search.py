"""The search env through the Python surface: the generated world, index building, episodes
played by a scripted searcher, bad input, and BM25 ranking against bm25s."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from agentgym.envs import EnvPool
from agentgym.envs.families import SEARCH_INVALID_REPLY, family
from agentgym.envs.search import SearchIndex, build_index
from agentgym.envs.search_data import generate, write_dataset


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The generated world of seed 0, written and indexed once for the module."""
    out = tmp_path_factory.mktemp("search-world")
    data = write_dataset(out, seed=0, num_questions=60)
    report = build_index(out / "corpus.jsonl", out / "index", threads=2)
    assert report.passages == len(data.corpus) and report.skipped == 0
    return {"corpus": out / "corpus.jsonl", "qa": out / "qa.jsonl", "index": out / "index"}


def test_generated_world_is_deterministic(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        write_dataset(tmp_path / name, seed=seed, num_questions=20)
    for file in ("corpus.jsonl", "qa.jsonl"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
        assert (tmp_path / "a" / file).read_bytes() != (tmp_path / "c" / file).read_bytes()
    data = generate(3, 20)
    assert len(data.questions) == 20
    assert {q["data_source"] for q in data.questions} == {"chain2", "chain3"}


def test_no_passage_names_both_ends_of_a_chain() -> None:
    data = generate(0, 60)
    for q in data.questions:
        start = re.search(r"of (.+) born\?$", str(q["question"])).group(1)
        for doc in data.corpus:
            if start in doc["contents"]:
                assert not any(a in doc["contents"] for a in q["golden_answers"]), q


def _solve(pool: EnvPool, sid: int, question: str) -> tuple[float, int]:
    """Plays one episode the way a perfect reader would: follow the chain, one search a hop."""
    entity = re.search(r"of (.+) born\?$", question).group(1)
    hops = [r"(?:founded by|novel by) ([A-Z]\w+ [A-Z]\w+)", r"born in ([A-Z]\w+)"]
    if "country" in question:
        hops.append(r"is a city in ([A-Z]\w+)")
    for pattern in hops:
        batch = pool.step([sid], [f"<think>next hop</think><search>{entity}</search>"])
        info = batch.observations[0]
        assert info.startswith("<information>Doc 1(Title: "), info
        doc = next(d for d in info.split("\n") if f'Title: "{entity}")' in d)
        entity = re.search(pattern, doc).group(1)
    batch = pool.step([sid], [f"<answer>{entity}</answer>"])
    assert batch.dones[0]
    return float(batch.rewards[0]), len(hops)


def test_a_scripted_searcher_answers_every_question(world: dict[str, Path]) -> None:
    pool = EnvPool("search", index=world["index"], qa=world["qa"], topk=3, threads=2)
    rows = [json.loads(line) for line in world["qa"].read_text().splitlines()]
    assert pool.num_tasks == len(rows)
    sids = pool.create(len(rows))
    pool.reset(sids, list(range(len(rows))))
    for task, (sid, row) in enumerate(zip(sids, rows, strict=True)):
        reward, searches = _solve(pool, sid, row["question"])
        assert reward == 1.0, (task, row)
        assert searches == (3 if row["data_source"] == "chain3" else 2)
        info = pool.info([sid])[0]
        assert info["matched"] == row["golden_answers"][0] and info["searches"] == searches


def test_invalid_replies_get_agentgyms_observation(world: dict[str, Path]) -> None:
    pool = EnvPool("search", index=world["index"], qa=world["qa"], max_turns=2)
    (sid,) = pool.create(1)
    pool.reset([sid], [0])
    batch = pool.step([sid], ["I would rather not search."])
    assert batch.observations[0] == SEARCH_INVALID_REPLY and not batch.dones[0]
    batch = pool.step([sid], ["<answer>nowhere</answer>"])
    assert batch.dones[0] and batch.rewards[0] == 0.0
    assert pool.info([sid])[0]["matched"] is None


def test_same_task_same_episode(world: dict[str, Path]) -> None:
    def play(pool: EnvPool) -> list[str]:
        sids = pool.create(4)
        first = pool.reset(sids, [0, 1, 2, 3])
        batch = pool.step(sids, ["<search>river city</search>"] * 4)
        return first + batch.observations

    a = EnvPool("search", index=world["index"], qa=world["qa"], topk=5, threads=1)
    b = EnvPool("search", index=world["index"], qa=world["qa"], topk=5, threads=2)
    assert play(a) == play(b)


def test_eval_groups_by_data_source(world: dict[str, Path]) -> None:
    pool = EnvPool("search", index=world["index"], qa=world["qa"])
    (sid,) = pool.create(1)
    pool.reset([sid], [0])
    info = pool.info([sid])[0]
    assert family("search").group("search", 0, info) in ("chain2", "chain3")


def test_bad_options_and_data_are_refused(world: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="qa"):
        EnvPool("search", index=world["index"])
    with pytest.raises(ValueError, match="not an agentgym search index"):
        EnvPool("search", index=tmp_path, qa=world["qa"])
    bad_qa = tmp_path / "qa.jsonl"
    bad_qa.write_text('{"question": "q", "golden_answers": ["a"]}\n{"question": "no answers"}\n')
    with pytest.raises(ValueError, match="line 2"):
        EnvPool("search", index=world["index"], qa=bad_qa)
    with pytest.raises(ValueError, match="reward"):
        EnvPool("search", index=world["index"], qa=world["qa"], reward="bleu")


def test_build_counts_bad_lines_and_refuses_a_full_directory(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    good = json.dumps({"id": "a", "contents": '"A"\nalpha text'})
    corpus.write_text(f"{good}\nnot json\n{{}}\n{good}\n")
    seen = []
    report = build_index(corpus, tmp_path / "index", progress=lambda *p: seen.append(p))
    assert (report.passages, report.skipped) == (2, 2)
    assert [line for line, _ in report.first_skipped] == [2, 3]
    assert seen and seen[-1][0] == seen[-1][1] == corpus.stat().st_size
    with pytest.raises(OSError, match="not empty"):
        build_index(corpus, tmp_path / "index")


def test_a_raising_progress_callback_cancels_the_build(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text((json.dumps({"id": "a", "contents": '"A"\nalpha'}) + "\n") * 10_001)

    def stop(*_: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, tmp_path / "index", progress=stop)
    with pytest.raises(ValueError, match="not an agentgym search index"):
        SearchIndex(str(tmp_path / "index"))


def _tokens(text: str) -> list[str]:
    """The index's tokenizer in Python: alphanumeric runs under 40 bytes, lower-cased."""
    return [t.lower() for t in re.findall(r"[^\W_]+", text) if len(t.encode()) < 40]


def test_top10_agrees_with_bm25s(world: dict[str, Path]) -> None:
    """Same BM25 (k1 1.2, b 0.75, Lucene's idf) and tokens: top-10 sets should agree up to ties;
    tantivy stores document lengths in one byte (exact below 40 tokens, then a log-like scale),
    which can move near-tied passages across the cut of a longer corpus."""
    bm25s = pytest.importorskip("bm25s")
    docs = [json.loads(line) for line in world["corpus"].read_text().splitlines()]
    rng = random.Random(0)
    queries = [json.loads(line)["question"] for line in world["qa"].read_text().splitlines()]
    while len(queries) < 2000:
        words = _tokens(rng.choice(docs)["contents"])
        queries.append(" ".join(rng.sample(words, min(len(words), rng.randrange(1, 6)))))
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index([_tokens(d["contents"]) for d in docs], show_progress=False)
    index = SearchIndex(str(world["index"]))
    ours = index.search(queries, 10)
    vocab = set(retriever.vocab_dict)
    overlaps = []
    for q, hits in zip(queries, ours, strict=True):
        terms = sorted(set(_tokens(q)))
        assert terms == index.query_terms(q)
        known = [t for t in terms if t in vocab]
        if not known:
            assert hits == []
            continue
        scores = retriever.get_scores(known)
        best = sorted((float(x) for x in scores if x > 0), reverse=True)[:10]
        assert len(hits) == len(best)
        # The generated passages share templates, so many score exactly alike: one of our hits
        # agrees when bm25s scores it at least as high as its own 10th best.
        row = {d["id"]: i for i, d in enumerate(docs)}
        agree = sum(float(scores[row[h]]) >= best[-1] * (1 - 1e-4) for h, _ in hits)
        overlaps.append(agree / len(hits))
    mean = sum(overlaps) / len(overlaps)
    print(f"top-10 agreement with bm25s: {mean:.4f} over {len(overlaps)} queries")
    assert mean >= 0.95, mean


def test_index_cli_generates_builds_and_reports_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgym.cli.main import main

    assert main(["index", "generate", str(tmp_path / "w"), "--questions", "10"]) == 0
    corpus = tmp_path / "w" / "corpus.jsonl"
    with corpus.open("a") as f:
        f.write('{"id": "x"}\n')
    assert main(["index", "build", str(corpus), str(tmp_path / "index"), "--threads", "1"]) == 0
    out = capsys.readouterr()
    assert "1 lines skipped" in out.out and "skipped line " in out.out
    assert "100.0%" in out.err
    with pytest.raises(SystemExit, match="not empty"):
        main(["index", "build", str(corpus), str(tmp_path / "index")])


def test_the_expert_demos_solve_every_question(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentgym demos search``: the expert follows each question's chain (2 or 3 searches,
    each copying a name the question or the last passages show), then answers; tags hold their
    content between spaces, as Search-R1's prompt writes them."""
    from agentgym.cli.main import main

    out = tmp_path / "demos.jsonl"
    options = ["-o", f"index={world['index']}", "-o", f"qa={world['qa']}", "-o", "topk=2"]
    assert main(["demos", "search", "--tasks", "0:60", *options, "--out", str(out)]) == 0
    assert "all             60     60  100.0%" in capsys.readouterr().out
    for line in out.read_text().splitlines():
        record = json.loads(line)
        messages = record["messages"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        searches = 3 if "country" in messages[1]["content"] else 2
        assert record["success"] and len(replies) == searches + 1
        for seen, reply in zip(messages[1::2], replies, strict=True):
            thought, tag = re.fullmatch(
                r"<think>(.*)</think>\n<(?:search|answer)> (.*) </.*>", reply
            ).groups()
            # After a space where it is copied from too: the same tokens in both places.
            assert f" {tag}" in seen["content"], (tag, seen["content"])
            assert tag not in thought


def test_the_expert_says_why_when_top_k_hides_the_next_name(world: dict[str, Path]) -> None:
    pool = EnvPool("search", index=world["index"], qa=world["qa"], topk=1)
    (sid,) = pool.create(1)
    pool.reset([sid], [0])
    pool.step([sid], ["<search>river city</search>"])  # not the chain's first passage
    pool.step([sid], [pool.expert([sid]).moves[0][0]])  # the expert's first search
    assert pool.expert([sid]).moves[0] is not None
    pool.step([sid], ["<search>zzzz</search>"])  # the passage naming the next hop is gone
    expert = pool.expert([sid])
    assert expert.moves[0] is None and "does not show" in expert.errors[0]

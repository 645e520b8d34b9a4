"""A generated world for the search env: a small corpus and multi-hop questions over it.

Nothing can be downloaded here, and real QA sets test what a model already knows as much as how
it searches. This world is invented (names built from syllables), so a question can only be
answered by searching, and each question is an entity chain that needs 2 or 3 searches:

- ``chain2``: "In which city was the founder of <company> born?" (company -> founder -> city)
- ``chain3``: "In which country was the author of <book> born?" (book -> author -> city -> country)

Every fact lives in exactly one passage (Search-R1's ``{"id", "contents": "\\"Title\\"\\ntext"}``
format), and the passage about an entity never names the answer of a question that starts there.
People, cities and countries that no question asks about are in the corpus as distractors. The
same seed gives the same files, byte for byte, on every machine.

The questions go into one QA file (task id = row). Each question is drawn on its own, so the
world has no split of its own: a config's ``tasks.train`` and ``tasks.eval`` ranges of rows split
it (``configs/search-quickstart.yaml`` trains on 0..320 and holds out 320..720).

Two options change the world (both off by default, which keeps the default world's bytes):

- ``one_hop``: that share of the questions, spread evenly over the rows, need one search
  (``chain1``: "In which city was <person> born?"), so a model that gets the first hop right
  but not the second still finds rewards to learn from.
- ``held_out``: the last ``held_out`` questions draw their cities and countries from pools of
  their own. Without it, cities and countries repeat across questions (about 4 questions per
  city, 20 per country), so a held-out answer is often a training answer too. With it, no
  held-out question's chain (its subject, person, city and country) shares an entity with an
  earlier question's; ``shared_entities`` checks any split of any world, and the worked example
  too.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "kl",
    "st",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"]
_CODAS = ["", "", "n", "r", "s", "l", "th", "nd", "sk"]
_PROFESSIONS = ["painter", "engineer", "chemist", "poet", "architect", "sailor", "composer"]
_NOUNS = ["Orchard", "Lantern", "Harbor", "Mirror", "Garden", "Compass", "Tower", "River"]
_ADJECTIVES = ["Glass", "Silent", "Copper", "Hidden", "Winter", "Crimson", "Hollow", "Amber"]
_INDUSTRIES = ["shipbuilding", "textiles", "printing", "glassworks", "clockmaking", "brewing"]


@dataclass(frozen=True)
class SearchDataset:
    """A generated corpus and its questions (task id = position in ``questions``)."""

    corpus: list[dict[str, str]]
    questions: list[dict[str, object]]


class _Names:
    """Unique invented names drawn from one random stream."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        while True:
            parts = [
                self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                for _ in range(syllables)
            ]
            word = "".join(parts).capitalize()
            if word not in self.used:
                self.used.add(word)
                return word

    def person(self) -> str:
        return f"{self.word(2)} {self.word(2)}"


def generate(
    seed: int = 0,
    num_questions: int = 200,
    num_distractors: int = 60,
    *,
    one_hop: float = 0.0,
    held_out: int = 0,
) -> SearchDataset:
    """The world of ``seed``: the multi-hop questions alternate between 2 and 3 searches;
    ``one_hop`` and ``held_out``: see the module docstring."""
    if not 0.0 <= one_hop <= 1.0:
        raise ValueError(f"one_hop must be a share in [0, 1], got {one_hop}")
    if not 0 <= held_out <= num_questions:
        raise ValueError(f"held_out must be in 0..{num_questions}, got {held_out}")
    rng = random.Random(seed)
    names = _Names(rng)

    def places(questions: int) -> tuple[list[str], list[tuple[str, str]]]:
        """Countries and (city, country) pairs for ``questions`` questions."""
        countries = [names.word(3) for _ in range(max(4, questions // 20))]
        cities = [(names.word(3), rng.choice(countries)) for _ in range(max(8, questions // 4))]
        return countries, cities

    drawn = [places(num_questions - held_out)] + ([places(held_out)] if held_out else [])
    countries = [country for pool, _ in drawn for country in pool]
    pools = [cities for _, cities in drawn]
    corpus: list[dict[str, str]] = []
    questions: list[dict[str, object]] = []

    def passage(title: str, text: str) -> None:
        corpus.append({"id": str(len(corpus)), "contents": f'"{title}"\n{text}'})

    def person_passage(name: str, city: str) -> None:
        job, year = rng.choice(_PROFESSIONS), rng.randrange(1820, 1990)
        passage(name, f"{name} is a {job} born in {city} in {year}.")

    for country in countries:
        passage(country, f"{country} is a country with {rng.randrange(2, 90)} million inhabitants.")
    for city, country in (place for pool in pools for place in pool):
        river = names.word(2)
        passage(city, f"{city} is a city in {country}, on the {river} river.")
    multi_hop = 0
    for k in range(num_questions):
        city, country = rng.choice(pools[-1] if k >= num_questions - held_out else pools[0])
        person = names.person()
        person_passage(person, city)
        if int((k + 1) * one_hop) > int(k * one_hop):
            question = f"In which city was {person} born?"
            questions.append(
                {"question": question, "golden_answers": [city], "data_source": "chain1"}
            )
            continue
        multi_hop += 1
        if multi_hop % 2 == 1:
            company = f"{names.word(2)} {rng.choice(['Works', 'Company', 'Guild', 'Mills'])}"
            industry, year = rng.choice(_INDUSTRIES), rng.randrange(1850, 2010)
            passage(company, f"{company} is a {industry} firm founded by {person} in {year}.")
            question = f"In which city was the founder of {company} born?"
            questions.append(
                {"question": question, "golden_answers": [city], "data_source": "chain2"}
            )
        else:
            book = f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} of {names.word(2)}"
            passage(
                book, f"{book} is a novel by {person}, published in {rng.randrange(1880, 2020)}."
            )
            question = f"In which country was the author of {book} born?"
            answers = [country, f"Republic of {country}"]
            questions.append(
                {"question": question, "golden_answers": answers, "data_source": "chain3"}
            )
    every_city = [place for pool in pools for place in pool]
    for _ in range(num_distractors):
        person_passage(names.person(), rng.choice(every_city)[0])
    rng.shuffle(corpus)
    for i, doc in enumerate(corpus):
        doc["id"] = str(i)
    return SearchDataset(corpus, questions)


def chain_entities(data: SearchDataset, extra: Sequence[str] = ()) -> list[set[str]]:
    """Per question (then per text of ``extra``), the passage titles its chain runs through:
    the titles it names, then every title named in their passages, and so on (the subject, the
    person, the city and the city's country; a chain2 question's country too, one step past its
    answer)."""
    texts: dict[str, str] = {}
    for doc in data.corpus:
        title, _, text = doc["contents"].partition("\n")
        texts[title.strip('"')] = text
    by_length = sorted(texts, key=len, reverse=True)
    pattern = re.compile("|".join(rf"\b{re.escape(t)}\b" for t in by_length))
    named = {title: set(pattern.findall(text)) - {title} for title, text in texts.items()}
    chains = []
    for question in [str(q["question"]) for q in data.questions] + list(extra):
        seen: set[str] = set()
        todo = set(pattern.findall(question))
        while todo:
            title = todo.pop()
            if title not in seen:
                seen.add(title)
                todo |= named.get(title, set())
        chains.append(seen)
    return chains


def shared_entities(
    data: SearchDataset, train: range, held_out: range, example: str | None = None
) -> dict[int, set[str]]:
    """The held-out questions whose chain shares an entity with a training question's chain
    or with the chain of ``example`` (the worked example's question, if any), and what they
    share."""
    chains = chain_entities(data, [example] if example else [])
    seen: set[str] = set().union(*(chains[k] for k in train))
    if example:
        seen |= chains[-1]
    return {k: chains[k] & seen for k in held_out if chains[k] & seen}


def read_dataset(data_dir: str | Path) -> SearchDataset:
    """The ``corpus.jsonl`` and ``qa.jsonl`` of ``data_dir``."""
    folder = Path(data_dir)
    rows = [
        [json.loads(line) for line in (folder / name).read_text().splitlines() if line.strip()]
        for name in ("corpus.jsonl", "qa.jsonl")
    ]
    return SearchDataset(rows[0], rows[1])


def write_dataset(
    out_dir: str | Path,
    seed: int = 0,
    num_questions: int = 200,
    *,
    one_hop: float = 0.0,
    held_out: int = 0,
) -> SearchDataset:
    """Writes ``corpus.jsonl`` and ``qa.jsonl`` into ``out_dir``; returns what it wrote."""
    data = generate(seed, num_questions, one_hop=one_hop, held_out=held_out)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", data.corpus), ("qa.jsonl", data.questions)):
        lines = (json.dumps(r, ensure_ascii=False, sort_keys=True) for r in rows)
        (out / name).write_text("".join(line + "\n" for line in lines))
    return data

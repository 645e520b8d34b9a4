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
"""

from __future__ import annotations

import json
import random
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


def generate(seed: int = 0, num_questions: int = 200, num_distractors: int = 60) -> SearchDataset:
    """The world of ``seed``: about half the questions need 2 searches, half 3."""
    rng = random.Random(seed)
    names = _Names(rng)
    countries = [names.word(3) for _ in range(max(4, num_questions // 20))]
    cities = [(names.word(3), rng.choice(countries)) for _ in range(max(8, num_questions // 4))]
    corpus: list[dict[str, str]] = []
    questions: list[dict[str, object]] = []

    def passage(title: str, text: str) -> None:
        corpus.append({"id": str(len(corpus)), "contents": f'"{title}"\n{text}'})

    def person_passage(name: str, city: str) -> None:
        job, year = rng.choice(_PROFESSIONS), rng.randrange(1820, 1990)
        passage(name, f"{name} is a {job} born in {city} in {year}.")

    for country in countries:
        passage(country, f"{country} is a country with {rng.randrange(2, 90)} million inhabitants.")
    for city, country in cities:
        river = names.word(2)
        passage(city, f"{city} is a city in {country}, on the {river} river.")
    for k in range(num_questions):
        city, country = rng.choice(cities)
        person = names.person()
        person_passage(person, city)
        if k % 2 == 0:
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
    for _ in range(num_distractors):
        person_passage(names.person(), rng.choice(cities)[0])
    rng.shuffle(corpus)
    for i, doc in enumerate(corpus):
        doc["id"] = str(i)
    return SearchDataset(corpus, questions)


def write_dataset(out_dir: str | Path, seed: int = 0, num_questions: int = 200) -> SearchDataset:
    """Writes ``corpus.jsonl`` and ``qa.jsonl`` into ``out_dir``; returns what it wrote."""
    data = generate(seed, num_questions)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", data.corpus), ("qa.jsonl", data.questions)):
        lines = (json.dumps(r, ensure_ascii=False, sort_keys=True) for r in rows)
        (out / name).write_text("".join(line + "\n" for line in lines))
    return data

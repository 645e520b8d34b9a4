"""The mutant list stays applicable: each snippet occurs exactly once in its file and its suite
exists (a refactor that moves the code makes the mutant stale, and this test names it)."""

from pathlib import Path

import pytest
from mutants import MUTANTS, SUITES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_applies_to_the_code_as_it_is(mutant):
    text = (ROOT / "python" / "agentgym" / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.path}: {mutant.old!r}"
    assert mutant.new != mutant.old
    assert all((ROOT / f).exists() for f in SUITES[mutant.suite])


def test_mutant_names_are_unique():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)

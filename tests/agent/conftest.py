"""A tokenizer with the ChatML template, trained locally for the turn tests."""

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from agentgym.models import train_tokenizer  # noqa: E402

CORPUS = [
    "Your goal: go to the red ball. There is a red ball 1 right in front of you 3 steps away.",
    "Thought: the ball is ahead.\nAction: move forward",
    "Crafting commands:\ncraft 1 blue dye using 1 lapis lazuli\nGoal: craft blue dye.",
    "Got 1 lapis lazuli. Inventory: [blue dye] (1). Could not find enough items to craft.",
] * 5


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=400)

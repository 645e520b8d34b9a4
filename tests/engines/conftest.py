"""A tiny model shared by the engine tests (built once per session, no downloads)."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the OpenMP
# threads of parallel test processes fight each other (measured: 10x slower decode steps).
torch.set_num_threads(1)

from agentgym.models import TinyModelSpec, build_tiny_model, load_model  # noqa: E402

TEST_SPEC = TinyModelSpec(
    vocab_size=400,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)

CORPUS = [
    "Your goal: go to the red ball. In front of you in this room, you can see several objects: "
    "There is a red ball 1 right in front of you 3 steps away. The room has walls around you.",
    "Available actions: turn left, turn right, move forward, go to red ball 1, toggle",
    "Crafting commands:\ncraft 1 blue dye using 1 lapis lazuli\nGoal: craft blue dye.",
    "Thought: the ball is ahead.\nAction: move forward",
    "Got 1 lapis lazuli. Crafted 1 minecraft:blue_dye. Inventory: [blue dye] (1)",
] * 3


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("engines") / "tiny", CORPUS, TEST_SPEC)


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path):
    return load_model(tiny_dir)

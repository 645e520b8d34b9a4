"""A tiny menu-policy model shared by the actor and CLI tests (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.config import load_config  # noqa: E402

TINY_OVERRIDES = [
    "model.tiny.vocab_size=320",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.max_position_embeddings=1024",
    "actor.max_context_tokens=1024",
    "model.corpus_episodes=8",
    "tasks.eval.limit=6",
    "eval.samples=2",
]


def tiny_config(run_dir: Path, *more: str):
    """The quickstart config shrunk for tests, writing into ``run_dir``."""
    root = Path(__file__).resolve().parents[2]
    return load_config(
        root / "configs" / "quickstart.yaml", [*TINY_OVERRIDES, f"run_dir={run_dir}", *more]
    )


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the OpenMP
    threads of parallel processes fight each other (as in tests/engines and tests/learner)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def menu_run(tmp_path_factory: pytest.TempPathFactory):
    """(config, model, tokenizer) of a tiny menu policy in a session-wide run dir."""
    from agentgym.actor.policy import load_policy, prepare_model

    config = tiny_config(tmp_path_factory.mktemp("menu") / "run")
    prepare_model(config)
    model, tokenizer = load_policy(config)
    return config, model, tokenizer

"""Every config in configs/ loads: its keys exist, its values pass the load-time checks (the
recipes' headers tell users to run them as written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.config import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_the_configs_folder_is_found():
    assert len(CONFIGS) >= 10 and any(p.name == "quickstart.yaml" for p in CONFIGS)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_shipped_config_loads(path: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # their relative paths (runs/...) need not exist to load
    # the SmolLM2 recipes read the fetched model's context length at load: its config.json
    smollm2 = tmp_path / "runs/models/smollm2-135m-instruct"
    smollm2.mkdir(parents=True)
    (smollm2 / "config.json").write_text(
        json.dumps({"model_type": "llama", "max_position_embeddings": 8192})
    )
    config = load_config(path)
    assert config.entries, path.name

"""The import arrows point down: envs/ is the ground floor (it imports no agentgym layer above
it, only the HTTP guards), the transport imports only itself, and the offline learners read
their config from learner/ itself."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "agentgym"
BELOW_ENVS = {"agentgym.envs", "agentgym._envserver", "agentgym.httpguard", "agentgym.asgiguard"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _layer(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_envs_imports_no_layer_above_it():
    upward = {
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in sorted((PACKAGE / "envs").rglob("*.py"))
        for module in _imports(path)
        if module.startswith("agentgym.") and _layer(module) not in BELOW_ENVS
    }
    assert not upward


def test_offline_learners_do_not_import_the_run_config():
    for name in ("sft.py", "dpo.py", "offline.py"):
        assert "agentgym.config" not in _imports(PACKAGE / "learner" / name), name


def test_transport_imports_no_layer_above_it():
    """The transport (its weight protocol and paths included) imports only itself: the learner,
    the actor and the engines build on it, never the other way."""
    upward = {
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in sorted((PACKAGE / "transport").rglob("*.py"))
        for module in _imports(path)
        if module.startswith("agentgym.") and _layer(module) != "agentgym.transport"
    }
    assert not upward

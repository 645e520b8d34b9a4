"""Prints the requirements of pyproject.toml's optional extras, one per line, for pip:
``python3 tests/extra_requirements.py openenv skyrl trl | xargs pip install`` installs what
those extras need without rebuilding agentgym (tests/run.sh, tests/run_verl.sh)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip carries the same parser
    from pip._vendor import tomli as tomllib


def requirements(extras: list[str]) -> list[str]:
    """The requirement strings of ``extras``; an unknown extra is an error naming the known."""
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    known = pyproject["project"]["optional-dependencies"]
    unknown = [e for e in extras if e not in known]
    if unknown:
        raise SystemExit(f"unknown extra {unknown[0]!r}; pyproject.toml has {', '.join(known)}")
    return [r for e in extras for r in known[e]]


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))

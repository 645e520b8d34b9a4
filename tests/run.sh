#!/usr/bin/env bash
# The test command: installs agentgym with its test extras from this checkout, then runs the
# Rust tests and the Python suite (tests marked slow are left out; `bash tests/run.sh -m slow`
# runs only those: the full parity sweeps, the ScienceWorld episode, whole training runs).
# Usage: bash tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --upgrade "pip>=23" "maturin>=1.5,<2"
# [train] pulls torch (large, CUDA wheels from PyPI): installed once per machine, then cached.
python3 -m pip install --quiet ".[dev,train]"

echo "== cargo test"
cargo test --quiet -p agentgym-envserver

echo "== pytest"
# python/ is not on sys.path: the tests import the installed package with its native module.
python3 -m pytest -c pyproject.toml --rootdir . -m "not slow" tests "$@"

#!/usr/bin/env bash
# The test command: installs agentgym with its test extras from this checkout, then runs the
# Rust tests and the Python suite (tests marked slow are left out; `bash tests/run.sh -m slow`
# runs only those: the full parity sweeps, the ScienceWorld episode, whole training runs).
# Usage: bash tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== pip install pip, maturin"
python3 -m pip install --quiet --upgrade "pip>=23" "maturin>=1.5,<2"
# [train] pulls torch (large, CUDA wheels from PyPI): installed once per machine, then cached.
# pip's own lines show the progress (what it downloads, the Rust build); the packages already
# there are left out of the listing.
echo "== pip install .[dev,train] (first time: torch download and the Rust build, minutes)"
python3 -m pip install --progress-bar off ".[dev,train]" 2>&1 \
    | sed -u -e '/^Requirement already satisfied/d' -e '/^  Requirement already/d'

# The hub's browser tests drive Debian's chromium with selenium; install it where we can
# (root with apt-get), else those tests skip and say why.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install chromium chromium-driver (hub browser tests)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
        || echo "could not install chromium: the hub's browser tests will skip"
fi

echo "== cargo test"
cargo test --quiet -p agentgym-envserver

echo "== pytest"
# python/ is not on sys.path: the tests import the installed package with its native module.
python3 -m pytest -c pyproject.toml --rootdir . -m "not slow" tests "$@"

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

# The hub's browser tests drive Debian's chromium with selenium. Installing it is a system-wide
# change, so it happens only when asked: AGENTGYM_BROWSER_TESTS=1 (as root, with apt-get).
# Otherwise those tests skip and say how to run them.
if ! command -v chromium >/dev/null; then
    if [ "${AGENTGYM_BROWSER_TESTS:-0}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== apt-get install chromium chromium-driver (AGENTGYM_BROWSER_TESTS=1: the hub's browser tests)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
            || echo "could not install chromium: the hub's browser tests will skip"
    else
        echo "== chromium not found: the hub's browser tests will skip (to run them, install"
        echo "   chromium and chromium-driver, or run AGENTGYM_BROWSER_TESTS=1 bash tests/run.sh"
        echo "   as root, which apt-get installs them system-wide)"
    fi
fi

# --- Other RL stacks (agentgym.integrations, docs/integrations/) ---------------------------
# OpenEnv, SkyRL-Gym and TRL live beside agentgym: their extras go into this environment, held to
# the torch and transformers [train] installed (a constraints file), so that their tests below run
# against the real packages. verl pins transformers below agentgym's: its tests run in a virtual
# environment of their own, in their own step after pytest (tests/run_verl.sh).
# AGENTGYM_STACK_TESTS=0 skips both (the integration tests then skip and say how to run them).
if [ "${AGENTGYM_STACK_TESTS:-1}" = 1 ]; then
    echo "== pip install .[openenv,skyrl,trl] deps, torch/transformers held ($SECONDS s so far)"
    pins="$(mktemp)"
    python3 -m pip freeze | grep -iE '^(torch|transformers|tokenizers|numpy)==' >"$pins" || true
    python3 tests/extra_requirements.py openenv skyrl trl \
        | xargs -r python3 -m pip install --progress-bar off -c "$pins" 2>&1 \
        | sed -u -e '/^Requirement already satisfied/d' -e '/^  Requirement already/d'
    rm -f "$pins"
fi

# The release profile, with the features the wheel was built with where dependencies see them:
# cargo reuses every dependency pip's build just compiled (target/ in this checkout) and builds
# only this crate's tests.
echo "== cargo test --release ($SECONDS s so far)"
cargo test --release --quiet -p agentgym-envserver

echo "== pytest ($SECONDS s so far)"
# python/ is not on sys.path: the tests import the installed package with its native module.
python3 -m pytest -c pyproject.toml --rootdir . -m "not slow" tests "$@"

if [ "${AGENTGYM_STACK_TESTS:-1}" = 1 ]; then
    echo "== verl's integration tests, in their own virtual environment ($SECONDS s so far)"
    bash tests/run_verl.sh
fi
echo "== done in $SECONDS s"

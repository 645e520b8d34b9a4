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

# ==== The real parts: a browser, a Ray cluster, ScienceWorld's Java server ======================
# CI (.ci/run sets AGENTGYM_CI=1; a root machine with apt and PyPI) installs what these tests
# need where it is missing, so that they run on every landing instead of skipping:
#   chromium, chromium-driver (apt)            tests/hub/test_hub_browser.py
#   ray[default] (pip, the [ray] extra)        tests/cli/test_ray_launch.py (slow)
#   scienceworld (pip, the [sciworld] extra;   tests/http/test_http_sciworld.py (slow)
#     Java 11+: default-jre-headless from apt when there is no java)
# A machine that has them installs nothing again. Their slow tests run after the default suite,
# and there a skip of any of these tests fails the run (AGENTGYM_REQUIRE_REAL_PARTS=1,
# tests/conftest.py). Without AGENTGYM_CI nothing is installed system-wide and the tests skip,
# saying how to run them; AGENTGYM_BROWSER_TESTS=1 (as root) installs the browser alone.
REAL_PARTS_SLOW=(tests/cli/test_ray_launch.py tests/http/test_http_sciworld.py)
RAY_REQ="ray[default]>=2.9"       # = pyproject's [ray] extra (tests/test_run_script.py checks)
SCIWORLD_REQ="scienceworld>=1.1"  # = pyproject's [sciworld] extra's scienceworld
missing_module() {
    ! python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"
}
real_parts=0
if [ "${AGENTGYM_CI:-0}" = 1 ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "AGENTGYM_CI=1: the real parts need root and apt-get" >&2
        exit 2
    fi
    real_parts=1
    export AGENTGYM_REQUIRE_REAL_PARTS=1
    apt_missing=()
    command -v chromium >/dev/null || apt_missing+=(chromium)
    # Debian's chromium-driver puts the driver here, off PATH (AGENTGYM_CHROMEDRIVER: elsewhere)
    command -v chromedriver >/dev/null || [ -x "${AGENTGYM_CHROMEDRIVER:-/usr/lib/chromium/chromedriver}" ] \
        || apt_missing+=(chromium-driver)
    command -v java >/dev/null || apt_missing+=(default-jre-headless)
    if [ ${#apt_missing[@]} -gt 0 ]; then
        echo "== apt-get install ${apt_missing[*]} (the real parts; $SECONDS s so far)"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_missing[@]}" >/dev/null
    fi
    pip_missing=()
    missing_module ray && pip_missing+=("$RAY_REQ")
    missing_module scienceworld && pip_missing+=("$SCIWORLD_REQ")
    if [ ${#pip_missing[@]} -gt 0 ]; then
        echo "== pip install ${pip_missing[*]} (the real parts; $SECONDS s so far)"
        python3 -m pip install --progress-bar off "${pip_missing[@]}" 2>&1 \
            | sed -u -e '/^Requirement already satisfied/d' -e '/^  Requirement already/d'
    fi
elif ! command -v chromium >/dev/null; then
    if [ "${AGENTGYM_BROWSER_TESTS:-0}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== apt-get install chromium chromium-driver (AGENTGYM_BROWSER_TESTS=1: the hub's browser tests)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
            || echo "could not install chromium: the hub's browser tests will skip"
    else
        echo "== chromium not found: the hub's browser tests will skip (to run them, install"
        echo "   chromium and chromium-driver, or run AGENTGYM_BROWSER_TESTS=1 bash tests/run.sh"
        echo "   as root, which apt-get installs them system-wide); CI (AGENTGYM_CI=1) also"
        echo "   installs ray and scienceworld and runs their tests"
    fi
fi
# ==== end of the real parts ===================================================================

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
if [ "$real_parts" = 1 ]; then
    echo "== pytest, the real parts' slow tests ($SECONDS s so far)"
    python3 -m pytest -c pyproject.toml --rootdir . -m slow "${REAL_PARTS_SLOW[@]}"
fi

if [ "${AGENTGYM_STACK_TESTS:-1}" = 1 ]; then
    echo "== verl's integration tests, in their own virtual environment ($SECONDS s so far)"
    bash tests/run_verl.sh
fi
echo "== done in $SECONDS s"
